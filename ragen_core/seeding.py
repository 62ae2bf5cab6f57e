"""Deterministic, process-independent random generators.

The reference seeds Python's global ``random`` and NumPy's global RNG, and falls back to
``hash(str(seed))`` (randomised per process) when a generation fails (spec 17 L27). Here every
consumer derives its own generator from integers via NumPy's ``SeedSequence``, which is stable
across processes, platforms and Python versions.
"""

from __future__ import annotations

import hashlib
import numbers
import random

import numpy as np

#: Integer keys must fit 64 bits unsigned: each becomes two 32-bit words, and a larger one would
#: wrap silently (2**64 gave seed 0's task in every env), a negative one too (-1 played 2**64 - 1's).
_KEY_MIN, _KEY_MAX = 0, 2**64 - 1


def check_key(value: int, what: str = "seed") -> int:
    """``value``, when it is ``0`` to ``2**64 - 1``, the 64 bits an integer key becomes (``ResetRequest``
    checks its seed here; a run's base seeds stop at ``2**63 - 1``, leaving room to count up).

    Raises:
        UsageError: naming ``what`` (a ValueError).
    """
    if not _KEY_MIN <= value <= _KEY_MAX:
        from ragen_core.errors import UsageError

        raise UsageError(f"{what} {value} is not an unsigned 64-bit int (use 0 to 2**64 - 1)")
    return value


def is_int(value: object) -> bool:
    """An integer of any kind, not a bool: what a seed, a member or a key may be.

    Python's ints, numpy's integer scalars (``np.int64(3)``) and 0-d numpy integer arrays
    (``np.array(3)``, what ``np.asarray`` and reductions over arrays give) all count; a bool,
    ``np.bool_`` and a float (``3.0``) do not.
    """
    if isinstance(value, np.ndarray):
        return value.shape == () and value.dtype.kind in "iu"
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _words(*keys: int | str) -> list[int]:
    """Two 32-bit words per integer key, one per string (its SHA-256 prefix).

    Raises:
        UsageError: An integer key outside ``[0, 2**64 - 1]`` (a ValueError).
    """
    out: list[int] = []
    for key in keys:
        if not (isinstance(key, str) or is_int(key)):  # 1.7 was read as 1, True as 1
            from ragen_core.errors import UsageError

            raise UsageError(f"a random-generator key must be an int or a str, not {type(key).__name__} {key!r}")
        if isinstance(key, str):
            out.append(int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "little"))
        else:
            value = check_key(int(key))
            out.append(value & 0xFFFFFFFF)
            out.append((value >> 32) & 0xFFFFFFFF)
    return out


def make_rng(*keys: int | str) -> np.random.Generator:
    """A NumPy generator determined only by ``keys`` (ints or strings; anything else is refused).

    Keys that differ only by trailing zeros give the same stream: ``make_rng(5)`` is
    ``make_rng(5, 0)`` (NumPy's ``SeedSequence`` pads its entropy words with zeros). Give each
    stream its own string label, ``make_rng(seed, "map")`` and ``make_rng(seed, member, "slip")``,
    as the shipped envs do.
    """
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(_words(*keys))))


def make_py_rng(*keys: int | str) -> random.Random:
    """A ``random.Random`` determined only by ``keys``."""
    return random.Random(int(np.random.SeedSequence(_words(*keys)).generate_state(2, np.uint64)[0]))


def derive_seed(*keys: int | str) -> int:
    """A 31-bit integer seed determined only by ``keys`` (for retries, sub-generators)."""
    return int(np.random.SeedSequence(_words(*keys)).generate_state(1, np.uint32)[0]) & 0x7FFFFFFF
