"""RAGEN-2 reasoning-collapse diagnostics.

Measures whether an agent's reasoning Z still depends on its input X: a cross-scoring matrix of
reasoning samples under every sampled prompt gives estimates of I(X;Z), H(Z|X) and H(Z), and a
retrieval test (can the prompt be recovered from its reasoning?). Template collapse (high
entropy, MI near zero) is invisible to entropy alone.

Modules: :mod:`.estimators` (pure numpy metrics), :mod:`.sampling` (pair selection),
:mod:`.scoring` (HF model cross-scoring, torch imported lazily), :mod:`.diagnostic` (the hook
implementation), :mod:`.report` and :mod:`.offline` (plots, HTML, recomputation from a checkpoint).
"""

from __future__ import annotations

from ragen_diagnostics.config import CollapseConfig

__all__ = ["CollapseConfig"]
