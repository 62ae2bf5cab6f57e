"""The local env pool with the runner's turn rules, SeedSchedule (spec 4.2-4.5), prompt texts (5.1-5.3)."""

from __future__ import annotations

import math

import pytest
from pydantic import ConfigDict

from ragen_core import registry
from ragen_core.errors import EnvError
from ragen_core.interfaces.env import Env, EnvConfig, StepResult
from ragen_core.interfaces.env_pool import EnvRef, StepRequest
from ragen_core.rollout import prompts
from ragen_core.rollout.env_pool import LocalEnvPool
from ragen_core.rollout.episodes import EpisodeRecord, SeedSchedule, apply_outcome, plan_turn, reset_requests, turn_info
from ragen_core.rollout.parser import parse_reply
from ragen_core.rollout.types import Trajectory
from ragen_core.specs import EnvSpec


class EchoConfig(EnvConfig):
    model_config = ConfigDict(allow_inf_nan=True)  # the NaN reward below is the point (plugin settings refuse it otherwise)

    bad_reward: float = 0.0
    """Reward returned by the action ``Boom`` (set to NaN to test the guard)."""


class EchoEnv(Env):
    """Records resets; ``Go`` pays 1 and ends the episode successfully, ``Stay`` pays 0.25."""

    config_class = EchoConfig

    @property
    def action_names(self) -> list[str]:
        return ["Go", "Stay", "Boom"]

    def instruction(self) -> str:
        return "Echo."

    def reset(self, seed: int, *, member: int = 0, mode: str = "train") -> str:
        self.seed, self.member, self.mode, self.log = seed, member, mode, []
        return f"seed={seed}"

    def render(self) -> str:
        return f"seed={self.seed} steps={len(self.log)}"

    def step(self, action: str) -> StepResult:
        self.log.append(action)
        if action == "Boom":
            return StepResult(self.render(), self.config.bad_reward, False, {})
        done = action == "Go"
        return StepResult(self.render(), 1.0 if done else 0.25, done, {"success": done, "n": len(self.log)})


class FreeEnv(EchoEnv):
    """No action vocabulary: actions pass through verbatim."""

    @property
    def action_names(self) -> None:
        return None


@pytest.fixture(scope="module", autouse=True)
def _register():
    registry.register(EnvSpec(name="pool-test-echo", config_model=EchoConfig, factory=f"{__name__}:EchoEnv"))
    registry.register(EnvSpec(name="pool-test-free", config_model=EchoConfig, factory=f"{__name__}:FreeEnv"))


def reply(answer: str, cap: int = 2):
    return parse_reply(f"<think>t</think><answer>{answer}</answer>", max_actions=cap)


class Episodes:
    """A local pool driven by the runner's turn rules, one reply at a time (the runner minus the model)."""

    def __init__(self, name, env_config=None, *, env_groups=1, group_size=1, format_penalty=-0.1, seeds=None):
        self.pool = LocalEnvPool(EnvRef(name=name, config=env_config or {}))
        self.shape, self.format_penalty = (env_groups, group_size), format_penalty
        self.seeds = seeds if seeds is not None else SeedSchedule()

    def reset(self, mode="train", seed=None):
        groups, size = self.shape
        requests = reset_requests(self.seeds.next_base(mode, groups, seed), groups, size, mode)
        eps = []
        for r, start in zip(requests, self.pool.reset(requests)):
            traj = Trajectory(env="echo", tag="echo", group_id=r.episode_id // size, member=r.member, seed=r.seed, env_id=r.episode_id)
            eps.append(EpisodeRecord(traj=traj, observation=start.observation, facts=start.facts))
        return eps

    def env(self, ep):
        return self.pool.instance(ep.traj.env_id)

    def step(self, ep, parsed):
        """One turn of ``ep``: returns ``(executed actions, reward, penalty, valid, info)``."""
        plan = plan_turn(parsed, ep.facts, ep.actions_left, self.format_penalty)
        (outcome,) = self.pool.step([StepRequest(ep.traj.env_id, plan.actions)])
        apply_outcome(ep, plan, outcome)
        return outcome.executed, outcome.reward, plan.penalty, plan.valid, turn_info(outcome, plan)


def test_seed_schedule_matches_spec():
    s = SeedSchedule()
    assert [s.next_base("train", 8) for _ in range(2)] == [10000, 10008]
    assert s.next_base("val", 512) == 123 and s.next_base("val", 512) == 123
    assert s.next_base("train", 8) == 10016
    s7 = SeedSchedule(train_base=7)
    assert [s7.next_base("train", 1), s7.next_base("train", 1)] == [7, 8]
    # Explicit seed: used as the base, and the counter continues after its groups.
    assert s.next_base("train", 4, seed=20000) == 20000
    assert s.next_base("train", 4) == 20004
    state = s.state_dict()
    t = SeedSchedule()
    t.load_state_dict(state)
    assert t.next_base("train", 4) == 20008


def test_groups_share_seed_members_differ():
    pool = Episodes("pool-test-echo", env_groups=3, group_size=2)
    eps = pool.reset("train")
    assert [(e.traj.group_id, e.traj.member, e.traj.seed) for e in eps] == [
        (0, 0, 10000), (0, 1, 10000), (1, 0, 10001), (1, 1, 10001), (2, 0, 10002), (2, 1, 10002),
    ]
    assert [(pool.env(e).seed, pool.env(e).member, pool.env(e).mode) for e in eps][:2] == [(10000, 0, "train"), (10000, 1, "train")]
    assert eps[2].observation == "seed=10001"
    assert [e.traj.seed for e in pool.reset("train")][::2] == [10003, 10004, 10005]
    assert {pool.env(e).mode for e in pool.reset("val")} == {"val"}
    assert pool.seeds.state_dict()["counter"] == 6


def test_mapping_is_case_insensitive_and_drops_unknown():
    pool = Episodes("pool-test-echo")
    (ep,) = pool.reset()
    actions, reward, penalty, valid, _ = pool.step(ep, reply(" stay || JUMP ", cap=5))
    assert actions == ["Stay"] and pool.env(ep).log == ["Stay"]
    assert penalty == -0.1 and not valid and reward == 0.25


def test_no_usable_action_does_not_step_env():
    pool = Episodes("pool-test-echo", format_penalty=-0.5)
    (ep,) = pool.reset()
    for r in (parse_reply("garbage"), reply("Jump"), reply("")):
        actions, _, penalty, _, info = pool.step(ep, r)
        assert actions == [] and penalty == -0.5 and info == {"manager_invalid_action": True}
        assert ep.warn_invalid and ep.num_actions == 0 and not ep.done
    assert pool.env(ep).log == []
    pool.step(ep, reply("Stay"))
    assert not ep.warn_invalid


def test_stop_at_first_done_and_status():
    pool = Episodes("pool-test-echo")
    (ep,) = pool.reset()
    actions, reward, _, _, info = pool.step(ep, reply("Stay || Go || Stay", cap=3))
    assert actions == ["Stay", "Go"] and reward == 1.25 and info == {"success": True, "n": 2}
    t = ep.traj
    assert ep.done and t.terminated and not t.truncated and t.success and t.end_reason == "done"


def test_episode_action_budget():
    pool = Episodes("pool-test-echo", {"max_actions_per_episode": 3})
    (ep,) = pool.reset()
    pool.step(ep, reply("Stay || Stay"))
    assert ep.actions_left == 1 and not ep.done
    actions, _, penalty, _, _ = pool.step(ep, reply("Stay || Go"))
    assert actions == ["Stay"] and penalty == 0.0
    assert ep.done and ep.traj.truncated and not ep.traj.success and ep.traj.end_reason == "action_budget"


def test_free_form_actions_pass_verbatim():
    pool = Episodes("pool-test-free")
    (ep,) = pool.reset()
    actions, _, penalty, valid, _ = pool.step(ep, reply("anything at all"))
    assert actions == ["anything at all"] and penalty == 0.0 and valid


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_reward_raises_env_error(bad):
    pool = Episodes("pool-test-echo", {"bad_reward": bad}, env_groups=2)
    eps = pool.reset()
    with pytest.raises(EnvError, match=r"pool-test-echo.*seed 10001"):
        pool.step(eps[1], reply("Boom"))


def test_env_exception_becomes_env_error(monkeypatch):
    pool = Episodes("pool-test-echo")
    (ep,) = pool.reset()
    monkeypatch.setattr(pool.env(ep), "step", lambda a: 1 / 0)
    with pytest.raises(EnvError, match="ZeroDivisionError"):
        pool.step(ep, reply("Go"))


def test_bad_shape_rejected():
    with pytest.raises(ValueError):
        reset_requests(10000, 0, 1, "train")


# --------------------------------------------------------------------------- prompts
@pytest.mark.parametrize(
    ("value", "shown"),
    [(-0.30000000000000004, "-0.3"), (10.9, "10.9"), (0.0, "0.0"), (-0.0, "0.0"), (1, "1.0"), (0.123456, "0.1235"), (-1e-9, "0.0")],
)
def test_reward_display_is_rounded(value, shown):
    assert prompts.format_reward(value) == shown
    assert prompts.reward_prefix(value) == f"Reward:\n{shown}\n"


def test_turn_message_layout():
    text = prompts.turn_message(2, "#P_#", actions_left=8, max_tokens=120, think=True)
    head = "\nTurn 2:\nState:\n#P_#\n"
    assert text.startswith(head) and text.endswith(" words (tokens).\n")
    line = text[len(head) :]
    assert line.count("\n") == 1
    assert "8" in line and prompts.THINK_TEMPLATE in line and "120" in line
    warned = prompts.turn_message(2, "#P_#", actions_left=8, max_tokens=120, think=False, warn_invalid=True)
    assert warned.startswith(head + prompts.INVALID_WARNING + "\n") and prompts.ANSWER_TEMPLATE in warned


def test_system_prompt():
    base = prompts.system_prompt("Do X.")
    assert base == "You are a helpful assistant. Do X."
    full = prompts.system_prompt("Do X.", action_names=["Up"], max_actions_per_episode=10)
    assert full.startswith(base) and "10" in full and "' || '" in full and full.endswith("\n")


def test_memory_message():
    past = [prompts.PastTurn(1, "s1", "<answer>Up</answer>", -0.30000000000000004)]
    text = prompts.memory_message(2, "s2", past, actions_left=9, max_tokens=50)
    assert "Turn 1 State:\ns1" in text and "Turn 1 Reward:\n-0.3" in text and "Current Turn (Turn 2):\nState:\ns2" in text
    assert prompts.memory_message(1, "s1", [], actions_left=10, max_tokens=50).startswith("(Turn 1):\nState:\ns1")


def test_an_env_error_raised_on_purpose_keeps_its_own_hints():
    from ragen_core.errors import ConfigError
    from ragen_core.rollout.env_pool import run_actions

    class ServerGone:
        def __init__(self, exc: Exception) -> None:
            self.exc = exc

        def step(self, action):
            raise self.exc

    with pytest.raises(EnvError) as err:
        run_actions(ServerGone(EnvError("no answer from the shop at http://x", ["see the server's log"])), 0, ("buy",), label="env 'shop' (seed 1)")
    assert err.value.message == "env 'shop' (seed 1) failed on action 'buy': no answer from the shop at http://x"
    assert err.value.hints == ["see the server's log"]
    with pytest.raises(EnvError, match=r"failed on action 'x': ConfigError: not a checker$"):
        run_actions(ServerGone(ConfigError("not a checker")), 0, ("x",), label="env 'e'")
    with pytest.raises(EnvError) as err:  # an unexpected exception: the env's fault, said as such
        run_actions(ServerGone(KeyError("k")), 0, ("x",), label="env 'e'")
    assert "raised on action 'x': KeyError" in err.value.message and "never an exception" in err.value.hints[0]
