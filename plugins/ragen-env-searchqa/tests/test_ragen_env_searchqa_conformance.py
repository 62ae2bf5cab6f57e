"""SearchQA through the core conformance kit (the oracle searches, then finishes with the gold answer)."""

from __future__ import annotations

import pytest
from ragen_env_searchqa.config import SearchQAConfig
from ragen_env_searchqa.env import server_spec

from ragen_core.services import acquire
from ragen_core.testing import parametrize_env_checks


@pytest.fixture(scope="module", autouse=True)
def warm_server():
    """Hold one share of the default server so the checks reuse one child instead of starting one each."""
    config = SearchQAConfig()
    with acquire(server_spec(config), config.server) as handle:
        yield handle


@parametrize_env_checks(["searchqa"], presets=[None, "SearchQAMock"])
def test_searchqa_conformance(env_check):
    env_check()
