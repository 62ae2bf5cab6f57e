"""The system prompt states the per-episode action cap once, whichever env writes the instruction."""

from __future__ import annotations

import re

import pytest

from ragen_core import registry
from ragen_core.errors import RagenError
from ragen_core.rollout.prompts import system_prompt


@pytest.mark.parametrize("name", registry.names("env"))
def test_the_action_cap_appears_once_in_every_installed_envs_system_prompt(name):
    try:
        registry.get_spec("env", name).check_available(registry.make_config("env", name))
    except RagenError as exc:  # e.g. lean without a Lean checker: it cannot be built on this machine
        pytest.skip(f"env {name!r} is not available here: {str(exc).splitlines()[0][:120]}")
    env = registry.make_env(name)
    try:
        env.reset(7)
        cap = env.config.max_actions_per_episode
        text = system_prompt(env.instruction(), action_names=env.action_names, max_actions_per_episode=cap, action_sep=env.action_sep)
    finally:
        env.close()
    assert len(re.findall(rf"\bup to {cap} actions\b", text)) == (1 if env.action_names else 0), text
