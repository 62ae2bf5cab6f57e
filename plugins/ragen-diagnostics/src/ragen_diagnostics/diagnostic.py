"""The ``collapse`` diagnostic: a pure observer on ``ragen_on_rollout_end`` (spec 10).

On scheduled steps (step 1 and multiples of ``compute_freq``) it samples (X, Z) pairs from the
unfiltered batch, cross-scores them with the current policy and logs

* ``collapse_first_turn_sample/<metric>`` and ``collapse_trajectory_sample/<metric>`` (10.6);
* ``collapse/valid_thinking_rate`` and the first-turn coverage counts (10.3);
* ``timing_s/collapse_first_turn_step`` and ``timing_s/collapse_multi_turn_step``;
* ``collapse/error`` (number of families that failed this step; the message goes to the log and
  :attr:`CollapseDiagnostic.errors`, spec 17 L23) and ``<family>/error`` = 1.0 for the failing one;
* ``collapse/warning_template`` and ``collapse/warning_low_entropy`` (1.0 when a family's MI fell
  below ``warn_mi_ratio`` of its first measurement while H(Z|X) held / fell too; also raised as a
  :class:`CollapseWarning`).

The trajectories are never modified. The model is put in eval mode for scoring and restored.
"""

from __future__ import annotations

import logging
import sys
import time
import warnings
from collections.abc import Sequence
from typing import Any

from ragen_core import hookimpl
from ragen_core.interfaces.diagnostic import Diagnostic
from ragen_core.seeding import make_rng
from ragen_diagnostics.config import CollapseConfig
from ragen_diagnostics.estimators import (
    CollapseEstimate,
    EmaTracker,
    collapse_metrics,
    undefined,
)
from ragen_diagnostics.sampling import (
    PairSample,
    Tokenize,
    ZOf,
    coverage_metrics,
    first_turn_sample,
    make_z_of,
    trajectory_sample,
)
from ragen_diagnostics.scoring import CrossScorer, model_scorer

logger = logging.getLogger(__name__)

FIRST_TURN = "collapse_first_turn_sample"
TRAJECTORY = "collapse_trajectory_sample"
_TIMING = {FIRST_TURN: "timing_s/collapse_first_turn_step", TRAJECTORY: "timing_s/collapse_multi_turn_step"}


class CollapseWarning(UserWarning):
    """Reasoning looks collapsed relative to the first measurement of the run."""


class CollapseDiagnostic(Diagnostic):
    """Mutual-information / retrieval diagnostic of reasoning collapse.

    Args:
        config: Settings; defaults to :class:`CollapseConfig` with ``overrides``.
        scorer: Optional cross-scorer ``(prompts, reasonings) -> (L_sum, lengths)``. When None,
            the context's ``model`` is used with the configured scoring method. Tests and
            offline analyses inject an exact (oracle) scorer here.
        **overrides: Config fields, when ``config`` is None.
    """

    config_class = CollapseConfig
    config: CollapseConfig

    def __init__(self, config: CollapseConfig | None = None, *, scorer: CrossScorer | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self.scorer = scorer
        self.ema: dict[str, EmaTracker] = {}
        self.baseline: dict[str, tuple[float, float]] = {}
        """Per family: (MI, H(Z|X)) of the first defined measurement."""
        self.errors: list[str] = []
        """Messages of every family failure so far (also logged)."""
        self.last_reasons: dict[str, str] = {}
        """Per family: why the last estimate was undefined (absent when it was defined)."""
        self._said_no_reasoning = False
        self.progress: Any = None
        """Optional ``callable(str)`` told when each family starts (``ragen diagnose`` prints it)."""

    # -- resume ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Moving averages and first measurements, so a resumed run continues them (JSON-able)."""
        return {
            "ema": {fam: dict(tracker.values) for fam, tracker in self.ema.items()},
            "baseline": {fam: list(pair) for fam, pair in self.baseline.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.ema = {fam: EmaTracker(decay=self.config.ema_decay, values={k: float(v) for k, v in vals.items()})
                    for fam, vals in state.get("ema", {}).items()}
        self.baseline = {fam: (float(p[0]), float(p[1])) for fam, p in state.get("baseline", {}).items()}

    # -- hook -----------------------------------------------------------------------------
    @hookimpl
    def ragen_on_rollout_end(self, trajectories: Any, step: int, context: Any = None) -> dict[str, float] | None:
        """Compute the collapse metrics on scheduled steps; None otherwise."""
        cfg = self.config
        if not self.scheduled(step) or not (cfg.first_turn_enabled or cfg.multi_turn_enabled):
            return None
        z_of = make_z_of(cfg.z_source, _tokenizer_fn(getattr(context, "tokenizer", None)))
        metrics: dict[str, float] = coverage_metrics(trajectories, z_of)
        metrics["collapse/error"] = 0.0
        metrics["collapse/warning_template"] = 0.0
        metrics["collapse/warning_low_entropy"] = 0.0
        if metrics["collapse/valid_thinking_rate"] == 0.0:
            metrics["collapse/skipped_no_reasoning"] = 1.0
            if not self._said_no_reasoning:  # once a run: the metric alone went unseen until 'ragen diagnose'
                self._said_no_reasoning = True
                print(f"warning: collapse diagnostics, step {step}: no reply has reasoning inside <think> "
                      f"(z_source={cfg.z_source!r}), so nothing is computed; to measure on the whole reply: "
                      "diagnostics_config.collapse.z_source=response", file=sys.stderr, flush=True)
            return metrics
        families = [(FIRST_TURN, cfg.first_turn_enabled), (TRAJECTORY, cfg.multi_turn_enabled)]
        for family, enabled in families:
            if not enabled:
                continue
            if self.progress is not None:
                self.progress(f"scoring {family}")
            start = time.perf_counter()
            try:
                estimate = self._run_family(family, trajectories, step, context, z_of)
            except Exception as exc:  # noqa: BLE001 - spec 10.1: a failing family must not stop the other or training
                message = f"{family} at step {step}: {type(exc).__name__}: {exc}"
                self.errors.append(message)
                logger.warning("collapse diagnostic failed: %s", message)
                metrics["collapse/error"] += 1.0
                metrics[f"{family}/error"] = 1.0
                continue
            metrics[_TIMING[family]] = time.perf_counter() - start
            metrics.update({f"{family}/{k}": v for k, v in estimate.metrics.items()})
            if estimate.defined:
                self.last_reasons.pop(family, None)
                self._check_collapse(family, estimate, step, metrics)
            else:
                self.last_reasons[family] = estimate.reason or "undefined"
        return metrics

    # -- internals ------------------------------------------------------------------------
    def _sample(self, family: str, trajectories: Sequence[Any], step: int, z_of: ZOf) -> PairSample:
        cfg = self.config
        rng = make_rng(cfg.seed, "collapse", family, step)
        if family == FIRST_TURN:
            return first_turn_sample(trajectories, cfg.num_samples, rng, z_of)
        return trajectory_sample(trajectories, cfg.num_samples, rng, z_of, without_replacement=cfg.trajectory_without_replacement)

    def _scorer(self, context: Any) -> CrossScorer:
        if self.scorer is not None:
            return self.scorer
        model = getattr(context, "model", None)
        if model is None:
            raise RuntimeError("no scorer given and the trainer context has no model")
        tokenizer = getattr(context, "tokenizer", None)
        pad = getattr(tokenizer, "pad_token_id", None)
        return model_scorer(model, method=self.config.scoring, micro_batch_size=self.config.micro_batch_size, pad_id=pad)

    def _run_family(self, family: str, trajectories: Sequence[Any], step: int, context: Any, z_of: ZOf) -> CollapseEstimate:
        sample = self._sample(family, trajectories, step, z_of)
        if sample.num_columns < 2:
            return undefined(f"{sample.num_columns} prompt column(s): MI needs at least 2",
                             num_columns=sample.num_columns, num_rows=sample.num_rows)
        l_sum, lengths = self._scorer(context)(sample.prompts, sample.reasonings)
        ema = self.ema.setdefault(family, EmaTracker(decay=self.config.ema_decay))
        return collapse_metrics(l_sum, lengths, sample.true_cols, sample.signatures, std_eps=self.config.std_eps, ema=ema)

    def _check_collapse(self, family: str, estimate: CollapseEstimate, step: int, metrics: dict[str, float]) -> None:
        cfg = self.config
        mi = estimate.metrics["mi_estimate"]
        h = estimate.metrics["conditional_entropy_est"]
        if family not in self.baseline:
            self.baseline[family] = (mi, h)
            return
        mi0, h0 = self.baseline[family]
        if mi0 <= cfg.warn_min_baseline_mi or mi >= cfg.warn_mi_ratio * mi0:
            return
        holds = h >= cfg.warn_entropy_ratio * h0
        key = "collapse/warning_template" if holds else "collapse/warning_low_entropy"
        metrics[key] = 1.0
        kind = "template collapse (MI fell while H(Z|X) holds)" if holds else "low-entropy collapse (MI and H(Z|X) both fell)"
        warnings.warn(
            f"step {step} {family}: possible {kind}: MI {mi:.4f} vs first {mi0:.4f}, H(Z|X) {h:.4f} vs first {h0:.4f}",
            CollapseWarning,
            stacklevel=2,
        )


def _tokenizer_fn(tokenizer: Any) -> Tokenize | None:
    """Tokenise reasoning text without special tokens (fallback when ``reasoning_ids`` is None)."""
    if tokenizer is None:
        return None

    def tokenize(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    return tokenize
