"""Sudoku grids, a bitmask solver and a generator of puzzles with exactly one solution.

A grid is a flat tuple of ``n * n`` ints, row by row, ``0`` for an empty cell; ``n`` is 4, 9
or 16 and the boxes are ``sqrt(n) x sqrt(n)``.

The reference generator fills a grid and then blanks random cells without checking that the
puzzle still has one solution (spec 17.5). Here a cell is blanked only if the puzzle stays
uniquely solvable. The check is cheap: blanking cell ``c`` (solution value ``v``) of a uniquely
solvable puzzle keeps it unique exactly when no solution puts another value into ``c``, so we
try each other candidate ``w`` at ``c`` and ask the solver for *one* solution.

All randomness comes from a ``random.Random`` made by :func:`ragen_core.seeding.make_py_rng`
from ``(seed, "sudoku", n, difficulty)``; the global RNGs are never touched.
"""

from __future__ import annotations

import functools
import math
import random
from typing import NamedTuple

from ragen_core.seeding import make_py_rng

#: Fraction of the cells blanked per difficulty (spec 13.10: 32 / 40 / 48 blanks for 9x9).
BLANK_FRACTION: dict[str, float] = {"easy": 0.4, "medium": 0.5, "hard": 0.6}


def target_blanks(grid_size: int, difficulty: str) -> int:
    """Number of cells the generator tries to blank (``int(n^2 * f)``); the result may have fewer."""
    return int(grid_size * grid_size * BLANK_FRACTION[difficulty])


class Geometry:
    """Index tables of an ``n x n`` board: row, column and box of every cell, and peers."""

    def __init__(self, n: int) -> None:
        b = math.isqrt(n)
        if b * b != n or n < 1:
            raise ValueError(f"grid size must be a perfect square, got {n}")
        self.n = n
        self.box = b
        self.cells = n * n
        self.full = (1 << n) - 1
        self.row_of = [i // n for i in range(self.cells)]
        self.col_of = [i % n for i in range(self.cells)]
        self.box_of = [(i // n) // b * b + (i % n) // b for i in range(self.cells)]


@functools.cache
def geometry(n: int) -> Geometry:
    """Cached :class:`Geometry` for an ``n x n`` board."""
    return Geometry(n)


def _masks(grid: list[int], g: Geometry) -> tuple[list[int], list[int], list[int]] | None:
    """Used-digit bitmasks of every row, column and box; ``None`` if the givens already clash."""
    rows, cols, boxes = [0] * g.n, [0] * g.n, [0] * g.n
    for i, v in enumerate(grid):
        if v:
            bit = 1 << (v - 1)
            r, c, x = g.row_of[i], g.col_of[i], g.box_of[i]
            if (rows[r] | cols[c] | boxes[x]) & bit:
                return None
            rows[r] |= bit
            cols[c] |= bit
            boxes[x] |= bit
    return rows, cols, boxes


class SearchBudgetExceeded(RuntimeError):
    """Raised by :func:`count_solutions` when ``node_limit`` search nodes did not settle the count."""


def count_solutions(
    grid: list[int] | tuple[int, ...], n: int, limit: int = 2, node_limit: int | None = None
) -> int:
    """Number of completions of ``grid``, counting at most ``limit`` (so ``limit=2`` tells unique).

    Raises:
        SearchBudgetExceeded: more than ``node_limit`` search nodes were needed.
    """
    g = geometry(n)
    nodes = 0
    work = list(grid)
    masks = _masks(work, g)
    if masks is None:
        return 0
    rows, cols, boxes = masks
    empties = [i for i, v in enumerate(work) if v == 0]
    found = 0

    def search(k: int) -> None:
        nonlocal found, nodes
        nodes += 1
        if node_limit is not None and nodes > node_limit:
            raise SearchBudgetExceeded(f"no answer within {node_limit} search nodes")
        if k == len(empties):
            found += 1
            return
        # choose the empty cell with the fewest candidates (MRV), move it to position k
        best_j, best_mask, best_count = _most_constrained(empties, k, rows, cols, boxes, g)
        if best_count == 0:
            return
        empties[k], empties[best_j] = empties[best_j], empties[k]
        i = empties[k]
        r, c, x = g.row_of[i], g.col_of[i], g.box_of[i]
        m = best_mask
        while m and found < limit:
            bit = m & -m
            m ^= bit
            rows[r] |= bit
            cols[c] |= bit
            boxes[x] |= bit
            search(k + 1)
            rows[r] ^= bit
            cols[c] ^= bit
            boxes[x] ^= bit
        empties[k], empties[best_j] = empties[best_j], empties[k]

    search(0)
    return found


def _most_constrained(empties: list[int], k: int, rows: list[int], cols: list[int], boxes: list[int], g: Geometry) -> tuple[int, int, int]:
    """MRV: among ``empties[k:]``, the position, candidate bitmask and candidate count of the
    cell with the fewest legal digits (stops early at a cell with at most one)."""
    best_j, best_mask, best_count = k, 0, g.n + 1
    for j in range(k, len(empties)):
        i = empties[j]
        m = g.full & ~(rows[g.row_of[i]] | cols[g.col_of[i]] | boxes[g.box_of[i]])
        cnt = m.bit_count()
        if cnt < best_count:
            best_j, best_mask, best_count = j, m, cnt
            if cnt <= 1:
                break
    return best_j, best_mask, best_count


def solve(grid: list[int] | tuple[int, ...], n: int) -> tuple[int, ...] | None:
    """One completion of ``grid`` (the first in candidate order), or ``None`` if there is none."""
    solution = _fill(list(grid), n, rng=None)
    return tuple(solution) if solution is not None else None


def _fill(work: list[int], n: int, rng: random.Random | None) -> list[int] | None:
    """Complete ``work`` in place by MRV backtracking; candidates shuffled when ``rng`` is given."""
    g = geometry(n)
    masks = _masks(work, g)
    if masks is None:
        return None
    rows, cols, boxes = masks
    empties = [i for i, v in enumerate(work) if v == 0]

    def search(k: int) -> bool:
        if k == len(empties):
            return True
        best_j, best_mask, best_count = _most_constrained(empties, k, rows, cols, boxes, g)
        if best_count == 0:
            return False
        empties[k], empties[best_j] = empties[best_j], empties[k]
        i = empties[k]
        r, c, x = g.row_of[i], g.col_of[i], g.box_of[i]
        digits = [d for d in range(1, g.n + 1) if best_mask >> (d - 1) & 1]
        if rng is not None:
            rng.shuffle(digits)
        for d in digits:
            bit = 1 << (d - 1)
            rows[r] |= bit
            cols[c] |= bit
            boxes[x] |= bit
            work[i] = d
            if search(k + 1):
                return True
            rows[r] ^= bit
            cols[c] ^= bit
            boxes[x] ^= bit
            work[i] = 0
        empties[k], empties[best_j] = empties[best_j], empties[k]
        return False

    return work if search(0) else None


def random_full_grid(n: int, rng: random.Random) -> tuple[int, ...]:
    """A complete valid ``n x n`` grid drawn by randomised backtracking."""
    g = geometry(n)
    work = [0] * g.cells
    # Any filling of the top-left box extends to a full grid (relabel the digits of any
    # solution), so shuffle it in directly and let backtracking do the rest.
    digits = list(range(1, n + 1))
    rng.shuffle(digits)
    for k, d in enumerate(digits):
        work[(k // g.box) * n + k % g.box] = d
    result = _fill(work, n, rng)
    if result is None:  # pragma: no cover - a filled first box always extends
        raise RuntimeError("could not complete a sudoku grid")
    return tuple(result)


#: Search nodes one uniqueness probe may spend during generation. Beyond it the cell is kept
#: as a given (we only blank cells *proven* removable), which bounds 16x16 generation time.
GENERATION_NODE_LIMIT = 5_000


def is_unique_without(
    puzzle: list[int], n: int, cell: int, value: int, node_limit: int | None = GENERATION_NODE_LIMIT
) -> bool:
    """True if ``puzzle`` (with ``cell`` already blanked, solution value ``value``) stays unique.

    Assumes ``puzzle`` with ``cell = value`` has exactly one solution. Returns ``False`` when
    the proof would need more than ``node_limit`` search nodes.
    """
    g = geometry(n)
    r, c, x = g.row_of[cell], g.col_of[cell], g.box_of[cell]
    used = 0
    for i, v in enumerate(puzzle):
        if v and (g.row_of[i] == r or g.col_of[i] == c or g.box_of[i] == x):
            used |= 1 << (v - 1)
    for w in range(1, n + 1):
        if w == value or used >> (w - 1) & 1:
            continue
        puzzle[cell] = w
        try:
            other = count_solutions(puzzle, n, limit=1, node_limit=node_limit)
        except SearchBudgetExceeded:
            other = 1  # undecided: keep the cell, so uniqueness stays guaranteed
        finally:
            puzzle[cell] = 0
        if other:
            return False
    return True


class Puzzle(NamedTuple):
    """A generated (or loaded) puzzle and its solution, both flat tuples of ``n * n`` ints."""

    grid_size: int
    givens: tuple[int, ...]
    solution: tuple[int, ...]

    @property
    def blanks(self) -> int:
        """Number of empty cells."""
        return sum(1 for v in self.givens if v == 0)


@functools.lru_cache(maxsize=512)
def generate_puzzle(seed: int, grid_size: int = 9, difficulty: str = "easy") -> Puzzle:
    """The puzzle of ``seed``: a random full grid with up to :func:`target_blanks` cells blanked.

    Cells are visited in a random order and blanked while the solution stays unique, until the
    target is reached or every cell was tried. Pure function of its arguments (cached).
    """
    if difficulty not in BLANK_FRACTION:
        raise ValueError(f"difficulty must be one of {sorted(BLANK_FRACTION)}, got {difficulty!r}")
    rng = make_py_rng(seed, "sudoku", grid_size, difficulty)
    solution = random_full_grid(grid_size, rng)
    puzzle = list(solution)
    target = target_blanks(grid_size, difficulty)
    order = list(range(grid_size * grid_size))
    rng.shuffle(order)
    blanks = 0
    for cell in order:
        if blanks >= target:
            break
        value = puzzle[cell]
        puzzle[cell] = 0
        if is_unique_without(puzzle, grid_size, cell, value):
            blanks += 1
        else:
            puzzle[cell] = value
    return Puzzle(grid_size, tuple(puzzle), solution)


def is_complete_solution(grid: list[int] | tuple[int, ...], n: int) -> bool:
    """True if ``grid`` has no empty cell and no repeated digit in any row, column or box."""
    return all(grid) and _masks(list(grid), geometry(n)) is not None
