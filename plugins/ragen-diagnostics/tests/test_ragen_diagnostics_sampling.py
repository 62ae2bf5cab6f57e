"""Pair sampling: coverage counts, first-turn columns, trajectory-uniform draws (fixed and compat)."""

from __future__ import annotations

from collections import Counter

import pytest
from ragen_diagnostics.sampling import (
    SamplingError,
    coverage_metrics,
    first_turn_sample,
    make_z_of,
    reasoning_ids,
    trajectory_sample,
)

from ragen_core.rollout.types import Trajectory, Turn
from ragen_core.seeding import make_rng


def turn(prompt: list[int], z: list[int] | None, reply: bool = True) -> Turn:
    return Turn(prompt_ids=prompt, response_ids=[5] if reply else [], response_text="r" if reply else "",
                reasoning=None if z is None else "t", reasoning_ids=z)


def traj(group: int, member: int, turns: list[Turn]) -> Trajectory:
    return Trajectory(env="e", tag="E", group_id=group, member=member, seed=group, env_id=group * 10 + member, turns=turns)


def test_coverage_metrics_count_replies_and_valid_reasoning() -> None:
    batch = [
        traj(0, 0, [turn([1], [9, 9]), turn([1, 2], None), turn([1, 2, 3], None, reply=False)]),
        traj(0, 1, [turn([1], []), turn([1, 4], [8])]),
        traj(1, 0, []),
    ]
    m = coverage_metrics(batch)
    assert m["collapse/valid_thinking_rate"] == pytest.approx(2 / 4)  # 4 replies, 2 with reasoning
    assert m["collapse/first_turn_num_total"] == 2.0
    assert m["collapse/first_turn_num_valid"] == 1.0
    assert m["collapse/first_turn_valid_rate"] == pytest.approx(0.5)
    assert coverage_metrics([])["collapse/valid_thinking_rate"] == 0.0


def test_reasoning_ids_fall_back_to_the_tokenizer_only_when_ids_are_missing() -> None:
    def tok(s: str) -> list[int]:
        return [len(w) for w in s.split()]

    assert reasoning_ids(Turn([1], [2], "x", reasoning=" ab c ", reasoning_ids=None), tok) == [2, 1]
    assert reasoning_ids(Turn([1], [2], "x", reasoning="ab", reasoning_ids=[]), tok) == []
    assert reasoning_ids(Turn([1], [2], "x", reasoning="   ", reasoning_ids=None), tok) == []


def test_first_turn_columns_are_groups_with_the_first_members_prompt() -> None:
    batch = [traj(g, m, [turn([100 + g], [g, m, 1])]) for g in (3, 7, 5) for m in range(4)]
    batch.append(traj(9, 0, [turn([109], [])]))  # invalid: empty reasoning, never sampled
    s = first_turn_sample(batch, "all", make_rng(0))
    assert s.prompts == [[103], [107], [105]]
    assert s.num_rows == 12 and s.true_cols == [0] * 4 + [1] * 4 + [2] * 4
    assert s.signatures == [(103,), (107,), (105,)]


def test_first_turn_subsamples_without_replacement_and_is_seeded() -> None:
    batch = [traj(g, m, [turn([100 + g], [g, m])]) for g in range(4) for m in range(8)]
    a = first_turn_sample(batch, 10, make_rng(1, "x"))
    b = first_turn_sample(batch, 10, make_rng(1, "x"))
    assert a.num_rows == 10 and len(set(a.sources)) == 10
    assert a.sources == b.sources
    for z, col in zip(a.reasonings, a.true_cols):
        assert a.prompts[col] == [100 + z[0]]  # every row points at its own group's prompt


def test_first_turn_mismatched_prompts_in_a_group_raise() -> None:
    batch = [traj(0, 0, [turn([1, 2], [3])]), traj(0, 1, [turn([1, 9], [4])]), traj(1, 0, [turn([5], [6])])]
    with pytest.raises(SamplingError, match="group 0"):
        first_turn_sample(batch, "all", make_rng(0))


def _uneven_batch() -> list[Trajectory]:
    # episode 0 has one valid turn, episode 1 has four, episode 2 none
    return [
        traj(0, 0, [turn([10], [1])]),
        traj(0, 1, [turn([20 + t], [2, t]) for t in range(4)]),
        traj(1, 0, [turn([30], None)]),
    ]


def test_trajectory_sample_fixed_mode_has_no_duplicates() -> None:
    s = trajectory_sample(_uneven_batch(), 64, make_rng(2))
    assert s.num_rows == 5  # capped at the number of valid turns
    assert len(set(s.sources)) == 5
    assert s.num_columns == 5 and len(set(s.signatures)) == 5


def test_trajectory_sample_fixed_mode_merges_identical_prompts() -> None:
    batch = [traj(0, m, [turn([1, 2], [m]), turn([1, 2, 3 + m], [m, 1])]) for m in range(3)]
    s = trajectory_sample(batch, "all", make_rng(3))
    assert s.num_rows == 6
    assert s.num_columns == 4  # [1,2] shared by the three first turns, three distinct second-turn prompts
    for src, col in zip(s.sources, s.true_cols):
        m, t = src
        assert s.prompts[col] == batch[m].turns[t].prompt_ids


def test_trajectory_sample_compat_mode_one_column_per_draw() -> None:
    batch = [traj(0, 0, [turn([1], [1])]), traj(0, 1, [turn([2], [2])])]
    s = trajectory_sample(batch, 2, make_rng(4), without_replacement=False)
    # over many seeds, duplicates must occur (with replacement) and every draw is its own column
    dup_seen = False
    for seed in range(50):
        s = trajectory_sample(batch, 2, make_rng(seed), without_replacement=False)
        assert s.num_columns == s.num_rows == 2
        assert s.true_cols == [0, 1]
        dup_seen |= s.sources[0] == s.sources[1]
    assert dup_seen


@pytest.mark.parametrize("without_replacement", [True, False])
def test_trajectory_sample_picks_episodes_uniformly(without_replacement: bool) -> None:
    # Pr(episode 0 on the first draw) = 1/2 among episodes with a valid turn in fixed mode and 1/3
    # in the reference (episode 2 has none and yields nothing); turn-uniform would give 1/5.
    counts: Counter[int] = Counter()
    trials = 3000
    for seed in range(trials):
        s = trajectory_sample(_uneven_batch(), 1, make_rng("uniform", seed), without_replacement=without_replacement)
        if s.num_rows:
            counts[s.sources[0][0]] += 1
    expected = 1 / 2 if without_replacement else 1 / 3
    # binomial SE at p <= 0.5, n = 3000 is <= 0.0092; 4 SE
    assert counts[0] / trials == pytest.approx(expected, abs=0.037)
    assert counts[1] / trials == pytest.approx(expected, abs=0.037)


def test_z_source_selects_reasoning_reply_or_fallback() -> None:
    with_think = Turn([1], [4, 5, 6], "x", reasoning="t", reasoning_ids=[9])
    no_think = Turn([1], [4, 5], "x", reasoning=None, reasoning_ids=None)
    assert make_z_of("reasoning")(with_think) == [9] and make_z_of("reasoning")(no_think) == []
    assert make_z_of("response")(with_think) == [4, 5, 6]
    assert make_z_of("auto")(with_think) == [9] and make_z_of("auto")(no_think) == [4, 5]
    batch = [traj(0, 0, [no_think]), traj(1, 0, [with_think])]
    assert coverage_metrics(batch, make_z_of("auto"))["collapse/valid_thinking_rate"] == 1.0
    assert coverage_metrics(batch)["collapse/valid_thinking_rate"] == 0.5
    with pytest.raises(ValueError):
        make_z_of("actions")
