"""Loader for the public Sudoku CSV layout (``quizzes,solutions``; 81 digits each, 0 = empty).

The file may begin with a UTF-8 byte-order mark (the widely shared "1 million Sudoku games"
files do), so it is read as ``utf-8-sig``. Every row is checked: 81 digits, a complete and
rule-abiding solution, and givens that agree with it. A bad row is an error naming its line;
silently skipping rows would change which puzzle a seed selects.
"""

from __future__ import annotations

import csv
import functools
import os

from ragen_env_sudoku.puzzle import Puzzle, is_complete_solution

_PUZZLE_COLUMNS = ("quizzes", "puzzle", "quiz")
_SOLUTION_COLUMNS = ("solutions", "solution")


def _column(header: list[str], names: tuple[str, ...], path: str) -> str:
    for name in names:
        if name in header:
            return name
    raise ValueError(f"{path}: no column named any of {names}; found {header}")


def _digits(text: str, where: str) -> tuple[int, ...]:
    text = text.strip().replace(".", "0")
    if len(text) != 81 or not text.isascii() or not text.isdigit():
        raise ValueError(f"{where}: expected 81 digits, got {text[:30]!r} ({len(text)} chars)")
    return tuple(int(ch) for ch in text)


@functools.lru_cache(maxsize=8)
def load_puzzles(path: str) -> tuple[Puzzle, ...]:
    """All puzzles of the CSV at ``path`` (cached per path).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: a missing column or an invalid row (the message names the line).
    """
    resolved = os.path.expanduser(path)
    with open(resolved, encoding="utf-8-sig", newline="") as handle:
        reader = csv.DictReader(handle)
        header = [h.strip().lower() for h in reader.fieldnames or []]
        reader.fieldnames = header
        quiz_col = _column(header, _PUZZLE_COLUMNS, path)
        sol_col = _column(header, _SOLUTION_COLUMNS, path)
        puzzles = []
        for line, row in enumerate(reader, start=2):
            where = f"{path} line {line}"
            givens = _digits(row.get(quiz_col) or "", where)
            solution = _digits(row.get(sol_col) or "", where)
            if not is_complete_solution(solution, 9):
                raise ValueError(f"{where}: the solution breaks a Sudoku rule")
            if any(g and g != s for g, s in zip(givens, solution)):
                raise ValueError(f"{where}: a given disagrees with the solution")
            puzzles.append(Puzzle(9, givens, solution))
    if not puzzles:
        raise ValueError(f"{path}: no puzzles")
    return tuple(puzzles)
