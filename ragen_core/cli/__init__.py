"""The ``ragen`` command line. Thin: parses arguments and calls the public API."""

from __future__ import annotations

from pathlib import Path


def probe_folder(folder: Path, name: str = "ragen") -> None:
    """Create and remove a throwaway file ``.NAME.*.probe`` in ``folder``, so that a command
    refuses an unwritable one before its work, not after it.

    Raises:
        OSError: ``folder`` cannot take a new file (read-only, no permission, not a folder).
    """
    import tempfile

    with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{name}.", suffix=".probe"):
        pass


def positive_int(text: str) -> int:
    """argparse type: an int >= 1 (``--episodes -1`` is refused with exit 2 instead of doing nothing)."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value
