"""RAGEN core: interfaces, plugin registry, rollout, StarPO trainer and CLI.

Importing this package is cheap: it imports pydantic and pluggy, never torch, transformers,
vllm or ray, and it discovers no plugins. The seams for envs and engines that live elsewhere are
:mod:`ragen_core.interfaces.env_pool` (re-exported here), :mod:`ragen_core.interfaces.engine` and
:mod:`ragen_core.services` (child processes and servers an env owns). Use :mod:`ragen_core.registry` (or the re-exports
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
    PluginError,
    PluginLoadError,
    PluginNotFoundError,
    RagenError,
    RegistryError,
    UsageError,
)
from ragen_core.hookspecs import hookimpl
from ragen_core.interfaces.advantage import AdvantageEstimator, AdvantageInputs, AdvantageOutputs
from ragen_core.interfaces.algorithm import Algorithm, AlgorithmConfig, PolicyLossInputs, PolicyLossOutputs
from ragen_core.interfaces.diagnostic import Diagnostic, DiagnosticConfig
from ragen_core.interfaces.env import Env, EnvConfig, StepResult
from ragen_core.interfaces.env_pool import (
    EnvFacts,
    EnvPool,
    EnvPoolConfig,
    EnvRef,
    EpisodeStart,
    ResetRequest,
    StepOutcome,
    StepRequest,
)
from ragen_core.interfaces.rollout_filter import FilterConfig, FilterResult, GroupedRollouts, RolloutFilter
from ragen_core.rollout.types import Trajectory, Turn
from ragen_core.specs import (
    AlgorithmSpec,
    DiagnosticSpec,
    EngineSpec,
    EnvResources,
    EnvSpec,
    EstimatorSpec,
    FilterSpec,
    PluginConfig,
    PluginSpec,
    PoolSpec,
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
    "AdvantageEstimator",
    "AdvantageInputs",
    "AdvantageOutputs",
    "Algorithm",
    "AlgorithmConfig",
    "AlgorithmSpec",
    "ConfigError",
    "Diagnostic",
    "DiagnosticConfig",
    "DiagnosticSpec",
    "DuplicatePluginError",
    "EngineSpec",
    "Env",
    "EnvConfig",
    "EnvError",
    "EnvFacts",
    "EnvPool",
    "EnvPoolConfig",
    "EnvRef",
    "EnvResources",
    "EnvSpec",
    "EpisodeStart",
    "EstimatorSpec",
    "FilterConfig",
    "FilterResult",
    "FilterSpec",
    "GroupedRollouts",
    "IncompatiblePluginError",
    "PluginConfig",
    "PluginConfigError",
    "PluginError",
    "PluginLoadError",
    "PluginNotFoundError",
    "PluginSpec",
    "PolicyLossInputs",
    "PolicyLossOutputs",
    "PoolSpec",
    "RagenError",
    "Recipe",
    "RegistryError",
    "ResetRequest",
    "RolloutFilter",
    "StepOutcome",
    "StepRequest",
    "StepResult",
    "Trajectory",
    "Turn",
    "UsageError",
    "__version__",
    "hookimpl",
]
