"""Text and image renderings of a Sokoban state (spec 13.1 "Render formats").

All functions take the flat list of rendered cell codes (0 wall, 1 empty, 2 target, 3 box on
target, 4 box, 5 player, 6 player on target) plus the grid width.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

#: Coordinate categories in output order: (label, cell code). ``Walls`` only with include_walls.
_COORD_CATEGORIES: tuple[tuple[str, int], ...] = (
    ("Walls", 0),
    ("Targets", 2),
    ("Boxes", 4),
    ("Boxes on target", 3),
    ("Player", 5),
    ("Player on target", 6),
)


def render_grid(codes: Sequence[int], cols: int, lookup: Mapping[int, str]) -> str:
    """One line of symbols per row, rows joined by newlines."""
    symbols = [lookup[c] for c in codes]
    return "\n".join(
        "".join(symbols[i : i + cols]) for i in range(0, len(symbols), cols)
    )


def render_coord(
    codes: Sequence[int], cols: int, *, include_walls: bool = False
) -> str:
    """Board size line, then one ``Label: (r, c), ...`` line per non-empty category."""
    rows = len(codes) // cols
    lines = [f"Board size: {rows} rows x {cols} cols (zero-indexed)."]
    for label, code in _COORD_CATEGORIES:
        if code == 0 and not include_walls:
            continue
        cells = [f"({i // cols}, {i % cols})" for i, c in enumerate(codes) if c == code]
        if cells:
            lines.append(f"{label}: {', '.join(cells)}")
    return "\n".join(lines)


def render_text(
    codes: Sequence[int],
    cols: int,
    fmt: str,
    lookup: Mapping[int, str],
    *,
    include_walls: bool = False,
) -> str:
    """The observation text for ``fmt`` in ``grid``, ``coord`` or ``grid_coord``."""
    if fmt == "grid":
        return render_grid(codes, cols, lookup)
    coord = render_coord(codes, cols, include_walls=include_walls)
    if fmt == "coord":
        return coord
    return f"Coordinates: \n{coord}\nGrid Map: \n{render_grid(codes, cols, lookup)}"


def _tile_bank(size: int) -> np.ndarray:
    """Seven ``size x size`` RGB tiles, one per cell code, drawn with plain numpy."""
    bank = np.zeros((7, size, size, 3), dtype=np.uint8)
    yy, xx = np.mgrid[0:size, 0:size]
    centre = (size - 1) / 2
    ring = np.maximum(abs(yy - centre), abs(xx - centre))
    disc = (yy - centre) ** 2 + (xx - centre) ** 2 <= (size * 0.3) ** 2
    inner = ring <= size * 0.34
    edge = ring >= size / 2 - 1.5

    floor = np.array([222, 206, 170], np.uint8)
    bank[0] = (96, 64, 48)  # wall: brick brown with darker mortar edges
    bank[0][edge] = (60, 40, 30)
    bank[1:] = floor
    target_ring = (ring <= size * 0.3) & (ring >= size * 0.3 - 1.5)
    for code in (2, 6):
        bank[code][target_ring] = (200, 40, 40)
    bank[4][inner] = (170, 110, 40)  # box: orange-brown square
    bank[3][inner] = (60, 170, 70)  # box on target: green square
    bank[5][disc] = (40, 80, 200)  # player: blue disc
    bank[6][disc] = (40, 80, 200)
    return bank


_BANKS: dict[int, np.ndarray] = {}


def render_rgb(codes: Sequence[int], cols: int, tile: int = 16) -> np.ndarray:
    """``(rows * tile, cols * tile, 3)`` uint8 image of the state."""
    bank = _BANKS.get(tile)
    if bank is None:
        bank = _BANKS[tile] = _tile_bank(tile)
    grid = np.asarray(codes, dtype=np.intp).reshape(-1, cols)
    rows = grid.shape[0]
    return np.ascontiguousarray(
        bank[grid].transpose(0, 2, 1, 3, 4).reshape(rows * tile, cols * tile, 3)
    )
