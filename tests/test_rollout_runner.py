"""RolloutRunner: token faithfulness, one generate per turn, penalties, budgets, context modes."""

from __future__ import annotations

import threading
from typing import ClassVar

import pytest

from ragen_core import registry
from ragen_core.engines.scripted import ScriptedEngine
from ragen_core.interfaces.engine import SamplingParams
from ragen_core.interfaces.env import Env, EnvConfig, StepResult
from ragen_core.interfaces.env_pool import EnvRef
from ragen_core.models.tiny import build_byte_tokenizer
from ragen_core.rollout.env_pool import LocalEnvPool
from ragen_core.rollout.layout import episode_layout, loss_mask, turn_samples
from ragen_core.rollout.runner import RolloutConfig, RolloutRunner
from ragen_core.specs import EnvSpec


class LineEnv(Env):
    """Deterministic: position starts at 0, ``Up`` moves +1 (reward 0.5), done at 3 (success)."""

    config_class = EnvConfig

    @property
    def action_names(self) -> list[str]:
        return ["Up", "Down"]

    def instruction(self) -> str:
        return "Reach 3."

    def reset(self, seed: int, *, member: int = 0, mode: str = "train") -> str:
        self.pos, self.seed = 0, seed
        return self.render()

    def render(self) -> str:
        return f"pos={self.pos}"

    def step(self, action: str) -> StepResult:
        self.pos += 1 if action == "Up" else -1
        done = self.pos >= 3
        return StepResult(self.render(), 0.5, done, {"success": done, "action_is_valid": True})


LINE = "rollout-test-line"


@pytest.fixture(scope="module")
def tok():
    registry.register(EnvSpec(name=LINE, config_model=EnvConfig, factory=f"{__name__}:LineEnv"))
    return build_byte_tokenizer()


def make_runner(tok, engine, **cfg):
    env_config = cfg.pop("env_config", {})
    config = RolloutConfig(**{"env_groups": 1, "group_size": 1, **cfg})
    return RolloutRunner(EnvRef(name=LINE, config=env_config), engine, tok, config)


def ids_of(tok, text):
    return tok.encode(text, add_special_tokens=False)


def test_scripted_success_episode(tok):
    eng = ScriptedEngine(["go</think><answer>Up || Up</answer>", "again</think><answer>up</answer>"], tok)
    trajs = make_runner(tok, eng).run()
    (t,) = trajs
    assert [turn.actions for turn in t.turns] == [["Up", "Up"], ["Up"]]
    assert [turn.reward for turn in t.turns] == [1.0, 0.5]
    assert [turn.penalty for turn in t.turns] == [0.0, 0.0]
    assert t.turns[0].reasoning == "go" and t.turns[0].answer == "Up || Up"
    assert t.turns[0].reasoning_ids == ids_of(tok, "go")
    assert t.turns[0].response_text == "<think>go</think><answer>Up || Up</answer>"
    assert t.turns[0].observation == "pos=0" and t.turns[1].observation == "pos=2"
    assert t.terminated and not t.truncated and t.success and t.end_reason == "done"
    assert t.final_observation == "pos=3"
    assert t.total_reward == 1.5
    assert t.system_prompt.startswith("You are a helpful assistant. Reach 3.")
    assert "up to 10 actions" in t.system_prompt


def test_full_mode_prompts_are_append_only_and_text_is_as_expected(tok):
    eng = ScriptedEngine(["a</think><answer>Up</answer>"], tok)
    (t,) = make_runner(tok, eng).run()
    assert len(t.turns) == 3
    for k in range(2):
        prev = t.turns[k].prompt_ids + t.turns[k].response_ids
        assert t.turns[k + 1].prompt_ids[: len(prev)] == prev
    # The reply already ends with <|im_end|>, so it is not doubled; the next user turn follows.
    text = tok.decode(t.turns[1].prompt_ids)
    assert "<answer>Up</answer><|im_end|>\n<|im_start|>user\nReward:\n0.5\n\nTurn 2:\nState:\npos=1\n" in text
    assert text.endswith("<|im_start|>assistant\n<think>")
    assert text.count("<|im_end|>") == 4


def test_reply_cut_without_eos_gets_end_of_turn_appended(tok):
    reply = ids_of(tok, "thinking forever")
    eng = ScriptedEngine([reply], tok)
    (t,) = make_runner(tok, eng, env_config={"max_turns": 2}).run()
    first, second = t.turns
    assert first.finish_reason == "length"
    n = len(first.prompt_ids) + len(first.response_ids)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert second.prompt_ids[:n] == first.prompt_ids + first.response_ids
    assert second.prompt_ids[n] == im_end  # closed by the runner, not trained
    ids, spans, _ends = episode_layout(t)
    assert im_end not in [ids[i] for s, e in spans for i in range(s, e)]


def test_layout_keeps_sampled_ids_where_retokenising_would_change_them(tok):
    # "<think>" spelled as 7 byte tokens and an invalid UTF-8 byte: decoding then encoding
    # gives different ids, so a text-based pipeline would train on tokens never sampled.
    weird = ids_of(tok, "x") + [ord(c) for c in "<think>"] + [0xFF] + ids_of(tok, "</think><answer>Up</answer>")
    eng = ScriptedEngine([weird + [tok.convert_tokens_to_ids("<|im_end|>")]], tok)
    (t,) = make_runner(tok, eng, env_config={"max_turns": 2}).run()
    ids, spans, ends = episode_layout(t)
    for turn, (s, e) in zip(t.turns, spans):
        assert ids[s:e] == turn.response_ids
        assert ids[s : s + len(weird)] == weird
    assert tok.encode(tok.decode(weird), add_special_tokens=False) != weird
    assert tok.encode(tok.decode(ids), add_special_tokens=False) != ids
    assert ends == [e - 1 for _, e in spans]
    # The reply still parses for the env (the decoded text has the tags).
    assert t.turns[0].actions == ["Up"]


def test_generation_prefix_is_prompt_not_trained(tok):
    eng = ScriptedEngine(["a</think><answer>Up</answer>"], tok)
    (t,) = make_runner(tok, eng).run()
    ids, spans, _ = episode_layout(t)
    think = tok.convert_tokens_to_ids("<think>")
    mask = loss_mask(len(ids), spans)
    for s, e in spans:
        assert ids[s - 1] == think and mask[s - 1] == 0
        assert all(mask[i] == 1 for i in range(s, e))
    assert sum(mask) == t.num_generated_tokens


def test_no_think_mode(tok):
    eng = ScriptedEngine(["Up || Up</answer>"], tok)
    (t,) = make_runner(tok, eng, enable_think=False).run()
    assert t.turns[0].prompt_ids[-1] == tok.convert_tokens_to_ids("<answer>")
    assert t.turns[0].actions == ["Up", "Up"] and t.turns[0].reasoning is None
    assert "<answer> [your answer] </answer>" in tok.decode(t.turns[0].prompt_ids)


def test_format_penalty_warning_and_unknown_actions(tok):
    replies = ["no tags at all", "a</think><answer>Up || Jump</answer>", "a</think><answer>UP</answer>"]
    eng = ScriptedEngine(replies, tok)
    (t,) = make_runner(tok, eng, env_config={"max_turns": 3}).run()
    bad, mixed, good = t.turns
    assert (bad.actions, bad.penalty, bad.valid, bad.reward) == ([], -0.1, False, 0.0)
    assert bad.info == {"manager_invalid_action": True}
    assert (mixed.actions, mixed.penalty, mixed.valid, mixed.reward) == (["Up"], -0.1, False, 0.5)
    assert (good.actions, good.penalty, good.valid) == (["Up"], 0.0, True)
    assert t.penalty == pytest.approx(-0.2)
    warning = "no valid action"
    assert warning in tok.decode(eng.calls[1][0][len(t.turns[0].prompt_ids) :])
    assert warning not in tok.decode(eng.calls[2][0][len(t.turns[1].prompt_ids) :])


def test_action_budget_ends_episode(tok):
    eng = ScriptedEngine(["a</think><answer>Up || Down</answer>"], tok)
    (t,) = make_runner(tok, eng, env_config={"max_actions_per_episode": 3, "max_turns": 5}).run()
    assert [turn.actions for turn in t.turns] == [["Up", "Down"], ["Up"]]
    assert t.terminated and t.truncated and not t.success and t.end_reason == "action_budget"


def test_per_turn_cap_from_rollout_config(tok):
    eng = ScriptedEngine(["a</think><answer>Up || Up || Up</answer>"], tok)
    (t,) = make_runner(tok, eng, max_actions_per_turn=1, max_turns=1).run()
    assert t.turns[0].actions == ["Up"] and t.turns[0].answer == "Up" and t.turns[0].penalty == 0.0
    assert t.end_reason == "max_turns" and not t.terminated and not t.success


def test_one_generate_per_turn_and_finished_episodes_leave_the_batch(tok):
    # Even env ids answer Up || Up (done in turn 2); odd ones answer junk for all 4 turns.
    # Rows of a call are the live episodes in env-id order, so after turn 2 only odd ids remain.
    def script(call, row, prompt):
        return "a</think><answer>Up || Up</answer>" if call < 2 and row % 2 == 0 else "junk"

    eng = ScriptedEngine(script, tok)
    runner = make_runner(tok, eng, env_groups=2, group_size=2, env_config={"max_turns": 4})
    trajs = runner.run()
    assert [len(c) for c in eng.calls] == [4, 4, 2, 2]
    assert [len(t.turns) for t in trajs] == [2, 4, 2, 4]
    assert [t.success for t in trajs] == [True, False, True, False]


def test_a_rollout_tells_the_engine_when_it_ends(tok):
    eng = ScriptedEngine(["a</think><answer>Up</answer>"], tok)
    ends: list[int] = []
    eng.rollout_done = lambda: ends.append(len(eng.calls))  # type: ignore[method-assign]
    runner = make_runner(tok, eng, env_groups=2, max_turns=3)
    runner.run()
    assert ends == [3]  # once, after the third and last turn's generate
    runner.run()
    assert ends == [3, 6]


def test_a_rollout_that_raises_still_tells_the_engine(tok):
    """An env (or the engine) failing mid-rollout must not leave the engine's kept caches in memory
    until the next weight sync: the runner says the rollout is over whatever happened."""
    eng = ScriptedEngine(["a</think><answer>Up</answer>"], tok)
    ends: list[int] = []
    eng.rollout_done = lambda: ends.append(len(eng.calls))  # type: ignore[method-assign]
    runner = make_runner(tok, eng, env_groups=2, max_turns=3)
    real_step = runner.pool.step
    turns = [0]

    def failing_step(requests):
        turns[0] += 1
        if turns[0] == 2:
            raise RuntimeError("env worker crashed")
        return real_step(requests)

    runner.pool.step = failing_step  # type: ignore[method-assign]
    from ragen_core.errors import PluginError

    with pytest.raises(PluginError, match="raised in step: RuntimeError: env worker crashed"):  # named, not bare
        runner.run()
    assert ends == [2]  # after the second turn's generate, whose step raised


def test_seeds_groups_and_checkpointed_counter(tok):
    eng = ScriptedEngine(["junk"], tok)
    runner = make_runner(tok, eng, env_groups=3, group_size=2, max_turns=1)
    first = runner.run()
    assert [(t.seed, t.group_id, t.member, t.env_id) for t in first] == [
        (10000, 0, 0, 0), (10000, 0, 1, 1), (10001, 1, 0, 2), (10001, 1, 1, 3), (10002, 2, 0, 4), (10002, 2, 1, 5),
    ]
    state = runner.state_dict()
    assert [t.seed for t in runner.run()][::2] == [10003, 10004, 10005]
    assert [t.seed for t in runner.run(mode="val", env_groups=2, group_size=1)] == [123, 124]
    assert [t.seed for t in runner.run(mode="val", env_groups=2, group_size=1)] == [123, 124]
    fresh = make_runner(tok, eng, env_groups=3, group_size=2, max_turns=1)
    fresh.load_state_dict(state)
    assert [t.seed for t in fresh.run()][::2] == [10003, 10004, 10005]


def test_context_budget_ends_episode_with_reason(tok):
    eng = ScriptedEngine(["a</think><answer>Up</answer>"], tok)
    probe = make_runner(tok, eng, max_turns=1).run()[0]
    first_len = len(probe.turns[0].prompt_ids)
    # Room for the first prompt + 10 new tokens, not for the second prompt.
    runner = make_runner(tok, eng, max_model_len=first_len + 10)
    (t,) = runner.run(sampling=SamplingParams(max_new_tokens=10))
    assert len(t.turns) == 1 and t.end_reason == "context_length" and t.truncated and not t.success
    (t0,) = make_runner(tok, eng, max_model_len=first_len + 9).run(sampling=SamplingParams(max_new_tokens=10))
    assert t0.turns == [] and t0.end_reason == "context_length"
    assert episode_layout(t0) == ([], [], [])


@pytest.mark.parametrize("mode", ["last-k", "single-turn"])
def test_windowed_modes_give_one_sample_per_turn(tok, mode):
    eng = ScriptedEngine(["plan</think><answer>Up</answer>"], tok)
    (t,) = make_runner(tok, eng, context_window=mode, max_context_turns=2).run()
    samples = turn_samples(t)
    assert len(samples) == len(t.turns) == 3
    for turn, (ids, spans, ends) in zip(t.turns, samples):
        (s, e), = spans
        assert ids[s:e] == turn.response_ids and ends == [e - 1]
    third = tok.decode(t.turns[2].prompt_ids)
    assert "Turn 3" in third and "Turn 2" in third and "Turn 1" not in third
    assert third.count("<|im_start|>") == (5 if mode == "last-k" else 3)
    with pytest.raises(ValueError):
        episode_layout(t)


def test_a_turn_window_is_refused_where_it_would_be_ignored(tok):
    """Spec 17 L32: the reference ignores its context window in full mode without a word."""
    with pytest.raises(ValueError, match="max_context_turns=2 has no effect with context_window='full'"):
        RolloutConfig(max_context_turns=2)
    assert RolloutConfig(context_window="last-k", max_context_turns=2).max_context_turns == 2
    assert RolloutConfig(context_window="full").max_context_turns is None


def test_windowed_mode_drops_history_to_fit(tok):
    eng = ScriptedEngine(["plan</think><answer>Up</answer>"], tok)
    (probe,) = make_runner(tok, eng, context_window="last-k", max_context_turns=1, max_turns=2).run()
    bare = max(len(turn.prompt_ids) for turn in probe.turns)
    (t,) = make_runner(tok, eng, context_window="last-k", max_context_turns=3, max_model_len=bare + 12).run(
        sampling=SamplingParams(max_new_tokens=12)
    )
    assert len(t.turns) == 3 and all(len(turn.prompt_ids) <= bare for turn in t.turns)
    assert all(turn.actions == ["Up"] for turn in t.turns)
    assert "Turn 2" not in tok.decode(t.turns[2].prompt_ids)  # history dropped to fit


def test_real_tiny_engine_episode_is_token_faithful_and_deterministic(tok, tmp_path):
    import torch

    from ragen_core.engines.hf import HFEngine
    from ragen_core.models import load_model_and_tokenizer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny ops: threads only add contention on a busy machine
    try:
        model, mtok = load_model_and_tokenizer("tiny", cache_dir=tmp_path)
        engine = HFEngine(model=model, tokenizer=mtok)
        params = SamplingParams(max_new_tokens=6)
        a, b = (make_runner(mtok, engine, env_groups=2, group_size=2, max_turns=3).run(sampling=params) for _ in range(2))
    finally:
        torch.set_num_threads(threads)
    assert [[turn.response_ids for turn in t.turns] for t in a] == [[turn.response_ids for turn in t.turns] for t in b]
    for t in a:
        ids, spans, _ = episode_layout(t)
        assert len(spans) == len(t.turns) == 3
        for turn, (s, e) in zip(t.turns, spans):
            assert ids[s:e] == turn.response_ids
            assert len(turn.response_logprobs) == len(turn.response_ids)
            assert turn.finish_reason in ("stop", "length")
        assert len(ids) <= 3600
    # Members of a group share their first prompt exactly.
    assert a[0].turns[0].prompt_ids == a[1].turns[0].prompt_ids


def test_append_only_contexts_with_a_foreign_chat_template(tok):
    # A Llama-3-like template whose end-of-turn marker is not the eos token: the runner then
    # appends the template's own closing text after every sampled reply.
    foreign = build_byte_tokenizer()
    foreign.chat_template = (
        "{% for m in messages %}{{ '[' + m['role'] + ']\\n' + m['content'] + '[/turn]\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '[assistant]\\n' }}{% endif %}"
    )
    eng = ScriptedEngine(["a</think><answer>Up</answer>"], foreign)
    (t,) = make_runner(foreign, eng, max_turns=2).run()
    first, second = t.turns
    n = len(first.prompt_ids) + len(first.response_ids)
    assert second.prompt_ids[:n] == first.prompt_ids + first.response_ids
    tail = foreign.decode(second.prompt_ids[n:])
    assert tail.startswith("[/turn]\n[user]\nReward:\n0.5\n") and tail.endswith("[assistant]\n<think>")


class ThreadLineEnv(LineEnv):
    """LineEnv that records which thread stepped it."""

    threads: ClassVar[set[int]] = set()

    def step(self, action: str) -> StepResult:
        ThreadLineEnv.threads.add(threading.get_ident())
        return super().step(action)


def test_pool_threads_step_concurrently_with_identical_results(tok):
    registry.register(EnvSpec(name="rollout-test-thread-line", config_model=EnvConfig, factory=f"{__name__}:ThreadLineEnv"))
    script = ["a</think><answer>Up</answer>", "b</think><answer>Down || Up</answer>", "junk"]
    results = []
    for workers in (1, 4):
        ThreadLineEnv.threads = set()
        eng = ScriptedEngine(script, tok)
        config = RolloutConfig(env_groups=2, group_size=2)
        env = EnvRef(name="rollout-test-thread-line")
        trajs = RolloutRunner(env, eng, tok, config, pool=LocalEnvPool(env, threads=workers)).run()
        results.append([(t.to_dict()["turns"], t.total_reward, t.end_reason) for t in trajs])
        if workers == 1:
            assert ThreadLineEnv.threads == {threading.get_ident()}
        else:
            assert threading.get_ident() not in ThreadLineEnv.threads
    assert results[0] == results[1]


def test_one_seed_per_episode_and_turn_independent_of_batch_position(tok):
    from ragen_core.seeding import derive_seed

    def script(call, row, prompt):  # episode 0 is done after turn 2; the others play all 3 turns
        return "a</think><answer>Up || Up</answer>" if call < 2 and row == 0 else "a</think><answer>Down</answer>"

    eng = ScriptedEngine(script, tok)
    eng.sync_weights({}, version=7)
    trajs = make_runner(tok, eng, env_groups=2, group_size=2, max_turns=3).run(mode="val")
    assert [len(t.turns) for t in trajs] == [2, 3, 3, 3]
    live = {1: trajs, 2: trajs, 3: trajs[1:]}  # in turn 3 episode 1 is row 0 of the batch
    assert eng.seeds == [[derive_seed("rollout", "val", t.seed, t.member, turn) for t in live[turn]] for turn in (1, 2, 3)]
    assert len(set(eng.seeds[0])) == 4  # members of a group sample with their own seeds
    assert {turn.policy_version for t in trajs for turn in t.turns} == {7}


def test_pool_timeout_ends_only_that_episode_truncated(tok):
    from ragen_core.testing.toy_env import SLOW_TOY_FACTORY

    env = EnvRef(name="slow-corridor", factory=SLOW_TOY_FACTORY, config={"sleep_s": 3.0, "max_turns": 3})

    def script(call, row, prompt):  # turn 1: episode 0 waits (too long), episode 1 walks
        return "a</think><answer>Wait</answer>" if call == 0 and row == 0 else "a</think><answer>Left</answer>"

    runner = RolloutRunner(env, ScriptedEngine(script, tok), tok, RolloutConfig(env_groups=2, group_size=1),
                           pool=LocalEnvPool(env, step_timeout_s=1.0))  # the walking episode's instant step fits even on a loaded machine
    slow, fast = runner.run()
    assert len(slow.turns) == 1 and slow.end_reason == "timeout" and slow.truncated and slow.terminated and not slow.success
    assert "step_timeout_s=1.0" in slow.turns[0].info["pool_error"] and slow.turns[0].actions == [] and slow.turns[0].reward == 0.0
    assert slow.final_observation == slow.turns[0].observation  # the last observation the episode had
    assert fast.end_reason in ("done", "max_turns") and len(fast.turns) >= 1 and "pool_error" not in fast.turns[0].info
    runner.close()


def test_in_process_env_factory_pool_needs_no_registration(tok):
    env = EnvRef(name="line-by-factory")
    pool = LocalEnvPool(env, env_factory=LineEnv)
    eng = ScriptedEngine(["a</think><answer>Up || Up</answer>", "b</think><answer>Up</answer>"], tok)
    (t,) = RolloutRunner(env, eng, tok, RolloutConfig(env_groups=1, group_size=1, max_turns=4), pool=pool).run()
    assert t.env == "line-by-factory" and t.success and [turn.actions for turn in t.turns] == [["Up", "Up"], ["Up"]]


class UnseededLineEnv(LineEnv):
    """Starts where a process-wide counter says, whatever the seed: group members start apart."""

    starts: ClassVar[list[int]] = [0]

    def reset(self, seed: int, *, member: int = 0, mode: str = "train") -> str:
        self.starts[0] += 1
        self.pos, self.seed = self.starts[0] % 2, seed
        return self.render()


def test_group_members_that_start_apart_are_warned_about_once(tok, caplog):
    """An env whose reset ignores the seed trained without a word; the conformance kit alone caught it."""
    from ragen_core.rollout import runner as runner_mod

    name = "rollout-test-unseeded"
    registry.register(EnvSpec(name=name, config_model=EnvConfig, factory=f"{__name__}:UnseededLineEnv"))
    try:
        def rollout(env: str, size: int) -> None:
            eng = ScriptedEngine(["x</think><answer>Up</answer>"] * 8, tok)
            RolloutRunner(EnvRef(name=env, config={"max_turns": 1}), eng, tok, RolloutConfig(env_groups=2, group_size=size)).run()

        with caplog.at_level("WARNING", logger="ragen_core.rollout.runner"):
            rollout(LINE, 2)  # a seeded env: no word
            rollout(name, 1)  # one member per group: nothing to compare
            assert not caplog.records
            rollout(name, 2)
            rollout(name, 2)
        assert [r.getMessage() for r in caplog.records] == [
            f"env {name!r} gave the members of one group (seed {caplog.records[0].args[1]}) different first observations: reset(seed) "
            "must give each member the same start, or group-relative advantages compare episodes that began apart "
            "(ragen_core.testing's env checks test this)"]
    finally:
        registry.unregister("env", name)
        runner_mod._STARTS_APART_SAID.discard(name)


class _MisbehavingPool(LocalEnvPool):
    """A third-party pool with one bug, chosen by ``how``."""

    how = ""

    def reset(self, requests):
        starts = super().reset(requests)
        return starts[:-1] if self.how == "short-reset" else starts

    def step(self, requests):
        outcomes = super().step(requests)
        if self.how == "reversed":
            return list(reversed(outcomes))
        if self.how == "dicts":
            import dataclasses

            return [dataclasses.asdict(o) for o in outcomes]
        if self.how == "nan":
            for o in outcomes:
                o.reward = float("nan")
        if self.how == "raises":
            raise KeyError(0)
        if self.how == "info-records":  # the env's raw info value, not a number
            outcomes[0].info_records = [{"score": "high"}]
        return outcomes


@pytest.mark.parametrize(("how", "said"), [
    ("short-reset", "reset returned 1 items for 2 requests"),
    ("reversed", "step's reply 0 is for episode 1, its request for episode 0"),  # rewards went to the wrong episodes
    ("dicts", "step returned dict items, not StepOutcome"),
    ("nan", "step returned reward nan for episode 0: not a finite number"),
    ("raises", "raised in step: KeyError: 0"),
    ("info-records", "step returned info_records [{'score': 'high'}] for episode 0: not a list of dicts of info key -> finite number"),
])
def test_a_pool_that_answers_wrongly_is_named_not_trained_on(tok, how, said):
    """The runner paired replies with episodes by position: a short or reordered list trained on wrong data."""
    from ragen_core.errors import PluginError

    env = EnvRef(name="line-by-factory")
    pool = _MisbehavingPool(env, env_factory=LineEnv)
    pool.how = how
    eng = ScriptedEngine(["a</think><answer>Up</answer>"] * 8, tok)
    runner = RolloutRunner(env, eng, tok, RolloutConfig(env_groups=2, group_size=1, max_turns=2), pool=pool)
    with pytest.raises(PluginError) as info:
        runner.run()
    assert info.value.message == f"plugin _MisbehavingPool: {said}" or info.value.message.startswith(f"plugin _MisbehavingPool {said}")
    runner.close()


def test_an_engine_that_answers_too_few_prompts_is_named(tok):
    from ragen_core.errors import PluginError

    class ShortEngine(ScriptedEngine):
        def generate(self, prompts, sampling, seeds=None):
            return super().generate(prompts, sampling, seeds)[:-1]

    env = EnvRef(name="line-by-factory")
    runner = RolloutRunner(env, ShortEngine(["a</think><answer>Up</answer>"] * 8, tok), tok, RolloutConfig(env_groups=2, group_size=1),
                           pool=LocalEnvPool(env, env_factory=LineEnv))
    with pytest.raises(PluginError, match=r"plugin ShortEngine: generate returned 1 items for 2 prompts"):
        runner.run()
    runner.close()
