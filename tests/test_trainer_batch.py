"""Training-batch construction: exact sampled ids, shifted response mask, reward placement."""

from __future__ import annotations

import pytest
import torch

from ragen_core.rollout.layout import episode_layout
from ragen_core.rollout.types import Trajectory, Turn
from ragen_core.trainer.batch import build_batch, micro_batches

PAD = 0


def _episode(group: int, prompt: list[int], turns: list[tuple[list[int], list[int], float, float]], env_id: int = 0) -> Trajectory:
    """turns: (observation ids appended before the reply, reply ids, reward, penalty)."""
    traj = Trajectory(env="toy", tag="Toy", group_id=group, member=0, seed=1, env_id=env_id)
    context = list(prompt)
    for k, (obs, reply, reward, penalty) in enumerate(turns):
        if k > 0:
            context = context + obs
        traj.turns.append(Turn(prompt_ids=list(context), response_ids=list(reply), response_text="", reward=reward, penalty=penalty,
                               response_logprobs=[-0.5] * len(reply)))
        context = context + reply
    return traj


def test_layout_concatenates_turns_and_marks_reply_spans():
    traj = _episode(0, [1, 2, 3], [([], [10, 11], 0.0, 0.0), ([4, 5], [12, 13, 14], 1.0, 0.0)])
    ids, spans, ends = episode_layout(traj)
    assert ids == [1, 2, 3, 10, 11, 4, 5, 12, 13, 14]
    assert spans == [(3, 5), (7, 10)]
    assert ends == [4, 9]
    assert build_batch([traj], PAD).input_ids[0].tolist() == ids


def test_response_mask_is_shifted_onto_exactly_the_sampled_tokens():
    traj = _episode(0, [1, 2, 3], [([], [10, 11], 0.5, -0.1), ([4, 5], [12, 13, 14], 1.0, 0.0)])
    short = _episode(1, [1, 2], [([], [20], 0.0, -0.1)], env_id=1)
    b = build_batch([traj, short], PAD)
    assert b.input_ids.shape == (2, 10)
    # position t predicts token t+1: trained predictions are exactly the sampled ids
    targets = b.input_ids[:, 1:]
    assert targets[0][b.response_mask[0] > 0].tolist() == [10, 11, 12, 13, 14]
    assert targets[1][b.response_mask[1] > 0].tolist() == [20]
    assert b.response_mask[0].tolist() == [0, 0, 1, 1, 0, 0, 1, 1, 1]
    # right padding never enters the mask or the attention
    assert b.attention_mask[1].tolist() == [1, 1, 1] + [0] * 7
    assert b.response_mask[1, 2:].sum() == 0
    assert b.turn_ends == [[3, 8], [1]]


def test_episode_reward_with_penalty_sits_on_last_generated_token():
    traj = _episode(0, [1, 2, 3], [([], [10, 11], 0.5, -0.1), ([4, 5], [12, 13, 14], 1.0, 0.0)])
    b = build_batch([traj], PAD)
    expected = torch.zeros(9)
    expected[8] = 0.5 - 0.1 + 1.0
    assert torch.allclose(b.token_rewards[0], expected)
    assert b.scores.tolist() == pytest.approx([1.4])


def test_turn_level_rewards_on_each_turn_end():
    traj = _episode(0, [1, 2, 3], [([], [10, 11], 0.5, -0.1), ([4, 5], [12, 13, 14], 1.0, 0.0)])
    b = build_batch([traj], PAD, turn_level=True)
    assert b.token_rewards[0, 3] == pytest.approx(0.4)
    assert b.token_rewards[0, 8] == pytest.approx(1.0)
    assert float(b.token_rewards[0].sum()) == pytest.approx(1.4)


def test_mean_std_normalisation_per_group():
    eps = [_episode(g, [1, 2], [([], [9], r, 0.0)], env_id=i) for i, (g, r) in enumerate([(0, 1.0), (0, 0.0), (1, 2.0), (1, 2.0)])]
    b = build_batch(eps, PAD, normalization="mean_std")
    s = b.scores.tolist()
    assert s[0] == pytest.approx(0.5 / (0.5**0.5 + 1e-6), rel=1e-5)  # float32 scores: rel 1e-5 is ~80 eps
    assert s[1] == pytest.approx(-s[0])
    assert s[2] == 0.0 and s[3] == 0.0


def test_engine_logprobs_aligned_and_select_trims_padding():
    long = _episode(0, [1, 2, 3, 4, 5], [([], [10, 11, 12], 0.0, 0.0)])
    short = _episode(1, [1], [([], [20], 1.0, 0.0)], env_id=1)
    b = build_batch([long, short], PAD)
    assert b.engine_logprobs is not None
    assert torch.equal(b.engine_logprobs != 0, b.response_mask > 0)
    sub = b.select([1])
    assert sub.input_ids.shape == (1, 2)
    assert sub.response_mask.tolist() == [[1.0]]
    assert sub.token_rewards.tolist() == [[1.0]]
    assert sub.group_ids.tolist() == [1]


def test_no_row_duplication_and_micro_batches():
    eps = [_episode(i // 2, [1], [([], [5], float(i), 0.0)], env_id=i) for i in range(5)]
    b = build_batch(eps, PAD)
    assert len(b) == 5  # never padded to a multiple
    assert micro_batches(list(range(5)), 2) == [[0, 1], [2, 3], [4]]


def test_non_append_only_prompts_are_rejected():
    traj = _episode(0, [1, 2], [([], [3], 0.0, 0.0)])
    traj.turns.append(Turn(prompt_ids=[9, 9, 9, 9], response_ids=[4], response_text=""))
    with pytest.raises(ValueError, match="does not extend"):
        build_batch([traj], PAD)
    assert len(build_batch([traj], PAD, per_turn=True)) == 2  # windowed modes train each turn as its own row


def test_per_turn_rows_carry_episode_score_and_id():
    # windowed context: turn 2's prompt is not an extension of turn 1 (history was cut)
    traj = Trajectory(env="toy", tag="Toy", group_id=0, member=0, seed=1, env_id=0)
    traj.turns = [
        Turn(prompt_ids=[1, 2], response_ids=[10, 11], response_text="", reward=0.0, penalty=-0.1),
        Turn(prompt_ids=[1, 7, 8], response_ids=[12], response_text="", reward=1.0),
    ]
    other = _episode(1, [1], [([], [20], 0.5, 0.0)], env_id=1)
    b = build_batch([traj, other], PAD, per_turn=True)
    assert b.episode_ids.tolist() == [0, 0, 1] and b.group_ids.tolist() == [0, 0, 1]
    assert b.input_ids[1, :4].tolist() == [1, 7, 8, 12]
    targets = b.input_ids[:, 1:]
    assert targets[0][b.response_mask[0] > 0].tolist() == [10, 11]
    assert targets[1][b.response_mask[1] > 0].tolist() == [12]
    # every turn row holds the episode total (0 - 0.1 + 1) on its last reply token
    assert b.token_rewards[0, 2] == pytest.approx(0.9) and b.token_rewards[1, 2] == pytest.approx(0.9)
    assert b.scores.tolist() == pytest.approx([0.9, 0.9, 0.5])


def test_row_scores_do_not_depend_on_where_equal_rewards_sit():
    import torch

    from ragen_core.trainer.batch import row_scores

    # The same five turn rewards (turn reward + penalty) in two orders and at two places in a
    # row: a token-order float32 sum gives 1.2000000476837158 vs 1.1999999284744263, so two
    # episodes with equal rewards would look different to the filter and the early stop.
    a = torch.zeros(1, 16)
    b = torch.zeros(1, 16)
    a[0, 0:5] = torch.tensor([0.7, 0.1, 0.2, -0.1, 0.3])
    b[0, 11:16] = torch.tensor([0.7, 0.1, 0.2, 0.3, -0.1])
    assert a.sum(1).item() != b.sum(1).item()  # the float32 problem this guards against
    scores = row_scores(torch.cat([a, b]))
    assert scores.dtype == torch.float32
    assert scores[0].item() == scores[1].item()
