"""Equal rewards give exactly zero advantage: property tests over every critic-free estimator.

A group whose episodes all earned the same reward carries no learning signal (the rollout
filters call it signal-free and DAPO drops it). Its advantages must therefore be exactly 0, not
rounding noise: GRPO divides by ``σ + 1e-6`` and whitening by ``sqrt(var + 1e-8)``, so noise of one
ulp used to come out as advantages of 0.19 (GRPO) and more, pushing the policy in arbitrary
directions. The estimators are taken from the installed registry, so a new critic-free estimator
is held to the same property; only the documented exceptions below are exempt.

Batches are built like the trainer's: several groups interleaved in one batch, rows of random
length, turns separated by observation tokens, rewards on each turn's last token (turn-level) or
the episode's score on its last token, and optionally several rows per episode sharing an
``episode_ids`` entry (windowed context modes).

Batch-whitened estimators (REINFORCE++ and its baseline variant) compare with the *batch*, not
with the group. In a batch where every group is flat their advantages are exactly 0 too. In a
mixed batch, exact zeros on the flat groups would be wrong for them: whitening is one affine map
``(x − mean) / std`` applied to the whole batch, and REINFORCE++ (no group baseline) rates a flat
group with a high reward above the batch mean on purpose. What must hold is that a flat group
gets no signal *inside* it: every trained token of a flat group carries one and the same value.
"""

from __future__ import annotations

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


def _zero_exempt(name: str, options: dict[str, bool], turn_level: bool, turns: int) -> str | None:
    """Why equal rewards need not give zero advantage for this case, or None when they must.

    REINFORCE++ scores each token by its discounted reward-to-go ``G_t`` and its only baseline is
    the batch mean. With turn-level rewards and several turns, ``G_t`` is larger in earlier turns
    even when every turn earned the same reward, and whitening keeps that difference (pinned by
    :func:`test_reinforce_pp_turn_level_keeps_reward_to_go`). Without whitening it has no
    baseline at all: ``A = G = S``.
    """
    if name == "reinforce-plus-plus" and turn_level and turns > 1:
        return "reward-to-go differs between turns by construction"
    if name == "reinforce-plus-plus" and not options.get("whiten", True):
        return "no baseline without whitening: A = S"
    return None


def _batch(episodes: list[tuple[int, list[float]]], *, turn_level: bool, rows_per_episode: list[int],
           dtype: torch.dtype, rng: random.Random) -> tuple[AdvantageInputs, list[int]]:
    """Inputs for ``episodes`` = ``[(group, turn_rewards), ...]``, rows shuffled; also each row's episode.

    Each row lays out every turn of its episode: a reply of 1-5 trained tokens, then 0-3
    observation tokens. Turn-level rows hold each turn's reward on the turn's last token; other
    rows hold the episode's score (the python sum of its turn rewards) on the last trained token.
    """
    rows: list[tuple[int, int, list[int], list[int], list[float]]] = []
    for e, (g, turn_rewards) in enumerate(episodes):
        for _ in range(rows_per_episode[e]):
            pos, on, ends = rng.randint(0, 2), [], []
            for _ in turn_rewards:
                n = rng.randint(1, 5)
                on.extend(range(pos, pos + n))
                ends.append(pos + n - 1)
                pos += n + rng.randint(0, 3)
            rew = list(turn_rewards) if turn_level else [0.0] * (len(ends) - 1) + [sum(turn_rewards)]
            rows.append((g, e, on, ends, rew))
    rng.shuffle(rows)
    width = max(max(r[2]) for r in rows) + 1 + rng.randint(0, 4)
    mask = torch.zeros(len(rows), width, dtype=dtype)
    rewards = torch.zeros(len(rows), width, dtype=dtype)
    for i, (_, _, on, ends, rew) in enumerate(rows):
        mask[i, on] = 1.0
        for p, r in zip(ends, rew):
            rewards[i, p] = r
    inputs = AdvantageInputs(
        token_rewards=rewards,
        response_mask=mask,
        group_ids=torch.tensor([10 + 7 * r[0] for r in rows]),
        turn_ends=[r[3] for r in rows],
        episode_ids=torch.tensor([1000 - r[1] for r in rows]),
    )
    return inputs, [r[1] for r in rows]


def test_registry_lists_the_critic_free_estimators():
    """The properties below run over the registry: make sure it sees the first-party estimators."""
    assert {"grpo", "drgrpo", "rloo", "reinforce-plus-plus", "reinforce-plus-plus-baseline"} <= set(CRITIC_FREE)
    assert BATCH_WHITENED <= set(CRITIC_FREE)


@pytest.mark.parametrize("name", CRITIC_FREE)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_equal_rewards_give_exactly_zero_advantage(name, data):
    options = data.draw(_options(name), label="options")
    turn_level = data.draw(st.booleans(), label="turn_level")
    turns = data.draw(st.integers(1, 6), label="turns")
    if _zero_exempt(name, options, turn_level, turns):
        # REINFORCE++ only: test the closest case that must give 0 (episode-level, whitened)
        turn_level, options = False, {**options, "whiten": True}
        assert _zero_exempt(name, options, turn_level, turns) is None
    value = data.draw(VALUES, label="value")
    sizes = data.draw(st.lists(st.integers(2, 20), min_size=1, max_size=4), label="episodes per group")
    episodes = [(g, [value] * turns) for g, n in enumerate(sizes) for _ in range(n)]
    inputs, _ = _batch(
        episodes,
        turn_level=turn_level,
        rows_per_episode=data.draw(st.lists(st.integers(1, 3), min_size=len(episodes), max_size=len(episodes))),
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
    Batch-whitened ones: one common value on all trained tokens of a flat group (module docstring)."""
    options = data.draw(_options(name), label="options")
    turn_level = data.draw(st.booleans(), label="turn_level")
    turns = data.draw(st.integers(1, 6), label="turns")
    if _zero_exempt(name, options, turn_level, turns) and turn_level:
        # REINFORCE++ reward-to-go: a flat row's tokens differ by turn by design, so episode-level
        turn_level = False
    flat = data.draw(st.lists(st.tuples(VALUES, st.integers(2, 12)), min_size=1, max_size=3), label="flat groups")
    mixed = data.draw(st.lists(st.lists(VALUES, min_size=2, max_size=12).filter(lambda v: len(set(v)) > 1),
                               min_size=1, max_size=3), label="non-flat groups")
    episodes = [(g, [v] * turns) for g, (v, n) in enumerate(flat) for _ in range(n)]
    episodes += [(len(flat) + g, [v] * turns) for g, vals in enumerate(mixed) for v in vals]
    flat_episodes = {e for e, (g, _) in enumerate(episodes) if g < len(flat)}
    group_of = [g for g, _ in episodes]
    inputs, episode_of_row = _batch(
        episodes,
        turn_level=turn_level,
        rows_per_episode=data.draw(st.lists(st.integers(1, 3), min_size=len(episodes), max_size=len(episodes))),
        dtype=data.draw(st.sampled_from([torch.float32, torch.float64]), label="dtype"),
        rng=random.Random(data.draw(st.integers(0, 2**32 - 1), label="layout seed")),
    )
    adv = registry.make("estimator", name, options)(inputs).advantages
    on = inputs.response_mask > 0
    for g in range(len(flat)):
        rows = torch.tensor([group_of[e] == g for e in episode_of_row])
        tokens = adv[rows][on[rows]]
        if name in BATCH_WHITENED:
            assert torch.equal(tokens, tokens[:1].expand_as(tokens)), tokens.unique()
        else:
            assert torch.equal(tokens, torch.zeros_like(tokens)), tokens.abs().max()
    if name == "reinforce-plus-plus-baseline":
        # its group baseline zeroes every flat group, so all of them get the same batch shift
        rows = torch.tensor([e in flat_episodes for e in episode_of_row])
        shared = adv[rows][on[rows]]
        assert torch.equal(shared, shared[:1].expand_as(shared)), shared.unique()


def test_reinforce_pp_turn_level_keeps_reward_to_go():
    """The documented exception: with turn-level rewards REINFORCE++ credits earlier turns with
    the later turns' rewards, so equal turn rewards still rank earlier turns higher."""
    # two identical rows, turns on tokens {0, 1} and {3, 4}, reward 0.7 on tokens 1 and 4 (γ = 1):
    # G = [1.4, 1.4, 0, 0.7, 0.7] on the mask -> whitened: turn 1 positive, turn 2 negative
    rewards = torch.tensor([[0.0, 0.7, 0.0, 0.0, 0.7]] * 2)
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0, 1.0]] * 2)
    out = registry.make("estimator", "reinforce-plus-plus")(
        AdvantageInputs(token_rewards=rewards, response_mask=mask, group_ids=torch.tensor([0, 0]), turn_ends=[[1, 4]] * 2)
    )
    assert (out.advantages[:, :2] > 0).all() and (out.advantages[:, 3:] < 0).all()
    assert torch.equal(out.advantages[:, 2], torch.zeros(2))
