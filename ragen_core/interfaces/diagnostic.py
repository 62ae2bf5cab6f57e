"""Diagnostic interface: observers that compute metrics from rollouts without changing them.

Diagnostics receive lifecycle events through pluggy hooks (:mod:`ragen_core.hookspecs`). A
diagnostic plugin object implements any of the ``ragen_on_*`` hooks with ``@hookimpl``; the
dict it returns from ``ragen_on_rollout_end`` is merged into the step's metrics with its keys as
they are, so name them ``family/metric`` with a family of the diagnostic's own (``collapse/mi``,
``replylen/mean``); a key in another form, or one the run logs itself (``actor/entropy``), is
said once and not logged.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ragen_core.specs import PluginConfig, with_overrides


class DiagnosticConfig(PluginConfig):
    compute_freq: int = Field(default=5, ge=1)
    """Run at step 1 and whenever ``step % compute_freq == 0``."""


class Diagnostic:
    """Base class; subclasses add ``@hookimpl`` methods."""

    config_class: type[DiagnosticConfig] = DiagnosticConfig

    def __init__(self, config: DiagnosticConfig | None = None, **overrides: Any) -> None:
        if not (isinstance(self.config_class, type) and issubclass(self.config_class, DiagnosticConfig)):
            from ragen_core.errors import PluginConfigError

            raise PluginConfigError(f"{type(self).__name__}.config_class is {getattr(self.config_class, '__name__', self.config_class)}, "
                                    "not a subclass of DiagnosticConfig (Diagnostic.scheduled reads its compute_freq)",
                                    ["derive the config from ragen_core.interfaces.diagnostic.DiagnosticConfig"])
        self.config = with_overrides(self.config_class, config, overrides)

    def scheduled(self, step: int) -> bool:
        return step == 1 or (step > 0 and step % self.config.compute_freq == 0)
