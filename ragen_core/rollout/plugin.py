"""Entry-point targets of the built-in env pools (light: no env, no worker is started here)."""

from __future__ import annotations

from ragen_core.specs import PoolSpec

LOCAL_SPEC = PoolSpec(
    name="local",
    summary="Env instances in the trainer process (threads for server-backed envs, per-step timeout)",
    config_model="ragen_core.rollout.env_pool:LocalPoolConfig",  # type: ignore[arg-type]  # imported lazily by the field validator
    factory="ragen_core.rollout.env_pool:LocalEnvPool.from_config",
)

PROCESS_SPEC = PoolSpec(
    name="process",
    summary="Env instances in worker processes built from (name, config JSON); crashed or stuck workers are replaced",
    config_model="ragen_core.rollout.process_pool:ProcessPoolConfig",  # type: ignore[arg-type]  # imported lazily by the field validator
    factory="ragen_core.rollout.process_pool:ProcessEnvPool.from_config",
)
