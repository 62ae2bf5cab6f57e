"""Sudoku environment for RAGEN: unique-solution puzzles, strict parsing, reachable budgets.

Light package root: importing it pulls in the pydantic config only. The environment, the
generator and the parser are imported on first attribute access.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from ragen_env_sudoku.config import SudokuConfig

try:
    __version__ = version("ragen-env-sudoku")
except PackageNotFoundError:  # source tree that was never installed
    __version__ = "0.0.0"

__all__ = ["SudokuConfig", "SudokuEnv", "__version__", "generate_puzzle", "parse_placement"]

_LAZY = {
    "SudokuEnv": "ragen_env_sudoku.env",
    "generate_puzzle": "ragen_env_sudoku.puzzle",
    "parse_placement": "ragen_env_sudoku.parsing",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(name)
