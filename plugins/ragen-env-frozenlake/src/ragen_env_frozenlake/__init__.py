"""FrozenLake for RAGEN: walk a random ice map to the goal without falling into a hole.

The implementation (``ragen_env_frozenlake.env``) builds on Gymnasium's ``FrozenLakeEnv`` and is
imported only when the env is built; importing this package stays light.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from ragen_env_frozenlake.config import FrozenLakeConfig

try:
    __version__ = version("ragen-env-frozenlake")
except PackageNotFoundError:  # source tree that was never installed
    __version__ = "0.0.0"

__all__ = ["FrozenLakeConfig", "__version__"]
