"""Settings of the ``ray`` env pool (``rollout.pool_config`` when ``rollout.pool: ray``)."""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, Field, model_validator

from ragen_core.interfaces.env_pool import EnvPoolConfig


class RayPoolConfig(EnvPoolConfig):
    """Where the Ray actors run, how many there are, and how long the pool waits for them.

    What one actor reserves on the cluster comes from the env's spec (``EnvSpec.resources``):
    ``cpus`` and ``gpus`` of one instance (an actor steps one env at a time; the default spec
    reserves one CPU and no GPU), and ``memory_gb`` times ``envs_per_actor`` when the spec sets it.
    """

    address: str | None = None
    """Ray cluster to join: ``"host:port"`` of its head (``ray start --head`` prints it),
    ``"ray://host:10001"`` for Ray Client, or ``"auto"``. None: ``RAY_ADDRESS`` if set, else a
    Ray already started in this process, else a new local Ray on this machine."""
    connect_timeout_s: float = Field(default=10.0, gt=0)
    """How long a ``host:port`` address may take to accept a connection before the run stops
    with a one-line error (checked before Ray is asked, which would otherwise wait minutes)."""
    local_cpus: int | None = Field(default=None, ge=1)
    """CPUs a Ray started by this pool gets (None: every core of this machine)."""
    workers: int = Field(default=0, ge=0, validation_alias=AliasChoices("workers", "num_workers"))
    """Most actors the pool runs; 0 = as many as the cluster's CPUs hold (its CPUs divided by the
    env's ``resources.cpus``) when the pool connects. Named as the ``process`` pool's ``workers``;
    the older name ``num_workers`` is still read."""
    envs_per_actor: int = Field(default=1, ge=1)
    """Episodes an actor takes before the pool uses another one: a reset of n episodes uses
    ``min(workers, ceil(n / envs_per_actor))`` actors, episode ``i`` in actor ``i % count``
    (so an actor holds more than this when every actor is in use)."""
    start_timeout_s: float = Field(default=120.0, gt=0)
    """How long new actors may take to start (a cluster without the resources they ask for
    never starts them); past it the reset fails with a one-line error."""
    runtime_env: dict[str, Any] | None = None
    """Ray ``runtime_env`` of every actor (e.g. ``{"env_vars": {...}}``), also given to ``ray.init``
    when the pool starts or joins Ray; the env's packages must already be installed where the
    actors run."""

    @model_validator(mode="before")
    @classmethod
    def _one_name_for_workers(cls, data: Any) -> Any:
        if isinstance(data, dict) and "workers" in data and "num_workers" in data:
            raise ValueError("workers and num_workers are one setting (num_workers is its older name): give workers only")
        return data
