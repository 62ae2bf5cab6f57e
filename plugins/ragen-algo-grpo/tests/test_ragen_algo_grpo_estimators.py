"""Golden tests for the grpo, drgrpo, rloo and REINFORCE++ estimators (spec 8.4, 18.2). Numbers worked by hand."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from ragen_algo_grpo.config import DrGRPOConfig, GRPOConfig
from ragen_algo_grpo.grpo import (
    DrGRPOEstimator,
    GRPOEstimator,
    episode_scores,
    group_stats,
    grpo_advantages,
)
from ragen_algo_grpo.reinforce_pp import (
    ReinforcePPBaselineEstimator,
    ReinforcePPEstimator,
    discounted_returns,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    turn_index,
)
from ragen_algo_grpo.rloo import RLOOEstimator, rloo_advantages

from ragen_core.interfaces.advantage import AdvantageInputs
from ragen_core.masked import masked_whiten


def _rows(scores, lengths=None, width=5):
    """Token rewards with each score on the row's last trained token; masks of given lengths."""
    lengths = lengths or [3] * len(scores)
    rewards = torch.zeros(len(scores), width, dtype=torch.float64)
    mask = torch.zeros(len(scores), width, dtype=torch.float64)
    for i, (s, n) in enumerate(zip(scores, lengths)):
        mask[i, 1 : 1 + n] = 1.0
        rewards[i, n] = s
    return rewards, mask


SPEC_182 = [10.7, -0.5, -0.5, -1.0]
# μ = 8.7/4 = 2.175; deviations [8.525, −2.675, −2.675, −3.175]; Σ squares = 72.675625 + 2·7.155625
# + 10.080625 = 97.0675; σ = sqrt(97.0675/3) = sqrt(32.355833) = 5.688219
SIGMA_182 = math.sqrt(97.0675 / 3)


def test_grpo_spec_18_2():
    rewards, mask = _rows(SPEC_182)
    adv, metrics = grpo_advantages(rewards, mask, torch.tensor([0, 0, 0, 0]))
    per_row = adv[:, 1].tolist()
    # ≈ [1.50, −0.47, −0.47, −0.56]; exact: deviation / (σ + 1e-6)
    assert per_row == pytest.approx(
        [d / (SIGMA_182 + 1e-6) for d in (8.525, -2.675, -2.675, -3.175)]
    )
    assert per_row == pytest.approx([1.4987, -0.4703, -0.4703, -0.5582], abs=1e-4)
    # broadcast over every trained token, zero elsewhere
    assert adv[0].tolist() == pytest.approx(
        [0.0, per_row[0], per_row[0], per_row[0], 0.0]
    )
    assert metrics == {"num_groups": 1.0, "singleton_groups": 0.0, "flat_groups": 0.0}


def test_drgrpo_spec_18_2():
    rewards, mask = _rows(SPEC_182)
    out = DrGRPOEstimator()(
        AdvantageInputs(
            token_rewards=rewards,
            response_mask=mask,
            group_ids=torch.zeros(4, dtype=torch.long),
        )
    )
    assert out.advantages[:, 2].tolist() == pytest.approx(
        [8.525, -2.675, -2.675, -3.175]
    )
    assert torch.equal(out.advantages, out.returns)


def test_identical_scores_give_zero_and_singleton_gives_score():
    # group 0: three identical scores -> 0; group 1: singleton with S = 7 -> μ = 0, σ = 1
    rewards, mask = _rows([2.0, 2.0, 2.0, 7.0])
    groups = torch.tensor([0, 0, 0, 1])
    grpo = GRPOEstimator()(
        AdvantageInputs(token_rewards=rewards, response_mask=mask, group_ids=groups)
    )
    # GRPO singleton: 7 / (1 + 1e-6) = 6.999993
    assert grpo.advantages[:, 1].tolist() == pytest.approx(
        [0.0, 0.0, 0.0, 7 / (1 + 1e-6)]
    )
    assert grpo.metrics == {
        "num_groups": 2.0,
        "singleton_groups": 1.0,
        "flat_groups": 1.0,
    }
    dr = DrGRPOEstimator()(
        AdvantageInputs(token_rewards=rewards, response_mask=mask, group_ids=groups)
    )
    assert dr.advantages[:, 1].tolist() == [0.0, 0.0, 0.0, 7.0]


def test_turn_level_rows_are_deduplicated_by_episode():
    # episode 10 has three turn rows (each carries the episode total 1), episode 11 one row (0)
    rewards, mask = _rows([1.0, 1.0, 1.0, 0.0])
    groups = torch.tensor([0, 0, 0, 0])
    dedup, _ = grpo_advantages(
        rewards, mask, groups, episode_ids=torch.tensor([10, 10, 10, 11])
    )
    # unique scores {1, 0}: μ = 0.5, σ = sqrt(0.5) = 0.7071068 -> ±0.5/0.7071078 = ±0.7071058
    expected = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert dedup[:, 1].tolist() == pytest.approx(
        [expected, expected, expected, -expected]
    )
    # without de-duplication: [1, 1, 1, 0]: μ = 0.75, σ = sqrt((3·0.0625 + 0.5625)/3) = 0.5
    plain, _ = grpo_advantages(rewards, mask, groups)
    assert plain[:, 1].tolist() == pytest.approx([0.5, 0.5, 0.5, -1.5], abs=1e-5)


def test_episode_dedup_singleton():
    # two rows of one episode form a single-episode group: μ = 0, σ = 1 -> A = S (Dr.GRPO)
    rewards, mask = _rows([3.0, 3.0])
    adv, metrics = grpo_advantages(
        rewards,
        mask,
        torch.tensor([5, 5]),
        episode_ids=torch.tensor([1, 1]),
        norm_by_std=False,
    )
    assert adv[:, 1].tolist() == [3.0, 3.0]
    assert metrics["singleton_groups"] == 1.0


def test_length_weight():
    # Dr.GRPO on [1, 3] -> [−1, 1]; ℓ = [2, 4] (+1e-6), mean 3 -> weights mean/ℓ = [1.5, 0.75]
    rewards, mask = _rows([1.0, 3.0], lengths=[2, 4])
    est = DrGRPOEstimator(DrGRPOConfig(length_weight=True))
    out = est(
        AdvantageInputs(
            token_rewards=rewards, response_mask=mask, group_ids=torch.tensor([0, 0])
        )
    )
    assert out.advantages[:, 1].tolist() == pytest.approx([-1.5, 0.75], abs=1e-6)


def test_soft_reweight():
    # group A [0, 2]: σ = sqrt2; group B [0, 1]: σ = sqrt0.5; weights σ_g/(sqrt2 + 1e-6) ≈ [1, 0.5]
    # Dr.GRPO advantages [−1, 1, −0.5, 0.5] -> [−1, 1, −0.25, 0.25]
    rewards, mask = _rows([0.0, 2.0, 0.0, 1.0])
    est = DrGRPOEstimator(DrGRPOConfig(soft_reweight=True))
    out = est(
        AdvantageInputs(
            token_rewards=rewards,
            response_mask=mask,
            group_ids=torch.tensor([0, 0, 1, 1]),
        )
    )
    assert out.advantages[:, 1].tolist() == pytest.approx(
        [-1.0, 1.0, -0.25, 0.25], abs=1e-5
    )


def test_grpo_is_scale_invariant_and_keeps_dtype():
    rewards, mask = _rows([1.0, 0.0, 0.0, 1.0])
    groups = torch.tensor([0, 0, 0, 0])
    a, _ = grpo_advantages(rewards, mask, groups)
    b, _ = grpo_advantages(rewards * 10, mask, groups)
    assert a.tolist() == [pytest.approx(row, abs=1e-5) for row in b.tolist()]
    f32, _ = grpo_advantages(rewards.float(), mask.float(), groups)
    assert f32.dtype == torch.float32


def test_rloo_by_hand():
    # group [1, 2, 6]: baselines (2+6)/2 = 4, (1+6)/2 = 3.5, (1+2)/2 = 1.5 -> [−3, −1.5, 4.5]
    # singleton [5] -> baseline 0 -> 5
    rewards, mask = _rows([1.0, 2.0, 6.0, 5.0])
    adv = rloo_advantages(rewards, mask, torch.tensor([0, 0, 0, 1]))
    assert adv[:, 1].tolist() == pytest.approx([-3.0, -1.5, 4.5, 5.0])
    # de-duplication: rows 0 and 1 are one episode with score 1 -> group {1, 6}: [−5, −5, 5]
    rewards, mask = _rows([1.0, 1.0, 6.0])
    adv = rloo_advantages(
        rewards, mask, torch.tensor([0, 0, 0]), episode_ids=torch.tensor([0, 0, 1])
    )
    assert adv[:, 1].tolist() == pytest.approx([-5.0, -5.0, 5.0])
    out = RLOOEstimator()(
        AdvantageInputs(
            token_rewards=rewards, response_mask=mask, group_ids=torch.tensor([0, 0, 0])
        )
    )
    assert torch.equal(out.advantages, out.returns)


def test_grpo_config_rejects_bad_epsilon():
    from ragen_core.errors import PluginConfigError

    with pytest.raises(PluginConfigError, match=r"^GRPOConfig: invalid config: epsilon: .*\(got 0.0\)$"):
        GRPOConfig(epsilon=0.0)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.floats(-10, 10), st.integers(0, 3)), min_size=1, max_size=12)
)
def test_group_advantages_sum_to_zero(rows):
    """Dr.GRPO and GRPO advantages sum to 0 within every group of ≥ 2 samples; RLOO is n/(n−1)·Dr.GRPO."""
    scores = [s for s, _ in rows]
    groups = torch.tensor([g for _, g in rows])
    rewards, mask = _rows(scores)
    dr, _ = grpo_advantages(rewards, mask, groups, norm_by_std=False)
    gr, _ = grpo_advantages(rewards, mask, groups)
    lo = rloo_advantages(rewards, mask, groups)
    for g in set(groups.tolist()):
        idx = (groups == g).nonzero().flatten()
        n = idx.numel()
        if n >= 2:
            assert dr[idx, 1].sum().item() == pytest.approx(0.0, abs=1e-9)
            assert gr[idx, 1].sum().item() == pytest.approx(0.0, abs=1e-6)
            assert lo[idx, 1].tolist() == pytest.approx(
                (dr[idx, 1] * n / (n - 1)).tolist(), abs=1e-9
            )
        else:
            assert dr[idx, 1].item() == pytest.approx(scores[int(idx)])
    assert torch.isfinite(gr).all()


def test_reinforce_pp_returns_skip_observations():
    # trained tokens 0, 1, 3 (observation at 2 with a reward 9 that is ignored), reward 1 on 3; γ = 0.5
    # G_3 = 1; G_1 = 0 + 0.5·1 = 0.5; G_0 = 0.25
    rewards = torch.tensor([[0.0, 0.0, 9.0, 1.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0]], dtype=torch.float64)
    adv, ret = reinforce_pp_advantages(rewards, mask, gamma=0.5, whiten=False)
    assert ret.tolist()[0] == pytest.approx([0.25, 0.5, 0.0, 1.0])
    assert torch.equal(adv, ret)
    # whitened: [0.25, 0.5, 1]: mean 7/12, Σ(x−μ)² = 1/9 + 1/144 + 25/144 = 42/144, var 21/144
    white, _ = reinforce_pp_advantages(rewards, mask, gamma=0.5)
    s = math.sqrt(21 / 144 + 1e-8)
    assert white.tolist()[0] == pytest.approx(
        [(0.25 - 7 / 12) / s, (0.5 - 7 / 12) / s, 0.0, (1 - 7 / 12) / s]
    )


def test_turn_index_within_rows_and_across_an_episodes_rows():
    mask = torch.ones(4, 6)
    # row 0: turns end at 1 and 4 (position 5, past the last end, stays in the last turn)
    # rows 1-3: one turn each; rows 1 and 3 are turns 0 and 1 of episode 7, row 2 is episode 8
    turns = turn_index(mask, [[1, 4], [2], [5], [0]], torch.tensor([5, 7, 8, 7]))
    assert turns.tolist() == [
        [0, 0, 1, 1, 1, 1],
        [0, 0, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 1, 1],
    ]
    # without turn_ends every row is one turn: an episode's rows count 0, 1, 2 in batch order
    assert turn_index(torch.ones(3, 2), None, torch.tensor([4, 4, 4]))[:, 0].tolist() == [0, 1, 2]
    assert turn_index(torch.ones(3, 2)).tolist() == [[0, 0]] * 3
    with pytest.raises(ValueError, match="turn_ends has 1 rows, the batch has 2"):
        turn_index(torch.ones(2, 3), [[1]])
    with pytest.raises(ValueError, match=r"turn_ends\[0\] must be in increasing order"):
        turn_index(torch.ones(1, 5), [[3, 1]])


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    gamma=st.sampled_from([1.0, 0.9, 0.5]),
)
def test_reinforce_pp_single_turn_is_exactly_batch_whitening(data, dtype, gamma):
    """One turn per row: the per-turn baseline is the batch mean, and the result is bit for bit
    the plain masked whitening of the returns that REINFORCE++ used before."""
    rows = data.draw(st.integers(1, 6))
    width = data.draw(st.integers(1, 7))
    mask = torch.tensor(data.draw(st.lists(st.lists(st.booleans(), min_size=width, max_size=width),
                                           min_size=rows, max_size=rows)), dtype=dtype)
    values = st.floats(-100, 100, allow_nan=False, allow_subnormal=False)
    rewards = torch.tensor(data.draw(st.lists(st.lists(values, min_size=width, max_size=width),
                                              min_size=rows, max_size=rows)), dtype=dtype)
    ends = [[max([t for t in range(width) if mask[i, t] > 0], default=0)] for i in range(rows)]
    returns = discounted_returns(rewards, mask, gamma)
    before = masked_whiten(returns, mask) * mask
    for turn_ends, episode_ids in ((None, None), (ends, torch.arange(rows))):
        out = ReinforcePPEstimator(gamma=gamma)(
            AdvantageInputs(token_rewards=rewards, response_mask=mask, group_ids=torch.zeros(rows, dtype=torch.long),
                            turn_ends=turn_ends, episode_ids=episode_ids)
        )
        assert torch.equal(out.advantages, before)
        assert torch.equal(out.returns, returns)


# Episode-level rewards, γ = 1, episodes of different lengths (row-per-episode layout, width 5):
#   A: 1 turn, tokens 0-1, score 1          B: turns {0} {2, 3}, score 0
#   C: turns {0, 1} {3}, score 1            D: turns {0} {2} {4}, score 0
# G is the score on every token. Worked by hand:
#   b_1 = (2·1 + 0 + 2·1 + 0) / 6 = 2/3;  b_2 = (2·0 + 1 + 0) / 4 = 1/4;  b_3 = 0 (D alone)
#   c:  A [1/3, 1/3]   B [-2/3 | -1/4, -1/4]   C [1/3, 1/3 | 3/4]   D [-2/3 | -1/4 | 0]
#   Σ c² = 4/9 + 4/9 + 4/9 + 2/16 + 9/16 + 1/16 = 4/3 + 3/4 = 25/12,  n = 11,  var = 25/12 / 10 = 5/24
EPISODES_BY_TURN = {  # (episode, turn) -> c on each of its tokens
    ("A", 0): [1 / 3] * 2, ("B", 0): [-2 / 3], ("C", 0): [1 / 3] * 2, ("D", 0): [-2 / 3],
    ("B", 1): [-1 / 4] * 2, ("C", 1): [3 / 4], ("D", 1): [-1 / 4], ("D", 2): [0.0],
}
S_EPISODES = math.sqrt(5 / 24 + 1e-8)


def test_reinforce_pp_episode_level_compares_each_turn_with_the_episodes_that_reached_it():
    rewards = torch.zeros(4, 5, dtype=torch.float64)
    rewards[0, 1], rewards[2, 3] = 1.0, 1.0
    mask = torch.tensor(
        [[1, 1, 0, 0, 0], [1, 0, 1, 1, 0], [1, 1, 0, 1, 0], [1, 0, 1, 0, 1]], dtype=torch.float64
    )
    out = ReinforcePPEstimator()(
        AdvantageInputs(token_rewards=rewards, response_mask=mask, group_ids=torch.tensor([0, 0, 1, 1]),
                        turn_ends=[[1], [0, 3], [1, 3], [0, 2, 4]])
    )
    expected = [
        [1 / 3, 1 / 3, 0, 0, 0],
        [-2 / 3, 0, -1 / 4, -1 / 4, 0],
        [1 / 3, 1 / 3, 0, 3 / 4, 0],
        [-2 / 3, 0, -1 / 4, 0, 0],
    ]
    # float64 sums of a few terms, in another order than by hand: relative 1e-12 is ample
    for row, want in zip(out.advantages.tolist(), expected):
        assert row == pytest.approx([w / S_EPISODES for w in want], rel=1e-12, abs=1e-15)
    # D's third turn is compared with itself only; C's late turn beats B's, not the batch mean
    assert out.advantages[3, 4] == 0.0
    assert out.advantages[2, 3] > out.advantages[2, 0] > 0


def test_reinforce_pp_row_per_turn_matches_row_per_episode():
    """The episodes above in windowed-context layout: one row per turn, the score on every row's
    reply, rows of an episode in turn order but interleaved with other episodes' rows."""
    layout = [  # (episode, turn, reply positions, score) in batch order
        ("A", 0, [1, 2], 1.0), ("B", 0, [2], 0.0), ("C", 0, [1, 2], 1.0), ("D", 0, [3], 0.0),
        ("B", 1, [1, 2], 0.0), ("C", 1, [2], 1.0), ("D", 1, [1], 0.0), ("D", 2, [4], 0.0),
    ]
    rewards = torch.zeros(len(layout), 5, dtype=torch.float64)
    mask = torch.zeros(len(layout), 5, dtype=torch.float64)
    for i, (_, _, positions, score) in enumerate(layout):
        mask[i, positions] = 1.0
        rewards[i, positions[-1]] = score
    out = ReinforcePPEstimator()(
        AdvantageInputs(token_rewards=rewards, response_mask=mask, group_ids=torch.zeros(len(layout), dtype=torch.long),
                        turn_ends=[[p[-1]] for _, _, p, _ in layout],
                        episode_ids=torch.tensor(["ABCD".index(e) for e, _, _, _ in layout]))
    )
    for i, (episode, turn, positions, _) in enumerate(layout):
        want = [c / S_EPISODES for c in EPISODES_BY_TURN[(episode, turn)]]
        # same float64 numbers as the row-per-episode batch, summed in another order (see above)
        assert out.advantages[i, positions].tolist() == pytest.approx(want, rel=1e-12, abs=1e-15)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_reinforce_pp_row_per_turn_matches_row_per_episode_property(data):
    """Random episodes, episode-level scores, γ = 1: both layouts give each turn the same advantage."""
    n = data.draw(st.integers(1, 6))
    episodes = data.draw(st.lists(st.tuples(st.sampled_from([0.0, 1.0, -0.5, 0.3]),
                                            st.lists(st.integers(1, 3), min_size=1, max_size=4)),
                                  min_size=n, max_size=n))
    # one row per episode: turn k's reply, then one observation token
    rewards, mask = torch.zeros(n, 16, dtype=torch.float64), torch.zeros(n, 16, dtype=torch.float64)
    ends, cells = [], []  # cells: (episode, turn, positions in the episode's row)
    for e, (score, lengths) in enumerate(episodes):
        pos, row_ends = 0, []
        for k, length in enumerate(lengths):
            mask[e, pos : pos + length] = 1.0
            cells.append((e, k, list(range(pos, pos + length))))
            row_ends.append(pos + length - 1)
            pos += length + 1
        rewards[e, row_ends[-1]] = score
        ends.append(row_ends)
    whole = ReinforcePPEstimator()(AdvantageInputs(token_rewards=rewards, response_mask=mask,
                                                   group_ids=torch.zeros(n, dtype=torch.long), turn_ends=ends))
    # one row per turn (a one-token prompt, then the reply with the score on its last token), in a
    # random interleaving that keeps each episode's rows in turn order
    order = data.draw(st.permutations(range(len(cells))))
    for e in range(n):
        slots = sorted(r for r, i in enumerate(order) if cells[i][0] == e)
        for r, i in zip(slots, sorted(i for i in order if cells[i][0] == e)):
            order[r] = i
    rewards, mask = torch.zeros(len(cells), 4, dtype=torch.float64), torch.zeros(len(cells), 4, dtype=torch.float64)
    for r, i in enumerate(order):
        e, _, positions = cells[i]
        mask[r, 1 : 1 + len(positions)] = 1.0
        rewards[r, len(positions)] = episodes[e][0]
    per_turn = ReinforcePPEstimator()(AdvantageInputs(
        token_rewards=rewards, response_mask=mask, group_ids=torch.zeros(len(cells), dtype=torch.long),
        turn_ends=[[len(cells[i][2])] for i in order], episode_ids=torch.tensor([cells[i][0] for i in order])))
    for r, i in enumerate(order):
        e, _, positions = cells[i]
        # the same float64 numbers summed in a different order: agreement to 1e-12 relative
        assert per_turn.advantages[r, 1 : 1 + len(positions)].tolist() == pytest.approx(
            whole.advantages[e, positions].tolist(), rel=1e-12, abs=1e-12)


def test_reinforce_pp_baseline_by_hand():
    # group 0 [1, 3] -> [−1, 1]; singleton [5] -> μ = 0 -> 5 (unwhitened)
    rewards, mask = _rows([1.0, 3.0, 5.0], lengths=[1, 1, 1])
    groups = torch.tensor([0, 0, 1])
    raw = reinforce_pp_baseline_advantages(rewards, mask, groups, whiten=False)
    assert raw[:, 1].tolist() == [-1.0, 1.0, 5.0]
    # whitened over the three tokens: mean 5/3, Σ(x−μ)² = 64/9 + 4/9 + 100/9 = 168/9, var 28/3
    out = ReinforcePPBaselineEstimator()(
        AdvantageInputs(token_rewards=rewards, response_mask=mask, group_ids=groups)
    )
    s = math.sqrt(28 / 3 + 1e-8)
    assert out.advantages[:, 1].tolist() == pytest.approx(
        [(-1 - 5 / 3) / s, (1 - 5 / 3) / s, (5 - 5 / 3) / s]
    )
    assert torch.equal(out.advantages, out.returns)


def test_episode_scores_do_not_depend_on_reward_positions():
    # five turn rewards 0.7 on tokens 0-4 vs 3-7: a plain float64 row sum gives 3.5 and
    # 3.4999999999999996 on this machine (the reduction order follows the positions); sorting
    # first makes both rows reduce the same vector
    rewards = torch.zeros(2, 8, dtype=torch.float64)
    rewards[0, 0:5] = 0.7
    rewards[1, 3:8] = 0.7
    scores = episode_scores(rewards)
    assert scores.dtype == torch.float64
    assert scores[0].item() == scores[1].item()


def test_flat_group_statistics_are_exact():
    # 16 float32 scores 2.1 (three turn rewards 0.7): μ is exactly the score and σ exactly 0, so
    # GRPO, Dr.GRPO and RLOO give exact zeros (a float32 mean used to be an ulp off: GRPO 0.19)
    rewards = torch.zeros(16, 12)
    mask = torch.zeros(16, 12)
    for i in range(16):
        ends = [1 + i % 3, 5 + i % 2, 10]
        for e in ends:
            mask[i, e - 1 : e + 1] = 1.0
            rewards[i, e] = 0.7
    scores = episode_scores(rewards)
    stats = group_stats(scores, torch.zeros(16, dtype=torch.long))
    assert torch.equal(stats.mean, scores) and torch.equal(stats.std, torch.zeros(16, dtype=torch.float64))
    assert stats.flat_groups == 1
    groups = torch.zeros(16, dtype=torch.long)
    for adv in (grpo_advantages(rewards, mask, groups)[0], grpo_advantages(rewards, mask, groups, norm_by_std=False)[0],
                rloo_advantages(rewards, mask, groups)):
        assert torch.equal(adv, torch.zeros_like(rewards))
