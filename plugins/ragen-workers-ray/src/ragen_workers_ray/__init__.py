"""RAGEN env pool ``ray``: env instances in Ray actors (see :mod:`ragen_workers_ray.pool`).

Importing this package does not import Ray; the pool module does, when a run builds the pool.
"""

from ragen_workers_ray.config import RayPoolConfig

__all__ = ["RayPoolConfig"]
