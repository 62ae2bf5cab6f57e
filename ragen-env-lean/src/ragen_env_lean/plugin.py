"""Entry-point target: the light spec of the ``lean`` env (imports only core and config)."""

from __future__ import annotations

from ragen_core.specs import EnvResources, EnvSpec
from ragen_env_lean.config import LeanConfig

SPEC = EnvSpec(
    name="lean",
    summary="Prove a Lean 4 theorem tactic by tactic; every verdict comes from a real Lean checker (REPL or Kimina server).",
    config_model=LeanConfig,
    factory="ragen_env_lean.env:LeanEnv",
    # Refuse before any work when neither a REPL command nor a server URL is configured, or nothing answers at the URL.
    availability="ragen_env_lean.availability:check_available",
    # step() waits on the Lean process or the server: the local pool steps episodes in threads.
    async_step=True,
    resources=EnvResources(cpus=1.0, memory_gb=8.0),
    presets={"Lean": {"max_actions_per_episode": 30, "max_tokens": 512}},
)
