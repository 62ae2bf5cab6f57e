"""RAGEN core: interfaces, plugin registry, rollout, StarPO trainer and CLI.

Importing this package is cheap: it imports pydantic and pluggy, never torch, transformers,
vllm or ray, and it discovers no plugins. Use :mod:`ragen_core.registry` (or the re-exports
below) to list and build plugins.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from ragen_core.errors import (
    ConfigError,
    DuplicatePluginError,
    EnvError,
    IncompatiblePluginError,
    PluginConfigError,
    PluginLoadError,
    PluginNotFoundError,
    RagenError,
    RegistryError,
)
from ragen_core.hookspecs import hookimpl
from ragen_core.interfaces.env import Env, EnvConfig, StepResult
from ragen_core.specs import (
    AlgorithmSpec,
    DiagnosticSpec,
    EngineSpec,
    EnvSpec,
    EstimatorSpec,
    FilterSpec,
    PluginConfig,
    PluginSpec,
    Recipe,
)

#: Bumped only when an interface changes incompatibly. Plugins declare the value they were
#: written against in their spec; the registry refuses a mismatch.
API_VERSION = 1

try:
    __version__ = version("ragen-core")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"

__all__ = [
    "API_VERSION",
    "AlgorithmSpec",
    "ConfigError",
    "DiagnosticSpec",
    "DuplicatePluginError",
    "EngineSpec",
    "Env",
    "EnvConfig",
    "EnvError",
    "EnvSpec",
    "EstimatorSpec",
    "FilterSpec",
    "IncompatiblePluginError",
    "PluginConfig",
    "PluginConfigError",
    "PluginLoadError",
    "PluginNotFoundError",
    "PluginSpec",
    "RagenError",
    "Recipe",
    "RegistryError",
    "StepResult",
    "__version__",
    "hookimpl",
]
