"""WebShop through the core conformance kit (the oracle check plays seeded goals to a purchase)."""

from __future__ import annotations

from ragen_core.testing import parametrize_env_checks


@parametrize_env_checks(["webshop"], presets=[None, "WebShop"])
def test_webshop_conformance(env_check):
    env_check()
