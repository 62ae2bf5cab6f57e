"""Sokoban generator and step-rate benchmark, measured side by side in one run.

Compares ``ragen_env_sokoban.generator.generate_room`` (bitboard BFS reverse play) with a
reference-style generator written below from the description in spec 13.1: numpy grids, a
recursive depth-first reverse play with a TTL (search depth 30), full-grid memoisation and the
300,000-state cap. Both run on one core in this process; the script prints rooms/s of each and
the ratio, then the env's step rate.

Usage::

    python bench/bench_sokoban.py [--rooms 2000] [--ref-rooms 300] [--steps 50000]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from ragen_env_sokoban.env import SokobanEnv
from ragen_env_sokoban.generator import generate_room

_DIRS = np.array([(-1, 0), (1, 0), (0, -1), (0, 1)])
_MASKS = [
    np.array([[0, 0, 0], [1, 1, 1], [0, 0, 0]]),
    np.array([[0, 1, 0], [0, 1, 0], [0, 1, 0]]),
    np.array([[0, 0, 0], [1, 1, 0], [0, 1, 0]]),
    np.array([[0, 0, 0], [0, 1, 1], [0, 1, 0]]),
    np.array([[0, 0, 0], [1, 1, 0], [1, 1, 0]]),
]


class _RefSearch:
    """Reference-style recursive DFS over full numpy grids (the baseline, not used by the env)."""

    def __init__(self, structure: np.ndarray, num_boxes: int) -> None:
        self.structure = structure
        self.num_boxes = num_boxes
        self.seen: set[bytes] = set()
        self.best_score = -1
        self.best_state: np.ndarray | None = None

    def dfs(
        self, state: np.ndarray, mapping: dict, swaps: int, last: tuple, ttl: int
    ) -> None:
        ttl -= 1
        if ttl <= 0 or len(self.seen) >= 300_000:
            return
        key = state.tobytes()
        if key in self.seen:
            return
        self.seen.add(key)
        score = swaps * sum(
            abs(t[0] - b[0]) + abs(t[1] - b[1]) for t, b in mapping.items()
        )
        if np.count_nonzero(state == 2) != self.num_boxes:
            score = 0
        if score > self.best_score:
            self.best_score, self.best_state = score, state
        for d in _DIRS:
            nxt_state, nxt_map, nxt_last = self.reverse_move(
                state.copy(), dict(mapping), last, d
            )
            self.dfs(nxt_state, nxt_map, swaps + (nxt_last != last), nxt_last, ttl)

    def reverse_move(
        self, state: np.ndarray, mapping: dict, last: tuple, d: np.ndarray
    ) -> tuple:
        player = np.argwhere(state == 5)[0]
        nxt = player + d
        if state[nxt[0], nxt[1]] in (1, 2):
            state[player[0], player[1]] = self.structure[player[0], player[1]]
            state[nxt[0], nxt[1]] = 5
            behind = player - d
            if state[behind[0], behind[1]] in (3, 4):
                on_target = self.structure[player[0], player[1]] == 2
                state[player[0], player[1]] = 3 if on_target else 4
                state[behind[0], behind[1]] = self.structure[behind[0], behind[1]]
                for target, box in mapping.items():
                    if box == (behind[0], behind[1]):
                        mapping[target] = (player[0], player[1])
                        last = target
        return state, mapping, last


def reference_generate(
    seed: int, dim: tuple[int, int] = (6, 6), num_boxes: int = 1, search_depth: int = 30
) -> np.ndarray | None:
    """Spec 13.1 generation with numpy grids and recursive DFS (local RNG, never global)."""
    rng = np.random.default_rng(seed)
    rows, cols = dim
    for _attempt in range(4):
        room = np.zeros(dim, dtype=np.int64)
        pos = np.array([rng.integers(1, rows - 1), rng.integers(1, cols - 1)])
        direction = _DIRS[rng.integers(4)]
        for _ in range(int(1.7 * (rows + cols))):
            if rng.random() < 0.35:
                direction = _DIRS[rng.integers(4)]
            pos = np.clip(pos + direction, 1, [rows - 2, cols - 2])
            mask = _MASKS[rng.integers(5)]
            room[pos[0] - 1 : pos[0] + 2, pos[1] - 1 : pos[1] + 2] |= mask
        room[[0, -1], :] = 0
        room[:, [0, -1]] = 0
        free = np.argwhere(room == 1)
        if len(free) <= num_boxes + 1:
            continue
        picks = free[rng.choice(len(free), num_boxes + 1, replace=False)]
        structure = room.copy()
        for r, c in picks[1:]:
            structure[r, c] = 2
        state = structure.copy()
        for r, c in picks[1:]:
            state[r, c] = 3
        state[picks[0][0], picks[0][1]] = 5
        search = _RefSearch(structure, num_boxes)
        mapping = {(int(r), int(c)): (int(r), int(c)) for r, c in picks[1:]}
        search.dfs(state, mapping, 0, (-1, -1), search_depth)
        if search.best_score > 0:
            return search.best_state
    return None


def _rate(fn, n: int) -> float:
    start = time.perf_counter()
    for seed in range(n):
        fn(seed)
    return n / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rooms", type=int, default=2000, help="rooms for our generator"
    )
    parser.add_argument(
        "--ref-rooms",
        type=int,
        default=300,
        help="rooms for the reference-style generator",
    )
    parser.add_argument(
        "--steps", type=int, default=50_000, help="env steps for the step rate"
    )
    args = parser.parse_args(argv)
    print("command:", " ".join([sys.executable, *sys.argv]))

    ref = _rate(lambda s: reference_generate(s, (6, 6), 1, 30), args.ref_rooms)
    ours30 = _rate(lambda s: generate_room(s, (6, 6), 1, 30), args.rooms)
    ours300 = _rate(lambda s: generate_room(s + 10**6, (6, 6), 1, 300), args.rooms)
    larger = _rate(lambda s: generate_room(s, (8, 8), 2, 10), args.rooms)
    print("6x6, 1 box, one core:")
    print(
        f"  reference-style recursive DFS (depth 30, full-grid memo): {ref:10.0f} rooms/s"
    )
    print(
        f"  ours, bitboard BFS (depth 30):                          {ours30:10.0f} rooms/s  ratio {ours30 / ref:5.1f}x"
    )
    print(
        f"  ours, bitboard BFS (depth 300, SimpleSokoban default):   {ours300:10.0f} rooms/s  ratio {ours300 / ref:5.1f}x"
    )
    print(
        f"  ours, 8x8 2 boxes depth 10 (LargerSokoban):              {larger:10.0f} rooms/s"
    )

    for label, dims, boxes, depth in (
        ("6x6 1 box", (6, 6), 1, 300),
        ("8x8 2 boxes depth 10", (8, 8), 2, 10),
    ):
        env = SokobanEnv(dim_room=dims, num_boxes=boxes, search_depth=depth)
        lengths = []
        for seed in range(500):
            env.reset(seed)
            lengths.append(env.optimal_moves())
        over = sum(n > env.config.max_actions_per_episode for n in lengths)
        print(
            f"optimal solution length, {label}, seeds 0-499: mean {np.mean(lengths):.2f}, "
            f"max {max(lengths)}, {over} rooms need more than {env.config.max_actions_per_episode} actions"
        )

    env = SokobanEnv()
    actions = ["Up", "Left", "Down", "Right", "Right", "Up", "Left", "Down"]
    env.reset(0)
    episodes = 0
    start = time.perf_counter()
    for i in range(args.steps):
        if env.step(actions[i % len(actions)]).done:
            episodes += 1
            env.reset(episodes)
    steps = args.steps / (time.perf_counter() - start)
    print(
        f"env.step (grid render included): {steps:10.0f} steps/s  (goal >= 20,000; {episodes} episodes ended)"
    )


if __name__ == "__main__":
    main()
