"""Optimal Sokoban solver: breadth-first search over player moves and pushes.

Every action (a plain move or a push) costs one, so BFS returns a shortest action list, which
is what the env's ``oracle_actions()`` replays and what ``optimal_moves()`` reports. States are
``player | box_bitboard << shift`` integers; the search is bounded by ``max_states`` so a
pathological room cannot hang a caller.
"""

from __future__ import annotations

from collections.abc import Iterable

from ragen_env_sokoban.generator import WALL

#: Action names in the order of :data:`ragen_env_sokoban.generator.DIRECTIONS`.
ACTION_NAMES: tuple[str, ...] = ("Up", "Down", "Left", "Right")


def solve(
    structure: tuple[int, ...] | list[int],
    cols: int,
    player: int,
    boxes: Iterable[int],
    *,
    max_states: int = 2_000_000,
) -> list[str] | None:
    """Shortest action list that puts every box on a target (success as the env defines it), or ``None`` if there is none.

    Args:
        structure: Flat fixed cell codes (walls, floor, targets).
        cols: Grid width.
        player: Flat cell of the player.
        boxes: Flat cells of the boxes.
        max_states: Give up (return ``None``) after this many distinct states.

    Returns:
        Action names (``"Up"``, ``"Down"``, ``"Left"``, ``"Right"``); ``[]`` when already solved.
    """
    n = len(structure)
    free = [code != WALL for code in structure]
    target_mask = sum(1 << i for i, code in enumerate(structure) if code == 2)
    box_mask = sum(1 << b for b in boxes)
    if not box_mask & ~target_mask:
        return []
    shift = n.bit_length()
    pmask = (1 << shift) - 1
    deltas = (-cols, cols, -1, 1)
    start = player | box_mask << shift
    parent: dict[int, tuple[int, int]] = {start: (-1, -1)}
    frontier = [start]
    goal = -1
    while frontier and goal < 0:
        nxt: list[int] = []
        for state in frontier:
            p = state & pmask
            bm = state >> shift
            for action, delta in enumerate(deltas):
                q = p + delta
                if not (0 <= q < n and free[q]):
                    continue
                if bm >> q & 1:
                    r = q + delta
                    if not (0 <= r < n and free[r]) or bm >> r & 1:
                        continue
                    new_bm = bm ^ (1 << q) ^ (1 << r)
                else:
                    new_bm = bm
                new = q | new_bm << shift
                if new in parent:
                    continue
                parent[new] = (state, action)
                if not new_bm & ~target_mask:
                    goal = new
                    break
                nxt.append(new)
            if goal >= 0:
                break
        if len(parent) > max_states:
            return None
        frontier = nxt
    if goal < 0:
        return None
    path: list[str] = []
    state = goal
    while True:
        prev, action = parent[state]
        if prev < 0:
            break
        path.append(ACTION_NAMES[action])
        state = prev
    path.reverse()
    return path
