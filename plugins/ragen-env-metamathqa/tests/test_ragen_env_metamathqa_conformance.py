"""MetaMathQA through the core conformance kit (built-in problems, both checkers)."""

from __future__ import annotations

from ragen_core.testing import parametrize_env_checks


@parametrize_env_checks(["metamathqa"], presets=[None, "MetamathQA", "ExactMatch"])
def test_metamathqa_conformance(env_check):
    env_check()
