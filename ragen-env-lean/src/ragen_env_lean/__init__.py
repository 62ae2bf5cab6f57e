"""Lean theorem proving for RAGEN: tactic-by-tactic proofs checked by a real Lean 4.

Statements and theorem sets: :mod:`ragen_env_lean.statements`, :mod:`ragen_env_lean.theorems`,
:mod:`ragen_env_lean.builtin`. Checkers behind one interface (:mod:`ragen_env_lean.checker`): a
local REPL process (:mod:`ragen_env_lean.repl`) or a Kimina server (:mod:`ragen_env_lean.server`).
The observation text is built in :mod:`ragen_env_lean.render`. The env class is imported only
when built.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from ragen_env_lean.config import LeanConfig

try:
    __version__ = version("ragen-env-lean")
except PackageNotFoundError:  # source tree that was never installed
    __version__ = "0.0.0"

__all__ = ["LeanConfig", "__version__"]
