"""How the trainer hands a batch to the filter: one entry per episode (spec 9.2)."""

from __future__ import annotations

import torch

from ragen_core.trainer.batch import TrainBatch
from ragen_core.trainer.selection import episode_view


def test_an_episode_of_several_rows_takes_the_mean_of_their_entropies():
    """Windowed context modes give an episode one row per turn: its entropy was its first row's
    (spec 9.2: the mean of its rows); reward is the first row's, length the sum."""
    n, length = 5, 6
    rm = torch.zeros(n, length - 1)
    rm[:, 1:3] = 1  # two response tokens a row
    batch = TrainBatch(
        input_ids=torch.zeros(n, length, dtype=torch.long), attention_mask=torch.ones(n, length, dtype=torch.long),
        response_mask=rm, token_rewards=torch.zeros(n, length - 1), group_ids=torch.tensor([0, 0, 0, 1, 1]),
        episode_ids=torch.tensor([0, 0, 1, 2, 2]), scores=torch.tensor([1.0, 1.0, 0.0, 0.5, 0.5]), turn_ends=[[2]] * n,
    )
    view = episode_view(batch, entropies=[1.0, 3.0, 5.0, 0.5, 1.5])
    assert view.group_ids == [0, 0, 1] and view.rewards == [1.0, 0.0, 0.5]
    assert view.entropies == [2.0, 5.0, 1.0]  # means of rows (1, 3), (5), (0.5, 1.5): exact in binary floats
    assert view.lengths == [4.0, 2.0, 4.0]
