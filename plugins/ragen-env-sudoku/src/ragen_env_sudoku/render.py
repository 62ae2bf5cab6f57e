"""Text rendering of a Sudoku board in the three formats of spec 13.10.

``simple``: the grid as digits and dots. ``detailed``: a banner, the grid with givens as
``[N]``, placed numbers as `` N ``, conflicting numbers as ``*N*`` and empty cells as `` . ``
(``|`` between boxes, dashed lines between box rows, optional row/column numbers), a legend and
the last feedback. ``with_feedback``: additionally the list of conflicts, the allowed numbers of
every empty cell once at most 10 remain, progress and the step count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ragen_env_sudoku.puzzle import geometry

BANNER = "=" * 50
HINT_THRESHOLD = 10


@dataclass(frozen=True)
class BoardView:
    """Everything a renderer needs; built by the env for each render call."""

    n: int
    givens: Sequence[int]
    grid: Sequence[int]
    feedback: str = ""
    steps: int = 0
    max_steps: int = 0
    show_coordinates: bool = True
    show_conflicts: bool = True
    show_valid_numbers: bool = True


def conflict_cells(grid: Sequence[int], n: int) -> set[int]:
    """Indices of filled cells whose value repeats in their row, column or box."""
    g = geometry(n)
    bad: set[int] = set()
    for unit_of in (g.row_of, g.col_of, g.box_of):
        seen: dict[tuple[int, int], list[int]] = {}
        for i, v in enumerate(grid):
            if v:
                seen.setdefault((unit_of[i], v), []).append(i)
        for cells in seen.values():
            if len(cells) > 1:
                bad.update(cells)
    return bad


def allowed_numbers(grid: Sequence[int], n: int, cell: int) -> list[int]:
    """Numbers that would break no rule in ``cell`` (its own current value ignored)."""
    g = geometry(n)
    r, c, x = g.row_of[cell], g.col_of[cell], g.box_of[cell]
    used = {
        v
        for i, v in enumerate(grid)
        if v and i != cell and (g.row_of[i] == r or g.col_of[i] == c or g.box_of[i] == x)
    }
    return [d for d in range(1, n + 1) if d not in used]


def render_simple(view: BoardView) -> str:
    """Digits and dots, one line per row."""
    width = len(str(view.n))
    n = view.n
    return "\n".join(
        " ".join((str(v) if v else ".").rjust(width) for v in view.grid[r * n : (r + 1) * n])
        for r in range(n)
    )


def _grid_lines(view: BoardView, conflicts: set[int]) -> list[str]:
    n = view.n
    b = geometry(n).box
    d = len(str(n))
    lines: list[str] = []

    def token(i: int) -> str:
        v = view.grid[i]
        if view.givens[i]:
            return f"[{v:>{d}}]"
        if not v:
            return f" {'.':>{d}} "
        if i in conflicts:
            return f"*{v:>{d}}*"
        return f" {v:>{d}} "

    label_width = len(str(n)) + 1 if view.show_coordinates else 0
    if view.show_coordinates:
        head = "|".join(
            "".join(f" {c + 1:>{d}} " for c in range(s * b, (s + 1) * b)) for s in range(b)
        )
        lines.append((" " * label_width + head.replace("|", " ")).rstrip())
    for r in range(n):
        if r and r % b == 0:
            lines.append(" " * label_width + "+".join("-" * (b * (d + 2)) for _ in range(b)))
        cells = "|".join(
            "".join(token(r * n + c) for c in range(s * b, (s + 1) * b)) for s in range(b)
        )
        prefix = f"{r + 1:>{label_width - 1}} " if view.show_coordinates else ""
        lines.append((prefix + cells).rstrip())
    return lines


def _legend() -> str:
    return "Legend: [N] given (fixed), N your number, *N* conflicting number, . empty cell"


def render_detailed(view: BoardView, *, extended: bool = False) -> str:
    """The ``detailed`` format, or ``with_feedback`` when ``extended`` is true."""
    conflicts = conflict_cells(view.grid, view.n) if view.show_conflicts else set()
    parts = [BANNER, "SUDOKU PUZZLE", BANNER, *_grid_lines(view, conflicts), "", _legend()]
    if view.feedback:
        parts.append(f"Feedback: {view.feedback}")
    if not extended:
        return "\n".join(parts)

    n = view.n
    if conflicts:
        listed = ", ".join(f"({i // n + 1},{i % n + 1})" for i in sorted(conflicts))
        parts.append(f"Conflicts at (row,col): {listed}")
    empties = [i for i, v in enumerate(view.grid) if not v]
    if view.show_valid_numbers and 0 < len(empties) <= HINT_THRESHOLD:
        hints = "; ".join(
            f"({i // n + 1},{i % n + 1}): {','.join(map(str, allowed_numbers(view.grid, n, i))) or 'none'}"
            for i in empties
        )
        parts.append(f"Allowed numbers per empty cell: {hints}")
    given = sum(1 for v in view.givens if v)
    filled = sum(1 for v in view.grid if v)
    parts.append(
        f"Progress: {filled}/{n * n} cells filled (given {given}, placed {filled - given})"
    )
    parts.append(f"Steps: {view.steps}/{view.max_steps}")
    return "\n".join(parts)


def render(view: BoardView, render_format: str) -> str:
    """Render ``view`` in ``render_format`` (``simple``, ``detailed`` or ``with_feedback``)."""
    if render_format == "simple":
        return render_simple(view)
    return render_detailed(view, extended=render_format == "with_feedback")
