"""Pure helpers for FrozenLake maps: seeded generation, reachability and shortest paths.

Maps are Gymnasium ``desc`` rows: ``S`` start, ``F`` frozen, ``H`` hole, ``G`` goal. Unlike
Gymnasium's own ``generate_random_map`` the start and goal are drawn anywhere on the board
(spec 13.2), and randomness comes only from the generator passed in.
"""

from __future__ import annotations

from collections import deque

import numpy as np

#: Gymnasium's action ids in the order of the action names ``Left, Down, Right, Up``.
LEFT, DOWN, RIGHT, UP = 0, 1, 2, 3
#: (row, col) displacement of each action id.
MOVES: dict[int, tuple[int, int]] = {LEFT: (0, -1), DOWN: (1, 0), RIGHT: (0, 1), UP: (-1, 0)}

#: Give up after this many rejected boards; only reachable with absurd settings (p ~ 0 on a
#: huge board), where an error beats an endless loop.
MAX_ATTEMPTS = 100_000


def neighbours(row: int, col: int, size: int) -> list[tuple[int, int, int]]:
    """In-board neighbours of ``(row, col)`` as ``(action, row, col)``."""
    out = []
    for action, (dr, dc) in MOVES.items():
        r, c = row + dr, col + dc
        if 0 <= r < size and 0 <= c < size:
            out.append((action, r, c))
    return out


def reachable(desc: list[str], start: tuple[int, int], goal: tuple[int, int]) -> bool:
    """Depth-first search from ``start`` through non-hole cells; True if ``goal`` is reached."""
    size = len(desc)
    stack = [start]
    seen = {start}
    while stack:
        row, col = stack.pop()
        if (row, col) == goal:
            return True
        for _, r, c in neighbours(row, col, size):
            if (r, c) not in seen and desc[r][c] != "H":
                seen.add((r, c))
                stack.append((r, c))
    return False


def generate_map(rng: np.random.Generator, size: int, p: float) -> list[str]:
    """Draw a solvable ``size`` x ``size`` map.

    Repeats: every cell frozen with probability ``p`` (else a hole); a start and a different goal
    cell drawn uniformly over the whole board (overwriting what was there); accept when the goal
    is reachable from the start through non-hole cells.

    Raises:
        ValueError: no solvable board after :data:`MAX_ATTEMPTS` draws.
    """
    for _ in range(MAX_ATTEMPTS):
        frozen = rng.random((size, size)) < p
        start_idx, goal_idx = (int(i) for i in rng.choice(size * size, size=2, replace=False))
        start, goal = divmod(start_idx, size), divmod(goal_idx, size)
        rows = [["F" if frozen[r, c] else "H" for c in range(size)] for r in range(size)]
        rows[start[0]][start[1]] = "S"
        rows[goal[0]][goal[1]] = "G"
        desc = ["".join(row) for row in rows]
        if reachable(desc, start, goal):
            return desc
    raise ValueError(f"no solvable {size}x{size} FrozenLake map with p={p} after {MAX_ATTEMPTS} draws")


def shortest_path(desc: list[str], start: tuple[int, int]) -> list[int] | None:
    """Breadth-first search for the fewest intended moves from ``start`` to the goal.

    Moves into holes are never taken, and bumping the border (no movement) is never useful, so
    only in-board non-hole neighbours are expanded. Returns action ids, ``[]`` when ``start`` is
    the goal, or ``None`` when the goal cannot be reached (or ``start`` is a hole).
    """
    size = len(desc)
    if desc[start[0]][start[1]] == "H":
        return None
    parent: dict[tuple[int, int], tuple[tuple[int, int], int] | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if desc[cell[0]][cell[1]] == "G":
            path: list[int] = []
            link = parent[cell]
            while link is not None:
                prev, action = link
                path.append(action)
                link = parent[prev]
            return path[::-1]
        for action, r, c in neighbours(cell[0], cell[1], size):
            if (r, c) not in parent and desc[r][c] != "H":
                parent[(r, c)] = (cell, action)
                queue.append((r, c))
    return None
