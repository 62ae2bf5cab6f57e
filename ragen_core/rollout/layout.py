"""Training sequences from trajectories: exactly the sampled tokens are trained (spec 17 L1, L2).

``full`` context mode gives one sequence per episode: the last turn's prompt plus its reply,
which (by the runner's append-only construction) contains every earlier prompt and reply
verbatim. The loss mask is the union of the reply spans -- the ids the engine sampled, EOS
included when it was sampled. Role headers, the generation prefix (``<think>``), appended
end-of-turn tokens and observations are prompt tokens and are never trained (unless the run
asks for the reference's shifted mask, ``compat.shifted_mask``:
:func:`ragen_core.trainer.batch.shifted_mask`).

``last-k`` and ``single-turn`` modes give one sample per turn (:func:`turn_samples`).

A run with ``compat.retokenized_text`` trains re-rendered text instead
(:func:`ragen_core.trainer.batch.retokenized_row`).

Spans are half-open ``(start, end)`` indices into ``input_ids``; ``turn_ends[k]`` is the index
of the last sampled token of turn ``k`` (where a per-turn reward belongs). A trajectory with no
turns (its first prompt did not fit the context budget) yields empty lists.
"""

from __future__ import annotations

from ragen_core.rollout.types import Trajectory

Layout = tuple[list[int], list[tuple[int, int]], list[int]]


def episode_layout(traj: Trajectory) -> Layout:
    """``(input_ids, response_spans, turn_ends)`` of a ``full``-mode episode.

    Raises:
        ValueError: the turns are not append-only (e.g. the trajectory came from a windowed
            context mode; use :func:`turn_samples` for those).
    """
    if not traj.turns:
        return [], [], []
    spans: list[tuple[int, int]] = []
    ends: list[int] = []
    for k, turn in enumerate(traj.turns):
        if k + 1 < len(traj.turns):
            nxt = traj.turns[k + 1].prompt_ids
            n, m = len(turn.prompt_ids), len(turn.response_ids)
            if nxt[:n] != turn.prompt_ids or nxt[n : n + m] != turn.response_ids:
                raise ValueError(
                    f"turn {k + 1} of episode env_id={traj.env_id} (seed {traj.seed}) does not extend turn {k}'s "
                    "prompt + reply; episode_layout needs the 'full' context mode (use turn_samples otherwise)"
                )
        start = len(turn.prompt_ids)
        end = start + len(turn.response_ids)
        spans.append((start, end))
        ends.append(end - 1)
    last = traj.turns[-1]
    return last.prompt_ids + last.response_ids, spans, ends


def turn_samples(traj: Trajectory) -> list[Layout]:
    """One ``(input_ids, [span], [end])`` sample per turn: the turn's prompt plus its reply."""
    out: list[Layout] = []
    for turn in traj.turns:
        start = len(turn.prompt_ids)
        end = start + len(turn.response_ids)
        out.append((turn.prompt_ids + turn.response_ids, [(start, end)], [end - 1]))
    return out


def loss_mask(length: int, spans: list[tuple[int, int]]) -> list[int]:
    """0/1 mask over ``length`` positions, 1 on every token inside a span."""
    mask = [0] * length
    for start, end in spans:
        for i in range(start, end):
            mask[i] = 1
    return mask
