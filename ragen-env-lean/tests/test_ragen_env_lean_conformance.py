"""The lean env through the core conformance kit.

* Everywhere: the spec (light import in a fresh interpreter, JSON/pickle round trip), and every
  env check against the REPL stand-in (tests/lean_repl_double.py): the env is registered under
  its own name with the stand-in as its default ``repl_command``. This proves the env's contracts
  (determinism, garbage actions, pickling, the oracle through the text interface), not Lean.
* Where a real checker is configured (``RAGEN_LEAN_REPL`` or ``RAGEN_LEAN_SERVER``, see
  test_ragen_env_lean_real.py): every check against real Lean.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from ragen_env_lean.config import LeanConfig
from ragen_env_lean.plugin import SPEC
from ragen_env_lean.repl import close_shared

from ragen_core import registry
from ragen_core.specs import EnvSpec
from ragen_core.testing import ENV_CHECKS
from ragen_core.testing.env_checks import check_light_import, check_spec

DOUBLE = str(Path(__file__).with_name("lean_repl_double.py"))


class StandInConfig(LeanConfig):
    """Lean settings whose default checker is the REPL stand-in."""

    repl_command: list[str] | None = [sys.executable, DOUBLE]


class RealConfig(LeanConfig):
    """Lean settings whose default checker is the one named by the RAGEN_LEAN_* variables."""

    repl_command: list[str] | None = os.environ.get("RAGEN_LEAN_REPL") or None
    repl_cwd: str | None = os.environ.get("RAGEN_LEAN_PROJECT") or None
    server_url: str | None = os.environ.get("RAGEN_LEAN_SERVER") or None
    api_key: str | None = os.environ.get("RAGEN_LEAN_API_KEY") or None
    request_timeout: float = 120.0


HAS_REAL = bool(os.environ.get("RAGEN_LEAN_REPL") or os.environ.get("RAGEN_LEAN_SERVER"))
NO_REAL = ("needs a real Lean checker: set RAGEN_LEAN_REPL (and RAGEN_LEAN_PROJECT) or RAGEN_LEAN_SERVER; "
           "see ragen-env-lean/README.md")


def _register(name: str, config_model: type[LeanConfig]):
    spec = EnvSpec(name=name, summary=SPEC.summary, config_model=config_model, factory=SPEC.factory, availability=SPEC.availability)
    registry.register(spec)
    return spec


@pytest.fixture
def stand_in_env():
    _register("lean-stand-in", StandInConfig)
    yield "lean-stand-in"
    registry.unregister("env", "lean-stand-in")
    close_shared()


def test_lean_spec_is_light():
    check_light_import("lean")


def test_lean_spec_round_trips():
    check_spec("lean")


@pytest.mark.parametrize("check", [c for c in ENV_CHECKS if c != "light-import"])
def test_lean_conformance_with_the_stand_in(stand_in_env, check):
    ENV_CHECKS[check](stand_in_env)


@pytest.mark.skipif(not HAS_REAL, reason=NO_REAL)
@pytest.mark.parametrize("check", [c for c in ENV_CHECKS if c != "light-import"])
def test_lean_conformance_with_real_lean(check):
    _register("lean-real", RealConfig)
    try:
        ENV_CHECKS[check]("lean-real")
    finally:
        registry.unregister("env", "lean-real")
