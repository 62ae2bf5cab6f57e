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


def test_groups_the_env_pool_lost_are_neither_shown_to_the_filter_nor_trained():
    """An episode cut off by a timed-out or failed env stops collecting format penalties: it scored
    above healthy ones and trained with a positive advantage."""
    from ragen_core.interfaces.algorithm import Algorithm, AlgorithmConfig
    from ragen_core.interfaces.rollout_filter import FilterResult, RolloutFilter
    from ragen_core.trainer.selection import select

    class Keeper(RolloutFilter):  # keeps whatever it is shown, and remembers it
        def select(self, rollouts):
            self.seen = list(rollouts.group_ids)
            return FilterResult(kept_groups=list(dict.fromkeys(rollouts.group_ids)))

    n, length = 6, 4
    batch = TrainBatch(
        input_ids=torch.zeros(n, length, dtype=torch.long), attention_mask=torch.ones(n, length, dtype=torch.long),
        response_mask=torch.ones(n, length - 1), token_rewards=torch.zeros(n, length - 1), group_ids=torch.tensor([0, 0, 1, 1, 2, 2]),
        episode_ids=torch.arange(n), scores=torch.tensor([-0.3, -0.3, -0.1, -0.3, -0.3, 0.0]), turn_ends=[[2]] * n,
    )
    keeper = Keeper()
    selection = select(batch, keeper, Algorithm(AlgorithmConfig()), lost_groups={1, 7})  # 7: no such group, ignored
    assert keeper.seen == [0, 0, 2, 2] and selection.rows == [0, 1, 4, 5]
    assert selection.metrics["rollout/env_lost_groups"] == 1.0
    assert selection.metrics["rollout/trained_group_ratio"] == 2 / 3  # of all three groups
    everything = select(batch, keeper, Algorithm(AlgorithmConfig()), lost_groups={0, 1, 2})
    assert everything.empty and keeper.seen == []
