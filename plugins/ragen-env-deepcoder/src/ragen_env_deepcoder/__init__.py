"""DeepCoder for RAGEN: Python programs graded by unit tests in a sandbox.

The sandbox lives in :mod:`ragen_env_deepcoder.sandbox` (host side) and
:mod:`ragen_env_deepcoder._harness` (inside it); answer extraction in
:mod:`ragen_env_deepcoder.answer`, grading in :mod:`ragen_env_deepcoder.grading`, data in
:mod:`ragen_env_deepcoder.problems` and :mod:`ragen_env_deepcoder.builtin`. The env class is
imported only when built.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from ragen_env_deepcoder.config import DeepCoderConfig, SandboxConfig

try:
    __version__ = version("ragen-env-deepcoder")
except PackageNotFoundError:  # source tree that was never installed
    __version__ = "0.0.0"

__all__ = ["DeepCoderConfig", "SandboxConfig", "__version__"]
