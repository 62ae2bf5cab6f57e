"""Entry point ``collapse`` (group ``ragen_core.diagnostics``): light spec, no torch import."""

from __future__ import annotations

from ragen_core.specs import DiagnosticSpec
from ragen_diagnostics.config import CollapseConfig

SPEC = DiagnosticSpec(
    name="collapse",
    summary="RAGEN-2 reasoning-collapse diagnostics: MI(X;Z), H(Z|X), retrieval accuracy",
    config_model=CollapseConfig,
    factory="ragen_diagnostics.diagnostic:CollapseDiagnostic",
    aliases=("collapse-detection",),
)
