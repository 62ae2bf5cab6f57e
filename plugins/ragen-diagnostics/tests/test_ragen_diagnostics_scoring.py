"""Cross-scoring on a tiny random Qwen2: shared-prefix equals naive equals a one-sequence reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import transformers
from ragen_diagnostics.diagnostic import CollapseDiagnostic
from ragen_diagnostics.scoring import (
    model_scorer,
    naive_cross_score,
    shared_prefix_cross_score,
)

from ragen_core.rollout.types import Trajectory, Turn
from ragen_core.seeding import make_rng
from ragen_core.trainer.context import TrainContext

VOCAB = 300


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread() -> Any:
    """Tiny models on shared, oversubscribed CI cores run far faster single-threaded (OpenMP
    spin-waits dominate small kernels); restored afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def model() -> Any:
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
    )
    return transformers.Qwen2ForCausalLM(cfg).eval()


def _data(seed: int) -> tuple[list[list[int]], list[list[int]]]:
    rng = make_rng("scoring", seed)
    prompts = [rng.integers(1, VOCAB, size=int(rng.integers(15, 40))).tolist() for _ in range(3)]
    reasonings = [rng.integers(1, VOCAB, size=int(rng.integers(1, 12))).tolist() for _ in range(7)]
    reasonings[4] = []  # an empty reasoning row scores 0 with length 0
    return prompts, reasonings


def _reference(model: Any, x: list[int], z: list[int]) -> float:
    ids = torch.tensor([x + z])
    with torch.no_grad():
        logp = model(ids).logits[0].float().log_softmax(-1)
    return float(sum(logp[len(x) - 1 + t, z[t]] for t in range(len(z))))


def test_shared_prefix_matches_naive_and_reference(model: Any) -> None:
    prompts, reasonings = _data(0)
    a, la = naive_cross_score(model, prompts, reasonings, micro_batch_size=3)
    b, lb = shared_prefix_cross_score(model, prompts, reasonings, micro_batch_size=4)
    assert a.shape == b.shape == (7, 3)
    assert la.tolist() == lb.tolist() == [len(z) for z in reasonings]
    assert np.max(np.abs(a - b)) < 1e-4
    assert a[4].tolist() == [0.0, 0.0, 0.0] and b[4].tolist() == [0.0, 0.0, 0.0]
    for r, j in [(0, 0), (2, 1), (6, 2)]:
        assert a[r, j] == pytest.approx(_reference(model, prompts[j], reasonings[r]), abs=1e-4)
    assert np.all(a[[0, 1, 2, 3, 5, 6]] < 0)  # log-probs of real tokens


def test_micro_batch_size_does_not_change_results(model: Any) -> None:
    prompts, reasonings = _data(1)
    ref, _ = shared_prefix_cross_score(model, prompts, reasonings, micro_batch_size=64)
    for mb in (1, 2, 5):
        got, _ = shared_prefix_cross_score(model, prompts, reasonings, micro_batch_size=mb)
        assert np.max(np.abs(got - ref)) < 1e-4


def test_training_mode_is_restored_and_no_grad_is_kept(model: Any) -> None:
    prompts, reasonings = _data(2)
    model.train()
    try:
        out, _ = model_scorer(model, method="shared-prefix")(prompts, reasonings)
        assert model.training
        assert isinstance(out, np.ndarray) and out.dtype == np.float64
        assert all(p.grad is None for p in model.parameters())
    finally:
        model.eval()


def test_empty_prompt_is_rejected(model: Any) -> None:
    with pytest.raises(ValueError):
        shared_prefix_cross_score(model, [[]], [[1, 2]])


def test_diagnostic_scores_with_the_context_model(model: Any) -> None:
    rng = make_rng("ctx")
    batch = []
    for g in range(3):
        prompt = rng.integers(1, VOCAB, size=20).tolist()
        for m in range(4):
            z = rng.integers(1, VOCAB, size=int(rng.integers(3, 8))).tolist()
            batch.append(Trajectory(env="e", tag="E", group_id=g, member=m, seed=g, env_id=g * 4 + m,
                                    turns=[Turn(prompt_ids=prompt, response_ids=[1], response_text="x", reasoning="t", reasoning_ids=z)]))
    ctx = TrainContext(config=None, run_dir=None, model=model)  # type: ignore[arg-type]
    results = {}
    for method in ("shared-prefix", "naive"):
        diag = CollapseDiagnostic(scoring=method, micro_batch_size=5)
        results[method] = diag.ragen_on_rollout_end(batch, 1, ctx)
    a, b = results["shared-prefix"], results["naive"]
    assert a is not None and b is not None and a["collapse/error"] == 0.0
    assert a["collapse_first_turn_sample/num_columns"] == 3.0
    for key in ("mi_estimate", "mi_seq_estimate", "conditional_entropy_est", "retrieval_accuracy"):
        assert a[f"collapse_first_turn_sample/{key}"] == pytest.approx(b[f"collapse_first_turn_sample/{key}"], abs=1e-4)
