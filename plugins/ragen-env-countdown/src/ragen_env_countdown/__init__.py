"""Countdown for RAGEN: build an arithmetic expression from given numbers that hits a target.

The safe evaluator and solver live in :mod:`ragen_env_countdown.arith`, instance generation and
data loading in :mod:`ragen_env_countdown.problems`; the env class is imported only when built.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from ragen_env_countdown.config import CountdownConfig

try:
    __version__ = version("ragen-env-countdown")
except PackageNotFoundError:  # source tree that was never installed
    __version__ = "0.0.0"

__all__ = ["CountdownConfig", "__version__"]
