"""Pieces for end-to-end tests of ``ragen run`` that must reach an env's ``step`` on purpose.

The tiny model rarely writes a parseable action before training, so a test that needs an env's
``step`` to run (a hanging env, an env returning a bad reward) drives the rollout with canned
replies: :data:`SCRIPTED_ENGINE_SPEC` is the :class:`~ragen_core.engines.scripted.ScriptedEngine`
as an engine plugin (``engine=test-scripted engine_config.replies=[...]``); the model still loads
and trains on those replies. None of this is installed as an entry point: tests register it in
their own process with :func:`register_run_helpers`, and a test that needs a real ``ragen``
process runs :data:`CHILD_MAIN` with ``python -c``.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ragen_core.specs import EngineSpec, EnvSpec, PluginConfig
from ragen_core.testing.toy_env import SLOW_TOY_FACTORY, SlowCorridorConfig, register_toy_env

SCRIPTED_ENGINE_NAME = "test-scripted"
SLOW_TOY_ENV_NAME = "toy-slow-corridor"


class ScriptedEngineConfig(PluginConfig):
    replies: list[str] = Field(default_factory=lambda: ["<think>go</think><answer>Right</answer>"])
    """Replies used per generate call in order (the same one for every row), the last one repeating."""


def make_scripted_engine(config: ScriptedEngineConfig) -> Any:
    """Registry factory: a scripted engine whose tokenizer comes from ``attach``."""
    from ragen_core.engines.scripted import ScriptedEngine

    return ScriptedEngine(list(config.replies), None)


SCRIPTED_ENGINE_SPEC = EngineSpec(
    name=SCRIPTED_ENGINE_NAME,
    summary="Canned replies instead of sampling (tests)",
    config_model=ScriptedEngineConfig,
    factory="ragen_core.testing.run_helpers:make_scripted_engine",
)

SLOW_TOY_ENV_SPEC = EnvSpec(
    name=SLOW_TOY_ENV_NAME,
    summary="The corridor plus a 'Wait' action that blocks (tests of timeouts and the watchdog)",
    config_model=SlowCorridorConfig,
    factory=SLOW_TOY_FACTORY,
)


def register_run_helpers() -> None:
    """Register the toy corridor, the slow corridor and the scripted engine in this process (idempotent)."""
    from ragen_core import registry

    register_toy_env()
    registry.register(SLOW_TOY_ENV_SPEC)
    registry.register(SCRIPTED_ENGINE_SPEC)


#: ``python -c CHILD_MAIN run ...``: the ``ragen`` command with the helpers registered first.
CHILD_MAIN = ("import sys; from ragen_core.testing.run_helpers import register_run_helpers; register_run_helpers(); "
              "from ragen_core.cli.main import main; sys.exit(main(sys.argv[1:]))")
