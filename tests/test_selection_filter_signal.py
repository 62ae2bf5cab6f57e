"""Which rewards the filter ranks groups by: the run's ``filter_signal`` (spec 17 L19).

The reference filters on the episode score (env reward + format penalty, after normalisation),
so a group whose episodes earned the same task reward but drew different format penalties looks
like a group with signal. ``filter_signal=env_reward`` shows the filter the task reward alone.
"""

from __future__ import annotations

import json

import pytest

from ragen_core import registry
from ragen_core.interfaces.algorithm import Algorithm, AlgorithmConfig
from ragen_core.interfaces.rollout_filter import FilterConfig, FilterResult, GroupedRollouts, RolloutFilter
from ragen_core.rollout.types import Trajectory, Turn
from ragen_core.specs import FilterSpec
from ragen_core.trainer.batch import build_batch
from ragen_core.trainer.selection import select

PAD = 0


def _episode(group: int, member: int, turns: list[tuple[float, float]]) -> Trajectory:
    """An episode of one-token replies; ``turns``: (env reward, format penalty) of each turn."""
    traj = Trajectory(env="toy", tag="Toy", group_id=group, member=member, seed=group, env_id=2 * group + member)
    context = [1, 2]
    for k, (reward, penalty) in enumerate(turns):
        reply = [10 + k]
        traj.turns.append(Turn(prompt_ids=list(context), response_ids=reply, response_text="", reward=reward, penalty=penalty))
        context = context + reply + [3]
    return traj


def _rollout() -> list[Trajectory]:
    """Three groups of two. Group 0: both episodes solve the task (env reward 1), one of them after
    three unparsable replies (-0.1 each): its spread is the format penalty's alone. Groups 1 and 2
    differ in task reward (0 vs 1, 0 vs 0.5) without penalties."""
    return [
        _episode(0, 0, [(1.0, 0.0)]),
        _episode(0, 1, [(0.0, -0.1), (0.0, -0.1), (0.0, -0.1), (1.0, 0.0)]),
        _episode(1, 0, [(0.0, 0.0)]),
        _episode(1, 1, [(1.0, 0.0)]),
        _episode(2, 0, [(0.0, 0.0)]),
        _episode(2, 1, [(0.5, 0.0)]),
    ]


@pytest.mark.parametrize("normalization", ["identity", "mean_std"])
def test_a_group_whose_spread_is_only_format_penalty_is_flat_under_the_env_reward_signal(normalization):
    """Linear top-p 0.9 (snr-topp): on the scores group 0's penalty spread (std 0.21; 1.0 after
    mean_std, like every other group) is needed to reach the mass, so it trains; on the env rewards it
    is a zero-variance group and is dropped, and the other two groups reach the mass alone."""
    batch = build_batch(_rollout(), PAD, normalization=normalization)
    flt = registry.make("filter", "snr-topp")
    algorithm = Algorithm(AlgorithmConfig())
    by_score = select(batch, flt, algorithm, signal="score")
    by_task = select(batch, flt, algorithm, signal="env_reward")

    assert by_score.kept_groups == {0, 1, 2} and 0 not in by_score.result.dropped
    assert by_task.kept_groups == {1, 2} and by_task.result.dropped == {0: "zero variance"}
    assert by_task.rows == [2, 3, 4, 5] and by_score.rows == [0, 1, 2, 3, 4, 5]
    assert by_score.metrics["rollout/filter_zero_count"] == 0.0 and by_task.metrics["rollout/filter_zero_count"] == 1.0
    assert by_task.grouped.rewards == [1.0, 1.0, 0.0, 1.0, 0.0, 0.5]  # the task reward: no penalty, not normalised
    # the in-group reward metrics (and the variance early stop) describe what the filter saw
    assert by_task.reward_std == pytest.approx((0.0 + 2**-0.5 + 0.5 * 2**-0.5) / 3)
    assert by_score.reward_std > by_task.reward_std


def test_the_default_signal_is_the_score_as_before():
    """Without ``signal`` the filter sees ``batch.scores`` (one per episode), exactly the reference's
    rewards, and selects what it selects on them directly."""
    batch = build_batch(_rollout(), PAD)
    flt = registry.make("filter", "snr-topp")
    default = select(batch, flt, Algorithm(AlgorithmConfig()))
    assert default.grouped.rewards == batch.scores.tolist()
    direct = flt.select(GroupedRollouts(group_ids=batch.group_ids.tolist(), rewards=batch.scores.tolist()))
    assert sorted(default.kept_groups) == direct.kept_groups and default.result.metrics == direct.metrics


def test_an_unknown_signal_is_refused_in_one_line():
    batch = build_batch(_rollout(), PAD)
    with pytest.raises(ValueError, match="^filter_signal='task' is not one of score, env_reward$"):
        select(batch, registry.make("filter", "none"), Algorithm(AlgorithmConfig()), signal="task")


def test_the_env_rewards_follow_the_rows_a_batch_keeps():
    batch = build_batch(_rollout(), PAD)
    assert batch.select([5, 1]).env_rewards.tolist() == [0.5, 1.0]


class SeenRewardsFilter(RolloutFilter):
    """Keeps nothing (no update: the run stays cheap) and reports the rewards it was shown."""

    def select(self, rollouts):
        return FilterResult(kept_groups=[], dropped={g: "test" for g in rollouts.group_ids},
                            metrics={"rollout/test_seen_reward_sum": float(sum(rollouts.rewards))})


SEEN = FilterSpec(name="test-seen-rewards", config_model=FilterConfig, factory=f"{__name__}:SeenRewardsFilter")


@pytest.mark.usefixtures("one_torch_thread")
def test_a_run_shows_its_filter_the_signal_it_names(tmp_path):
    """The trainer passes ``filter_signal`` to the selection: the untrained tiny model writes replies
    that do not parse, so its scores carry format penalties its env rewards do not."""
    from ragen_core.testing.run_helpers import toy_run_config
    from ragen_core.trainer.trainer import Trainer

    seen, totals = {}, {}
    registry.register(SEEN)
    try:
        for signal in ("score", "env_reward"):
            cfg = toy_run_config(tmp_path / signal, f"filter={SEEN.name}", f"filter_signal={signal}", "save_rollouts=true", steps=1)
            seen[signal] = Trainer(cfg).train()[0]["rollout/test_seen_reward_sum"]
            with open(tmp_path / signal / "rollouts" / "step_1.jsonl") as fh:
                episodes = [json.loads(line) for line in fh]
            totals[signal] = (sum(e["total_reward"] for e in episodes), sum(e["env_reward"] for e in episodes))
    finally:
        registry.unregister("filter", SEEN.name)
    assert totals["score"] == totals["env_reward"]  # one seed: the same rollout twice
    total, env = totals["score"]
    assert total != pytest.approx(env)  # penalties were charged
    assert seen["score"] == pytest.approx(total) and seen["env_reward"] == pytest.approx(env)


def test_plugins_show_and_print_config_name_the_setting(capsys):
    """It is a run setting, not a filter's: ``plugins show filter`` names it above the filter's
    fields, and ``--print-config`` prints it with the filter's settings."""
    import yaml

    from ragen_core.cli.main import main

    assert main(["plugins", "show", "filter", "none"]) == 0
    out = capsys.readouterr().out
    assert "rewards it sees: the run's filter_signal (score | env_reward; default score)" in out
    assert main(["run", "--env", "bandit", "--print-config", "filter_signal=env_reward"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["filter_signal"] == "env_reward"


@pytest.mark.parametrize("metric", ["entropy", "entropy_variance", "length"])
def test_the_env_reward_signal_with_a_filter_scoring_without_rewards_is_warned_about(metric):
    """The filter never reads the rewards filter_signal picks: the setting changed which groups train
    only for reward metrics, and said nothing otherwise."""
    from ragen_core.config import load_config
    from ragen_core.testing.toy_env import register_toy_env
    from ragen_core.trainer.config import RunConfig, run_warnings

    base = [f"env={register_toy_env()}", "filter=snr-topp", f"filter_config.metric={metric}"]
    warned = [w for w in run_warnings(load_config(RunConfig, [], [*base, "filter_signal=env_reward"])) if "filter_signal" in w]
    assert warned == [f"filter_signal=env_reward picks the rewards a filter scores groups by, but filter 'snr-topp' scores them by "
                      f"filter_config.metric={metric}: the setting changes only the reward-variance early stop and the gradient "
                      "analysis's buckets, not which groups train; "
                      f"leave filter_signal at score, or change filter_config.metric={metric} to a reward score"]
    assert not [w for w in run_warnings(load_config(RunConfig, [], base)) if "filter_signal" in w]  # the default signal
    for rewards in ("reward_variance", "reward", "reward_sum"):
        cfg = load_config(RunConfig, [], [*base[:2], f"filter_config.metric={rewards}", "filter_signal=env_reward"])
        assert not [w for w in run_warnings(cfg) if "filter_signal" in w]

