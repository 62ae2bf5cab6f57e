"""Seeded Sokoban room generator (topology walk, placement, reverse play, perturbation).

Same recipe as the reference (spec 13.1), re-engineered for speed and determinism:

* Rooms live on a flat grid (cell ``i = row * cols + col``) and every cell set (floor, boxes,
  reachable player cells) is a Python ``int`` bitboard. Moving a whole set of player cells one
  step is a single shift, so the search handles *all* player positions of one box layout at once.
* Reverse play is a breadth-first search by level over compact states (player cell, box
  layout) instead of the reference's recursive DFS memoised on full grids. States at depth
  ``k <= search_depth - 2`` moves are explored (the reference's TTL bound), capped at 300,000
  states. A state is scored ``box_swaps * sum(Manhattan(box, its target))`` where ``box_swaps``
  counts how often the pulled box changed along the path that first reached the state; states
  with any box still on a target score 0. The first state reaching the best score wins.
* Every random draw comes from :func:`ragen_core.seeding.make_py_rng`; retries after a failed
  generation use :func:`ragen_core.seeding.derive_seed` (never ``hash()``, never global RNGs),
  so a seed gives the same room in every process.

Because BFS reaches every state within the depth bound (the memoised DFS can miss states it
first met deep in a branch), rooms are drawn from the same family but are not bit-identical to
the reference's for a given seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from random import Random

from ragen_core.seeding import derive_seed, make_py_rng

#: Cell codes of the fixed structure and of rendered states (spec 13.1).
WALL, FLOOR, TARGET, BOX_ON_TARGET, BOX, PLAYER, PLAYER_ON_TARGET = range(7)

#: (d_row, d_col) of the four moves, in action order Up, Down, Left, Right.
DIRECTIONS: tuple[tuple[int, int], ...] = ((-1, 0), (1, 0), (0, -1), (0, 1))

#: The five 3x3 floor stamps of the topology walk, as (row, col) offsets from the top-left
#: corner: horizontal bar, vertical bar, two corner shapes and a 2x2 block.
_MASKS: tuple[tuple[tuple[int, int], ...], ...] = (
    ((1, 0), (1, 1), (1, 2)),
    ((0, 1), (1, 1), (2, 1)),
    ((1, 0), (1, 1), (2, 1)),
    ((1, 1), (1, 2), (2, 1)),
    ((1, 0), (1, 1), (2, 0), (2, 1)),
)

_MAX_ATTEMPTS = 4
_MAX_RESEEDS = 1000
_MAX_STATES = 300_000


class GenerationError(RuntimeError):
    """No room could be generated for these settings (after every retry seed)."""


@dataclass(frozen=True)
class Room:
    """One generated (or hand-loaded) level.

    Attributes:
        rows: Grid height.
        cols: Grid width.
        structure: Flat tuple of fixed cell codes (``WALL``, ``FLOOR`` or ``TARGET``).
        boxes: Flat cells of the boxes at the start.
        player: Flat cell of the player at the start.
        score: Reverse-play score of the chosen start (0 for hand-loaded rooms).
    """

    rows: int
    cols: int
    structure: tuple[int, ...]
    boxes: tuple[int, ...]
    player: int
    score: int = 0

    @property
    def targets(self) -> tuple[int, ...]:
        """Flat cells of the targets, in row-major order."""
        return tuple(i for i, code in enumerate(self.structure) if code == TARGET)


def bits(mask: int) -> list[int]:
    """Indices of the set bits of ``mask``, lowest first."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def _shift(mask: int, delta: int) -> int:
    return mask << delta if delta > 0 else mask >> -delta


def _topology(rows: int, cols: int, rng: Random) -> int:
    """Floor bitboard carved by a random walk that stamps 3x3 masks (border stays wall)."""
    rand = rng.random
    num_steps = int(1.7 * (rows + cols))
    stamps = [sum(1 << (dr * cols + dc) for dr, dc in mask) for mask in _MASKS]
    r = 1 + int(rand() * (rows - 2))
    c = 1 + int(rand() * (cols - 2))
    dr, dc = DIRECTIONS[int(rand() * 4)]
    floor = 0
    for _ in range(num_steps):
        if rand() < 0.35:
            dr, dc = DIRECTIONS[int(rand() * 4)]
        r = min(max(r + dr, 1), rows - 2)
        c = min(max(c + dc, 1), cols - 2)
        floor |= stamps[int(rand() * 5)] << ((r - 1) * cols + (c - 1))
    interior = 0
    row_bits = ((1 << (cols - 2)) - 1) << 1
    for row in range(1, rows - 1):
        interior |= row_bits << (row * cols)
    return floor & interior


def reverse_search(
    free: int, cols: int, player: int, targets: tuple[int, ...], search_depth: int
) -> tuple[int, tuple[int, ...], int]:
    """Pull boxes away from their targets; return ``(score, boxes, player)`` of the best state.

    Args:
        free: Bitboard of non-wall cells.
        cols: Grid width (row stride of the bitboard).
        player: Start cell of the player.
        targets: Target cells; box ``i`` starts on ``targets[i]``.
        search_depth: The reference TTL; states up to ``search_depth - 2`` moves deep are scored.

    Returns:
        The best score (0 when no state moved every box off its target), the box cells
        (``boxes[i]`` belongs to ``targets[i]``) and the player cell of that state.
    """
    deltas = (-cols, cols, -1, 1)
    target_mask = sum(1 << t for t in targets)
    target_rc = [divmod(t, cols) for t in targets]
    start_bm = target_mask
    seen: dict[int, int] = {start_bm: 1 << player}
    # frontier entries: (boxes tuple, box bitboard, swaps, last pulled box index, player set)
    frontier: list[tuple[tuple[int, ...], int, int, int, int]] = [
        (tuple(targets), start_bm, 0, -1, 1 << player)
    ]
    best: tuple[int, tuple[int, ...], int] = (0, tuple(targets), player)
    states = 1
    for _level in range(max(search_depth - 2, 0)):
        nxt: dict[tuple[tuple[int, ...], int, int], list[int]] = {}
        for boxes, bm, swaps, last, players in frontier:
            open_cells = free & ~bm
            for delta in deltas:
                box_behind = _shift(bm, delta)  # cells p whose p - delta holds a box
                moved = _shift(players & ~box_behind, delta) & open_cells
                if moved:
                    key = (boxes, swaps, last)
                    entry = nxt.get(key)
                    if entry is None:
                        nxt[key] = [bm, moved]
                    else:
                        entry[1] |= moved
                pullers = players & box_behind & _shift(open_cells, -delta)
                while pullers:
                    low = pullers & -pullers
                    pullers ^= low
                    p = low.bit_length() - 1
                    i = boxes.index(p - delta)
                    new_boxes = boxes[:i] + (p,) + boxes[i + 1 :]
                    new_bm = bm ^ (1 << (p - delta)) ^ low
                    key = (new_boxes, swaps + (i != last), i)
                    entry = nxt.get(key)
                    if entry is None:
                        nxt[key] = [new_bm, 1 << (p + delta)]
                    else:
                        entry[1] |= 1 << (p + delta)
        frontier = []
        for (boxes, swaps, last), (bm, cand) in nxt.items():
            known = seen.get(bm, 0)
            new = cand & ~known
            if not new:
                continue
            seen[bm] = known | new
            frontier.append((boxes, bm, swaps, last, new))
            states += new.bit_count()
            if swaps and not bm & target_mask:
                dist = 0
                for b, (tr, tc) in zip(boxes, target_rc):
                    br, bc = divmod(b, cols)
                    dist += abs(br - tr) + abs(bc - tc)
                score = swaps * dist
                if score > best[0]:
                    best = (score, boxes, ((new & -new).bit_length() - 1))
        if not frontier or states >= _MAX_STATES:
            break
    return best


def _perturb(player: int, open_cells: int, cols: int, score: int, rng: Random) -> int:
    """Walk the player 1-3 steps over free cells without revisiting (spec 13.1 step 5)."""
    if rng.random() >= (0.8 if score == 1 else 0.5):
        return player
    visited = 1 << player
    for step in range(3):
        if step and rng.random() >= 0.5:
            break
        options = [
            player + d
            for d in (-cols, cols, -1, 1)
            if (open_cells & ~visited) >> (player + d) & 1
        ]
        if not options:
            break
        player = options[int(rng.random() * len(options))]
        visited |= 1 << player
    return player


def _attempt(
    rows: int, cols: int, num_boxes: int, search_depth: int, rng: Random
) -> Room | None:
    floor = _topology(rows, cols, rng)
    cells = bits(floor)
    if len(cells) <= num_boxes + 1:
        return None
    player = cells.pop(int(rng.random() * len(cells)))
    targets = tuple(cells.pop(int(rng.random() * len(cells))) for _ in range(num_boxes))
    score, boxes, player = reverse_search(floor, cols, player, targets, search_depth)
    if score <= 0:
        return None
    box_mask = sum(1 << b for b in boxes)
    player = _perturb(player, floor & ~box_mask, cols, score, rng)
    target_set = set(targets)
    structure = tuple(
        (TARGET if i in target_set else FLOOR) if floor >> i & 1 else WALL
        for i in range(rows * cols)
    )
    return Room(rows, cols, structure, tuple(sorted(boxes)), player, score)


def generate_room(
    seed: int,
    dim_room: tuple[int, int] = (6, 6),
    num_boxes: int = 1,
    search_depth: int = 300,
) -> Room:
    """Generate the room of ``seed``: same arguments, same room, in any process.

    Up to 4 attempts (topology, placement, reverse play) share one generator seeded from
    ``seed``; if all fail, generation restarts from ``derive_seed(seed, "sokoban-retry", k)``.

    Raises:
        GenerationError: When no room was found after 1000 retry seeds (e.g. too many boxes
            for the grid).
    """
    rows, cols = dim_room
    current = int(seed)
    for k in range(_MAX_RESEEDS):
        rng = make_py_rng(current, "sokoban-room")
        for _ in range(_MAX_ATTEMPTS):
            room = _attempt(rows, cols, num_boxes, search_depth, rng)
            if room is not None:
                return room
        current = derive_seed(seed, "sokoban-retry", k + 1)
    raise GenerationError(
        f"no Sokoban room with {num_boxes} boxes in a {rows}x{cols} grid after {_MAX_RESEEDS} seeds"
    )
