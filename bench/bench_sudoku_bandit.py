"""Throughput of the Sudoku and Bandit envs: puzzle generation, parsing and env steps.

Run: ``python bench/bench_sudoku_bandit.py [--quick]``. Prints rates measured side by side in
one run, plus the cost of the uniqueness guarantee as a ratio against filling a full grid only
(what the reference's generator does before blanking cells without any check).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable


def _rate(fn: Callable[[int], object], count: int) -> float:
    fn(count)  # warm-up on an index outside the timed range (imports, lookup tables)
    start = time.perf_counter()
    for i in range(count):
        fn(i)
    return count / (time.perf_counter() - start)


def bench_generation(count: int) -> None:
    from ragen_env_sudoku.puzzle import generate_puzzle, random_full_grid

    from ragen_core.seeding import make_py_rng

    print("== Sudoku generation (unique solution), puzzles/s ==")
    for n in (4, 9):
        for difficulty in ("easy", "medium", "hard"):
            # the fill step with the very generator generate_puzzle uses for the same seed
            fill = _rate(
                lambda s, n=n, d=difficulty: random_full_grid(n, make_py_rng(10_000 + s, "sudoku", n, d)),
                count,
            )
            generate_puzzle.cache_clear()
            rate = _rate(lambda s, n=n, d=difficulty: generate_puzzle(10_000 + s, n, d), count)
            print(
                f"  {n}x{n} {difficulty:<6}  unique puzzle {rate:9.1f}/s   full grid only {fill:9.1f}/s"
                f"   uniqueness costs {fill / rate:4.1f}x"
            )
    generate_puzzle.cache_clear()
    rate = _rate(lambda s: generate_puzzle(20_000 + s, 16, "easy"), max(2, count // 50))
    print(f"  16x16 easy   unique puzzle  {rate:10.1f}/s")


def bench_parse(count: int) -> None:
    from ragen_env_sudoku.parsing import ParseError, parse_placement

    texts = ["place 5 at row 2 col 3", "2,3,5", "(2,3,5)", "5 at 2,3", "no idea", "x" * 150]

    def one(i: int) -> None:
        try:
            parse_placement(texts[i % len(texts)])
        except ParseError:
            pass

    print(f"== Sudoku parsing: {_rate(one, count * 20):10.1f} actions/s")


def bench_sudoku_steps(count: int) -> None:
    from ragen_env_sudoku import SudokuEnv
    from ragen_env_sudoku.plugin import SPEC

    print("== Sudoku oracle episodes (reset + every placement), steps/s ==")
    for preset in ("TinySudoku", "SimpleSudoku", "MediumSudoku"):
        for fmt in ("simple", "with_feedback"):
            env = SudokuEnv(SPEC.make_config({"render_format": fmt}, preset=preset))
            for s in range(count):  # warm the puzzle cache so only stepping is timed
                env.reset(s)
            steps = 0
            start = time.perf_counter()
            for s in range(count):
                env.reset(s)
                for action in env.oracle_actions() or []:
                    env.step(action)
                    steps += 1
            elapsed = time.perf_counter() - start
            print(f"  {preset:<13} render={fmt:<13} {steps / elapsed:10.1f} steps/s")


def bench_bandit(count: int) -> None:
    from ragen_env_bandit import BanditEnv

    env = BanditEnv()

    def episode(s: int) -> None:
        env.reset(s, member=s % 8)
        env.step(env.high_arm)

    print(f"== Bandit reset + step: {_rate(episode, count * 20):10.1f} episodes/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    count = 20 if args.quick else 200
    bench_generation(count)
    bench_parse(count)
    bench_sudoku_steps(count)
    bench_bandit(count)


if __name__ == "__main__":
    main()
