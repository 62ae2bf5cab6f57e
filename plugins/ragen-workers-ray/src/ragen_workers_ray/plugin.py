"""Entry-point target: the light spec of the ``ray`` env pool (imports the config only, not Ray)."""

from __future__ import annotations

from ragen_core.specs import PoolSpec
from ragen_workers_ray.config import RayPoolConfig

SPEC = PoolSpec(
    name="ray",
    summary="Env instances in Ray actors (local Ray or a cluster by address); crashed or stuck actors are replaced",
    config_model=RayPoolConfig,
    factory="ragen_workers_ray.pool:RayEnvPool.from_config",
    availability="ragen_workers_ray.address:check_available",
)
