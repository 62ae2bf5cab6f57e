"""Conformance kit: prove a plugin honours RAGEN's contracts in a few lines of test.

Plain functions made of small named checks (Gymnasium's ``check_env``, sklearn's
``check_estimator``), plus pytest parametrisation helpers that give every ``(plugin, check)``
pair its own test id, so ``pytest -k determinism`` works::

    from ragen_core.testing import parametrize_env_checks

    @parametrize_env_checks(["mygrid"])
    def test_mygrid_conformance(env_check):
        env_check()

Importing this module does not import torch or pytest; the estimator and algorithm checks import
torch when they run.
"""

from __future__ import annotations

from ragen_core.testing.env_checks import (
    ENV_CHECKS,
    GARBAGE_REPLIES,
    check_env,
    parametrize_env_checks,
)
from ragen_core.testing.fakes import ScriptedPolicy, fake_entry_points
from ragen_core.testing.plugin_checks import (
    check_algorithm,
    check_diagnostic,
    check_estimator,
    check_filter,
    check_spec_is_light,
    check_spec_roundtrip,
)

__all__ = [
    "ENV_CHECKS",
    "GARBAGE_REPLIES",
    "ScriptedPolicy",
    "check_algorithm",
    "check_diagnostic",
    "check_env",
    "check_estimator",
    "check_filter",
    "check_spec_is_light",
    "check_spec_roundtrip",
    "fake_entry_points",
    "parametrize_env_checks",
]
