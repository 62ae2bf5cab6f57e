"""MetaMathQA for RAGEN: math word problems whose final answer is checked by value.

The checker lives in :mod:`ragen_env_metamathqa.checker`, the built-in problems in
:mod:`ragen_env_metamathqa.builtin`, data loading and splits in
:mod:`ragen_env_metamathqa.problems`; the env class is imported only when built.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from ragen_env_metamathqa.config import MetaMathQAConfig

try:
    __version__ = version("ragen-env-metamathqa")
except PackageNotFoundError:  # source tree that was never installed
    __version__ = "0.0.0"

__all__ = ["MetaMathQAConfig", "__version__"]
