"""Sokoban environment plugin for RAGEN (entry point ``sokoban`` in ``ragen_core.envs``).

Importing this package is light: the env class loads lazily on first attribute access.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from ragen_env_sokoban.config import SokobanConfig

try:
    __version__ = version("ragen-env-sokoban")
except PackageNotFoundError:  # source tree that was never installed
    __version__ = "0.0.0"

__all__ = ["SokobanConfig", "SokobanEnv", "generate_room", "solve"]


def __getattr__(name: str) -> Any:
    if name == "SokobanEnv":
        from ragen_env_sokoban.env import SokobanEnv

        return SokobanEnv
    if name == "generate_room":
        from ragen_env_sokoban.generator import generate_room

        return generate_room
    if name == "solve":
        from ragen_env_sokoban.solver import solve

        return solve
    raise AttributeError(name)
