"""The ``collapse`` diagnostic as a plugin: schedule, pure observer, keys, errors, collapse warnings."""

from __future__ import annotations

import copy
import warnings
from typing import Any

import numpy as np
import pytest
from ragen_diagnostics.config import CollapseConfig
from ragen_diagnostics.diagnostic import CollapseDiagnostic, CollapseWarning

from ragen_core import registry
from ragen_core.rollout.types import Trajectory, Turn
from ragen_core.seeding import make_rng
from ragen_core.testing import (
    check_diagnostic,
    check_spec_is_light,
    check_spec_roundtrip,
)

V = 6


def policy_scorer(probs: np.ndarray) -> Any:
    """Oracle: the prompt's last token names the class x; z tokens are i.i.d. from probs[x]."""

    def score(prompts: list[list[int]], reasonings: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        logp = np.log(probs)
        mat = np.array([[float(np.sum(logp[p[-1] % len(probs), z])) for p in prompts] for z in reasonings])
        return mat, np.array([len(z) for z in reasonings])

    return score


def batch_from(probs: np.ndarray, seed: int, groups: int = 4, size: int = 8, turns: int = 2) -> list[Trajectory]:
    rng = make_rng("diag-batch", seed)
    out = []
    for g in range(groups):
        for m in range(size):
            tr = Trajectory(env="e", tag="E", group_id=g, member=m, seed=g, env_id=g * size + m)
            for t in range(turns):
                z = rng.choice(V, size=4, p=probs[g]).tolist()
                prompt = [7] * (t + 1) + [g + groups * t]  # (t, g) -> distinct prompt; last token mod groups = g
                tr.turns.append(Turn(prompt_ids=prompt, response_ids=[1], response_text="x", reasoning="r", reasoning_ids=z))
            out.append(tr)
    return out


GROUNDED = np.full((4, V), 0.02) + np.eye(4, V) * 0.88
GROUNDED /= GROUNDED.sum(1, keepdims=True)
TEMPLATE = np.tile(np.full(V, 1 / V), (4, 1))  # high entropy, input-agnostic
LOW_ENTROPY = np.tile(np.array([0.995] + [0.001] * (V - 1)), (4, 1))  # one token, input-agnostic


def test_spec_is_registered_light_and_round_trips() -> None:
    assert "collapse" in registry.names("diagnostic")
    spec = registry.get_spec("diagnostic", "collapse")
    assert spec.config_model is CollapseConfig
    check_spec_roundtrip(spec)
    check_spec_is_light("diagnostic", "collapse")
    cfg = CollapseConfig()
    assert (cfg.compute_freq, cfg.num_samples, cfg.std_eps, cfg.ema_decay, cfg.scoring) == (5, 64, 1e-3, 0.9, "shared-prefix")


def test_registry_builds_the_diagnostic_and_conformance_holds() -> None:
    diag = registry.make("diagnostic", "collapse", {"num_samples": 16}, scorer=policy_scorer(GROUNDED))
    assert isinstance(diag, CollapseDiagnostic) and diag.config.num_samples == 16
    metrics = check_diagnostic(diag, batch_from(GROUNDED, 0), context=None, step=1)
    assert metrics["collapse_first_turn_sample/mi_defined"] == 1.0


def test_schedule_is_step_one_and_multiples_of_compute_freq() -> None:
    diag = CollapseDiagnostic(scorer=policy_scorer(GROUNDED), compute_freq=5)
    batch = batch_from(GROUNDED, 1)
    ran = [s for s in range(16) if diag.ragen_on_rollout_end(batch, s, None) is not None]
    assert ran == [1, 5, 10, 15]


def test_pure_observer_and_metric_keys() -> None:
    batch = batch_from(GROUNDED, 2)
    before = copy.deepcopy(batch)
    m = CollapseDiagnostic(scorer=policy_scorer(GROUNDED)).ragen_on_rollout_end(batch, 1, None)
    assert batch == before
    assert m is not None
    for fam in ("collapse_first_turn_sample", "collapse_trajectory_sample"):
        for key in ("mi_estimate", "mi_seq_estimate", "mi_upper_bound", "conditional_entropy_est", "reasoning_entropy_seq_est",
                    "retrieval_accuracy", "retrieval_chance_level@4", "marginal_std_ema_seq", "mi_zscore_ema"):
            assert f"{fam}/{key}" in m
    for key in ("collapse/valid_thinking_rate", "collapse/first_turn_valid_rate", "timing_s/collapse_first_turn_step",
                "timing_s/collapse_multi_turn_step", "collapse/error", "collapse/warning_template"):
        assert key in m
    assert m["collapse_first_turn_sample/num_columns"] == 4.0
    assert m["collapse_trajectory_sample/num_rows"] == 64.0  # capped at num_samples
    assert all(np.isfinite(v) for v in m.values())


def test_families_can_be_disabled() -> None:
    m = CollapseDiagnostic(scorer=policy_scorer(GROUNDED), multi_turn_enabled=False).ragen_on_rollout_end(batch_from(GROUNDED, 3), 1, None)
    assert m is not None
    assert any(k.startswith("collapse_first_turn_sample/") for k in m)
    assert not any(k.startswith("collapse_trajectory_sample/") for k in m)
    off = CollapseDiagnostic(first_turn_enabled=False, multi_turn_enabled=False)
    assert off.ragen_on_rollout_end(batch_from(GROUNDED, 3), 1, None) is None


def test_turns_without_reasoning_skip_the_families(capsys) -> None:
    batch = batch_from(GROUNDED, 4)
    for tr in batch:
        for t in tr.turns:
            t.reasoning, t.reasoning_ids = None, None
    diagnostic = CollapseDiagnostic(scorer=policy_scorer(GROUNDED))
    m = diagnostic.ragen_on_rollout_end(batch, 1, None)
    assert m is not None and m["collapse/skipped_no_reasoning"] == 1.0
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: collapse diagnostics, step 1:")]
    assert len(said) == 1 and said[0].endswith("diagnostics_config.collapse.z_source=response")
    diagnostic.ragen_on_rollout_end(batch, 2, None)
    assert "warning: collapse" not in capsys.readouterr().err  # said once a run
    assert m["collapse/valid_thinking_rate"] == 0.0
    assert not any(k.startswith("collapse_") and "/" in k and k.split("/")[0] != "collapse" for k in m)


def test_no_think_batches_can_use_the_reply_as_z() -> None:
    batch = batch_from(GROUNDED, 4)
    for tr in batch:
        for t in tr.turns:
            t.response_ids, t.reasoning, t.reasoning_ids = list(t.reasoning_ids or []), None, None
    m = CollapseDiagnostic(scorer=policy_scorer(GROUNDED), z_source="response").ragen_on_rollout_end(batch, 1, None)
    assert m is not None and m["collapse/valid_thinking_rate"] == 1.0
    assert m["collapse_first_turn_sample/mi_estimate"] > 0.1


def test_single_group_is_undefined_not_nan() -> None:
    diag = CollapseDiagnostic(scorer=policy_scorer(GROUNDED))
    m = diag.ragen_on_rollout_end(batch_from(GROUNDED, 5, groups=1, turns=1), 1, None)
    assert m is not None
    assert m["collapse_first_turn_sample/mi_defined"] == 0.0
    assert "collapse_first_turn_sample/mi_estimate" not in m
    assert "at least 2" in diag.last_reasons["collapse_first_turn_sample"]
    assert all(np.isfinite(v) for v in m.values())


def test_mismatched_group_prompts_surface_as_error_metric() -> None:
    batch = batch_from(GROUNDED, 6)
    batch[1].turns[0].prompt_ids = [9, 9, 0]  # member 1 of group 0 saw a different first prompt
    diag = CollapseDiagnostic(scorer=policy_scorer(GROUNDED))
    m = diag.ragen_on_rollout_end(batch, 1, None)
    assert m is not None
    assert m["collapse/error"] == 1.0
    assert m["collapse_first_turn_sample/error"] == 1.0
    assert "collapse_trajectory_sample/mi_estimate" in m  # the other family still runs
    assert len(diag.errors) == 1 and "group 0" in diag.errors[0]


def test_missing_model_is_an_error_metric_not_a_crash() -> None:
    m = CollapseDiagnostic().ragen_on_rollout_end(batch_from(GROUNDED, 7), 1, None)
    assert m is not None and m["collapse/error"] == 2.0


@pytest.mark.parametrize(("later", "flag"), [(TEMPLATE, "collapse/warning_template"), (LOW_ENTROPY, "collapse/warning_low_entropy")])
def test_collapse_warnings_relative_to_first_measurement(later: np.ndarray, flag: str) -> None:
    diag = CollapseDiagnostic(num_samples="all", multi_turn_enabled=False)
    diag.scorer = policy_scorer(GROUNDED)
    first = diag.ragen_on_rollout_end(batch_from(GROUNDED, 8), 1, None)
    assert first is not None and first["collapse/warning_template"] == first["collapse/warning_low_entropy"] == 0.0
    diag.scorer = policy_scorer(later)
    with pytest.warns(CollapseWarning):
        m = diag.ragen_on_rollout_end(batch_from(later, 9), 5, None)
    assert m is not None and m[flag] == 1.0
    other = {"collapse/warning_template", "collapse/warning_low_entropy"} - {flag}
    assert m[other.pop()] == 0.0


def test_no_warning_while_healthy() -> None:
    diag = CollapseDiagnostic(scorer=policy_scorer(GROUNDED))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CollapseWarning)
        for step, seed in ((1, 10), (5, 11), (10, 12)):
            m = diag.ragen_on_rollout_end(batch_from(GROUNDED, seed), step, None)
            assert m is not None and m["collapse/warning_template"] == 0.0


def test_state_dict_round_trip_continues_ema_and_baseline() -> None:
    import json

    a = CollapseDiagnostic(scorer=policy_scorer(GROUNDED))
    a.ragen_on_rollout_end(batch_from(GROUNDED, 20), 1, None)
    state = json.loads(json.dumps(a.state_dict()))  # the trainer may store it anywhere
    b = CollapseDiagnostic(scorer=policy_scorer(GROUNDED))
    b.load_state_dict(state)
    assert b.baseline == a.baseline and b.ema["collapse_trajectory_sample"].values == a.ema["collapse_trajectory_sample"].values
    ma = a.ragen_on_rollout_end(batch_from(GROUNDED, 21), 5, None)
    mb = b.ragen_on_rollout_end(batch_from(GROUNDED, 21), 5, None)
    assert ma is not None and mb is not None
    assert mb["collapse_trajectory_sample/marginal_std_ema"] == ma["collapse_trajectory_sample/marginal_std_ema"]
    assert mb["collapse_trajectory_sample/marginal_std_ema"] != mb["collapse_trajectory_sample/marginal_std"]
