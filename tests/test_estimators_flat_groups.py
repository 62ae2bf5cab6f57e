"""Equal rewards give exactly zero advantage: property tests over every critic-free estimator.

A group whose episodes all earned the same reward carries no learning signal (the rollout
filters call it signal-free and DAPO drops it). Its advantages must therefore be exactly 0, not
rounding noise: GRPO divides by ``σ + 1e-6`` and whitening by ``sqrt(var + 1e-8)``, so noise of one
ulp used to come out as advantages of 0.19 (GRPO) and more, pushing the policy in arbitrary
directions. The estimators are taken from the installed registry, so a new critic-free estimator
is held to the same property; only the documented exceptions below are exempt.

Batches are built like the trainer's: several groups interleaved in one batch, rows of random
length, turns separated by observation tokens, rewards on each turn's last token (turn-level) or
the episode's score on its last token; or, as in windowed context modes, one row per turn holding
the episode's score, the rows of an episode sharing an ``episode_ids`` entry and kept in turn order.

Batch-whitened estimators (REINFORCE++ and its baseline variant) compare with the *batch*, not
with the group. In a batch where every group is flat their advantages are exactly 0 too. In a
mixed batch, exact zeros on the flat groups would be wrong for them: REINFORCE++ (no group
baseline) rates a flat group with a high reward above the batch mean on purpose, and whitening
shifts every row of the batch alike. What must hold is that a flat group gets no signal *inside*
it: REINFORCE++-baseline gives all its trained tokens one value; REINFORCE++, whose baseline is
the batch mean of each turn, gives all its tokens of one turn one value.
"""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_core import registry
from ragen_core.interfaces.advantage import AdvantageInputs


def _critic_free() -> list[str]:
    return [n for n in registry.names("estimator") if not registry.get_spec("estimator", n).needs_critic]


CRITIC_FREE = _critic_free()

BATCH_WHITENED = {"reinforce-plus-plus", "reinforce-plus-plus-baseline"}
"""Estimators whose baseline is the batch (whitening), not the group: see the module docstring."""

VALUES = st.one_of(
    st.sampled_from([0.7, 0.1, 1 / 3, 1e-8, 1e6, -0.3, -1e6, 0.0, 1.0]),
    st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False, allow_subnormal=False),
)


def _options(name: str) -> st.SearchStrategy[dict[str, bool]]:
    """Every boolean option of the estimator's config, drawn freely (other options: defaults)."""
    model = registry.get_spec("estimator", name).config_model
    flags = [f for f, info in model.model_fields.items() if info.annotation is bool]
    return st.fixed_dictionaries({f: st.booleans() for f in flags})


def _zero_exempt(name: str, options: dict[str, bool]) -> str | None:
    """Why equal rewards need not give zero advantage for this case, or None when they must.

    REINFORCE++ without whitening has no baseline at all: ``A = G``, the return itself.
    """
    if name == "reinforce-plus-plus" and not options.get("whiten", True):
        return "no baseline without whitening: A = G"
    return None


def _batch(episodes: list[tuple[int, list[float]]], *, turn_level: bool, per_turn: bool,
           dtype: torch.dtype, rng: random.Random) -> tuple[AdvantageInputs, list[int], torch.Tensor]:
    """Inputs for ``episodes`` = ``[(group, turn_rewards), ...]``, rows shuffled; also each row's
    episode and, per position, the turn of the episode it was laid out for (-1 off the mask).

    Each turn is a reply of 1-5 trained tokens followed by 0-3 observation tokens. Without
    ``per_turn`` a row lays out every turn of its episode; turn-level rows hold each turn's reward
    on the turn's last token, other rows the episode's score (the python sum of its turn rewards)
    on the last trained token. With ``per_turn`` (windowed context modes) each turn is its own row
    holding the score on its last token, whatever ``turn_level`` says (as ``build_batch`` does);
    an episode's rows stay in turn order among the shuffled rows.
    """
    rows: list[tuple[int, int, list[int], list[int], list[float], list[int]]] = []
    for e, (g, turn_rewards) in enumerate(episodes):
        pos, on, ends, turn_of = rng.randint(0, 2), [], [], []
        for k, _ in enumerate(turn_rewards):
            if per_turn:
                pos, on, turn_of = rng.randint(0, 4), [], []
            n = rng.randint(1, 5)
            on.extend(range(pos, pos + n))
            turn_of.extend([k] * n)
            ends.append(pos + n - 1)
            pos += n + rng.randint(0, 3)
            if per_turn:
                rows.append((g, e, on, ends[-1:], [sum(turn_rewards)], turn_of))
        if not per_turn:
            rew = list(turn_rewards) if turn_level else [0.0] * (len(ends) - 1) + [sum(turn_rewards)]
            rows.append((g, e, on, ends, rew, turn_of))
    rng.shuffle(rows)
    slots: dict[int, list[int]] = {}
    for i, r in enumerate(rows):
        slots.setdefault(r[1], []).append(i)
    for idx in slots.values():  # put each episode's rows back in turn order, in the slots it got
        for i, r in zip(idx, sorted((rows[i] for i in idx), key=lambda r: r[5][0])):
            rows[i] = r
    width = max(max(r[2]) for r in rows) + 1 + rng.randint(0, 4)
    mask = torch.zeros(len(rows), width, dtype=dtype)
    rewards = torch.zeros(len(rows), width, dtype=dtype)
    turns = torch.full((len(rows), width), -1)
    for i, (_, _, on, ends, rew, turn_of) in enumerate(rows):
        mask[i, on] = 1.0
        turns[i, on] = torch.tensor(turn_of)
        for p, r in zip(ends, rew):
            rewards[i, p] = r
    inputs = AdvantageInputs(
        token_rewards=rewards,
        response_mask=mask,
        group_ids=torch.tensor([10 + 7 * r[0] for r in rows]),
        turn_ends=[r[3] for r in rows],
        episode_ids=torch.tensor([1000 - r[1] for r in rows]),
    )
    return inputs, [r[1] for r in rows], turns


def test_registry_lists_the_critic_free_estimators():
    """The properties below run over the registry: make sure it sees the first-party estimators."""
    assert {"grpo", "drgrpo", "rloo", "reinforce-plus-plus", "reinforce-plus-plus-baseline"} <= set(CRITIC_FREE)
    assert BATCH_WHITENED <= set(CRITIC_FREE)


@pytest.mark.parametrize("name", CRITIC_FREE)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_equal_rewards_give_exactly_zero_advantage(name, data):
    options = data.draw(_options(name), label="options")
    if _zero_exempt(name, options):
        options = {**options, "whiten": True}  # REINFORCE++ only: the closest case that must give 0
        assert _zero_exempt(name, options) is None
    turn_level = data.draw(st.booleans(), label="turn_level")
    turns = data.draw(st.integers(1, 6), label="turns")
    value = data.draw(VALUES, label="value")
    sizes = data.draw(st.lists(st.integers(2, 20), min_size=1, max_size=4), label="episodes per group")
    episodes = [(g, [value] * turns) for g, n in enumerate(sizes) for _ in range(n)]
    inputs, _, _ = _batch(
        episodes,
        turn_level=turn_level,
        per_turn=data.draw(st.booleans(), label="one row per turn"),
        dtype=data.draw(st.sampled_from([torch.float32, torch.float64]), label="dtype"),
        rng=random.Random(data.draw(st.integers(0, 2**32 - 1), label="layout seed")),
    )
    out = registry.make("estimator", name, options)(inputs)
    assert out.advantages.dtype == inputs.token_rewards.dtype
    assert torch.equal(out.advantages, torch.zeros_like(out.advantages)), out.advantages.abs().max()


@pytest.mark.parametrize("name", CRITIC_FREE)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_flat_groups_in_a_mixed_batch(name, data):
    """Group-relative estimators: exactly 0 on a flat group's rows whatever the other groups hold.
    Batch-whitened ones: one common value on a flat group's trained tokens, per turn for REINFORCE++
    (module docstring)."""
    options = data.draw(_options(name), label="options")
    turn_level = data.draw(st.booleans(), label="turn_level")
    turns = data.draw(st.integers(1, 6), label="turns")
    flat = data.draw(st.lists(st.tuples(VALUES, st.integers(2, 12)), min_size=1, max_size=3), label="flat groups")
    mixed = data.draw(st.lists(st.lists(VALUES, min_size=2, max_size=12).filter(lambda v: len(set(v)) > 1),
                               min_size=1, max_size=3), label="non-flat groups")
    episodes = [(g, [v] * turns) for g, (v, n) in enumerate(flat) for _ in range(n)]
    episodes += [(len(flat) + g, [v] * turns) for g, vals in enumerate(mixed) for v in vals]
    flat_episodes = {e for e, (g, _) in enumerate(episodes) if g < len(flat)}
    group_of = [g for g, _ in episodes]
    inputs, episode_of_row, turn_of = _batch(
        episodes,
        turn_level=turn_level,
        per_turn=data.draw(st.booleans(), label="one row per turn"),
        dtype=data.draw(st.sampled_from([torch.float32, torch.float64]), label="dtype"),
        rng=random.Random(data.draw(st.integers(0, 2**32 - 1), label="layout seed")),
    )
    adv = registry.make("estimator", name, options)(inputs).advantages
    on = inputs.response_mask > 0
    for g in range(len(flat)):
        rows = torch.tensor([group_of[e] == g for e in episode_of_row]).unsqueeze(1) & on
        if name == "reinforce-plus-plus":  # per turn (without whitening too: A = G, one value per turn)
            for k in range(turns):
                tokens = adv[rows & (turn_of == k)]
                assert torch.equal(tokens, tokens[:1].expand_as(tokens)), (k, tokens.unique())
        elif name in BATCH_WHITENED:
            tokens = adv[rows]
            assert torch.equal(tokens, tokens[:1].expand_as(tokens)), tokens.unique()
        else:
            tokens = adv[rows]
            assert torch.equal(tokens, torch.zeros_like(tokens)), tokens.abs().max()
    if name == "reinforce-plus-plus-baseline":
        # its group baseline zeroes every flat group, so all of them get the same batch shift
        rows = torch.tensor([e in flat_episodes for e in episode_of_row])
        shared = adv[rows][on[rows]]
        assert torch.equal(shared, shared[:1].expand_as(shared)), shared.unique()


def test_reinforce_pp_turn_level_equal_rewards_issue_example():
    """The issue's case: turn-level rewards of 0.7 in every turn. The reward-to-go is 1.4 on the
    first turn and 0.7 on the second, but each turn is compared with the same turn of the batch,
    so nothing is left (plain batch whitening gave about +1 on turn 1 and -1 on turn 2)."""
    rewards = torch.tensor([[0.0, 0.7, 0.0, 0.0, 0.7]] * 2)
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0, 1.0]] * 2)
    out = registry.make("estimator", "reinforce-plus-plus")(
        AdvantageInputs(token_rewards=rewards, response_mask=mask, group_ids=torch.tensor([0, 0]), turn_ends=[[1, 4]] * 2)
    )
    assert out.returns[0].tolist() == pytest.approx([1.4, 1.4, 0.0, 0.7, 0.7])  # float32 sum 0.7 + 0.7
    assert torch.equal(out.advantages, torch.zeros(2, 5))


def test_reinforce_pp_mixed_batch_credits_earlier_turns_with_later_rewards():
    """Why REINFORCE++ keeps reward-to-go: a reward earned in a later turn reaches the turns before it.

    Turn-level rewards, γ = 1, one trained token per turn (positions 0, 2, 4; observations between):
    A solves in turn 1, B in turn 2, C in turn 3 (reward 1 on the solving turn), D never does
    (three turns of 0). Worked by hand:
        G:   A [1]   B [1, 1]   C [1, 1, 1]   D [0, 0, 0]
        b_1 = mean(1, 1, 1, 0) = 3/4;  b_2 = mean(1, 1, 0) = 2/3;  b_3 = mean(1, 0) = 1/2
        c:   A [1/4]   B [1/4, 1/3]   C [1/4, 1/3, 1/2]   D [-3/4, -2/3, -1/2]
        Σ c² = 3/16 + 9/16 + 2/9 + 4/9 + 1/4 + 1/4 = 23/12,  n = 9,  var = 23/96
    B's and C's first turns earned nothing themselves yet get the same credit as A's solving turn,
    and D's get the blame; with the immediate reward only, those three first turns would be equal.
    """
    rewards = torch.tensor(
        [[1, 0, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 0, 0, 1], [0, 0, 0, 0, 0]], dtype=torch.float64
    )
    mask = torch.tensor(
        [[1, 0, 0, 0, 0], [1, 0, 1, 0, 0], [1, 0, 1, 0, 1], [1, 0, 1, 0, 1]], dtype=torch.float64
    )
    out = registry.make("estimator", "reinforce-plus-plus")(
        AdvantageInputs(token_rewards=rewards, response_mask=mask, group_ids=torch.tensor([0, 0, 1, 1]),
                        turn_ends=[[0], [0, 2], [0, 2, 4], [0, 2, 4]])
    )
    s = math.sqrt(23 / 96 + 1e-8)
    expected = [
        [1 / 4, 0, 0, 0, 0],
        [1 / 4, 0, 1 / 3, 0, 0],
        [1 / 4, 0, 1 / 3, 0, 1 / 2],
        [-3 / 4, 0, -2 / 3, 0, -1 / 2],
    ]
    # float64 sums of a few terms in another order than the hand derivation: a relative 1e-12 is
    # thousands of ulps, far below any formula error (which would be of order 0.1)
    for row, want in zip(out.advantages.tolist(), expected):
        assert row == pytest.approx([w / s for w in want], rel=1e-12, abs=1e-15)
    assert out.advantages[1, 0] > 0 and out.advantages[2, 0] > 0 and out.advantages[3, 0] < 0
