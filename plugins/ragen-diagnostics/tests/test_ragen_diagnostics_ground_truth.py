"""Ground-truth validation: the estimators recover analytic I(X;Z), H(Z|X) and retrieval accuracy.

Synthetic "policies" with no neural model: prompt x ∈ {0..N-1} (uniform), reasoning
z = (z_1..z_T) with tokens drawn i.i.d. from a categorical p(·|x) over a small vocabulary. An
oracle scorer returns the exact ``log p(z|x) = Σ_t log p(z_t|x)``, so the only error left is
sampling error, and every truth is computable by enumerating the V^T reasoning sequences:

* I(X;Z) = H(Z) − H(Z|X) with p(z) = (1/N) Σ_x p(z|x)  (the ``_seq`` estimates target these);
* per-token H(Z|X)/T (the unsuffixed ``conditional_entropy_est`` targets this);
* Bayes retrieval accuracy Σ_z max_x p(z|x) / N (argmax over columns = MAP under the uniform prior).

Tolerances are 5 standard errors of the sample mean, with the standard deviation computed
analytically for the conditional entropy and from the sample for MI (the marginal's variance
has no short closed form). With a fixed seed the test is deterministic; 5 SE also keeps it
valid for any other seed (two-sided normal tail ≈ 6e-7). Convergence is checked as the
standard error shrinking like 1/sqrt(R) and the error at the largest size being small.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest
from ragen_diagnostics.diagnostic import CollapseDiagnostic
from ragen_diagnostics.estimators import collapse_metrics

from ragen_core.rollout.types import Trajectory, Turn
from ragen_core.seeding import make_rng

PROMPT_BASE = 1000  # prompt x is encoded as the token sequence [7, 7, PROMPT_BASE + x]


class CategoricalPolicy:
    """p(z|x) = Π_t probs[x, z_t] over sequences of length T."""

    def __init__(self, probs: np.ndarray, length: int) -> None:
        self.probs = probs / probs.sum(axis=1, keepdims=True)
        self.n, self.v = self.probs.shape
        self.t = length

    def sample(self, x: int, rng: np.random.Generator) -> list[int]:
        return rng.choice(self.v, size=self.t, p=self.probs[x]).tolist()

    def logp(self, x: int, z: list[int]) -> float:
        with np.errstate(divide="ignore"):
            return float(np.sum(np.log(self.probs[x, z])))

    def truth(self) -> dict[str, float]:
        seqs = list(itertools.product(range(self.v), repeat=self.t))
        pzx = np.array([[np.prod(self.probs[x, list(z)]) for z in seqs] for x in range(self.n)])  # [N, S]
        pz = pzx.mean(axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            h_cond = -np.mean(np.sum(np.where(pzx > 0, pzx * np.log(pzx), 0.0), axis=1))
            h_z = -np.sum(np.where(pz > 0, pz * np.log(pz), 0.0))
            logp = np.where(pzx > 0, np.log(pzx), 0.0)
        var_matched = float(np.mean(np.sum(pzx * logp**2, axis=1)) - h_cond**2)
        return {
            "mi": float(h_z - h_cond),
            "h_cond": float(h_cond),
            "h_z": float(h_z),
            "h_cond_tok": float(h_cond / self.t),
            "sd_matched": math.sqrt(max(var_matched, 0.0)),
            "bayes_accuracy": float(np.sum(pzx.max(axis=0)) / self.n),
        }

    def oracle_scorer(self) -> Any:
        """A cross-scorer for the diagnostic: decodes x from the prompt ids, exact log-probs."""

        def score(prompts: list[list[int]], reasonings: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
            xs = [p[-1] - PROMPT_BASE for p in prompts]
            mat = np.array([[self.logp(x, z) for x in xs] for z in reasonings])
            return mat, np.array([len(z) for z in reasonings])

        return score


def _matrix(policy: CategoricalPolicy, per_prompt: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = make_rng("ground-truth", seed, per_prompt)
    zs, cols = [], []
    for x in range(policy.n):
        for _ in range(per_prompt):
            zs.append(policy.sample(x, rng))
            cols.append(x)
    mat = np.array([[policy.logp(x, z) for x in range(policy.n)] for z in zs])
    return mat, np.full(len(zs), policy.t), np.array(cols)


def grounded_policy() -> CategoricalPolicy:
    """Input-dependent: each prompt prefers its own tokens (moderate MI, moderate entropy)."""
    rng = make_rng("grounded-policy")
    logits = rng.normal(size=(4, 5)) * 1.5
    return CategoricalPolicy(np.exp(logits), length=3)


def templated_policy() -> CategoricalPolicy:
    """Input-agnostic with high entropy: p(z|x) = q(z) for every x (true MI = 0)."""
    q = np.array([0.3, 0.25, 0.2, 0.15, 0.1])
    return CategoricalPolicy(np.tile(q, (4, 1)), length=3)


@pytest.mark.parametrize("make_policy", [grounded_policy, templated_policy])
def test_estimates_converge_to_analytic_truth(make_policy: Any) -> None:
    policy = make_policy()
    truth = policy.truth()
    errors, ses = [], []
    for per_prompt in (50, 500, 5000):
        mat, lens, cols = _matrix(policy, per_prompt, seed=1)
        m = collapse_metrics(mat, lens, cols).metrics
        r = mat.shape[0]
        se_h = truth["sd_matched"] / math.sqrt(r)
        assert m["conditional_entropy_seq_est"] == pytest.approx(truth["h_cond"], abs=5 * se_h + 1e-12)
        assert m["conditional_entropy_est"] == pytest.approx(truth["h_cond_tok"], abs=5 * se_h / policy.t + 1e-12)
        matched = mat[np.arange(r), cols]
        marginal = np.log(np.mean(np.exp(mat), axis=1))
        se_mi = float(np.std(matched - marginal)) / math.sqrt(r)
        # The marginal estimate is exact given z (all N prompts are columns), so the only
        # error is sampling: within 5 SE, plus float rounding for the exact-zero case.
        assert m["mi_seq_estimate"] == pytest.approx(truth["mi"], abs=5 * se_mi + 1e-9)
        assert m["reasoning_entropy_seq_est"] == pytest.approx(truth["h_z"], abs=5 * (se_h + se_mi) + 1e-9)
        errors.append(abs(m["mi_seq_estimate"] - truth["mi"]))
        ses.append(se_h)
    assert ses[-1] < ses[0] / 9  # 100x the samples -> 10x smaller standard error
    assert errors[-1] < 0.02  # nats; 5 SE at R = 20000 is about 0.02 for the grounded policy


def test_grounded_policy_has_substantial_mi_and_bayes_retrieval() -> None:
    policy = grounded_policy()
    truth = policy.truth()
    assert 0.3 < truth["mi"] < math.log(4)  # a meaningful, non-saturated ground truth
    mat, lens, cols = _matrix(policy, 5000, seed=2)
    m = collapse_metrics(mat, lens, cols).metrics
    r = mat.shape[0]
    # accuracy is a mean of Bernoulli(p) indicators: SE = sqrt(p(1-p)/R)
    p = truth["bayes_accuracy"]
    assert m["retrieval_accuracy"] == pytest.approx(p, abs=5 * math.sqrt(p * (1 - p) / r))
    assert m["retrieval_chance_level"] == pytest.approx(0.25)
    assert m["retrieval_above_chance"] > 0.2
    assert m["mi_estimate"] > 0.05  # per-token MI is positive too


def test_templated_policy_looks_diverse_but_carries_no_information() -> None:
    policy = templated_policy()
    truth = policy.truth()
    assert truth["mi"] == pytest.approx(0.0, abs=1e-12)
    mat, lens, cols = _matrix(policy, 500, seed=3)
    m = collapse_metrics(mat, lens, cols).metrics
    assert m["mi_estimate"] == pytest.approx(0.0, abs=1e-9)
    assert m["mi_seq_estimate"] == pytest.approx(0.0, abs=1e-9)
    # high entropy: H(q) per token ≈ 1.54 nats, near the maximum log 5 ≈ 1.61
    assert m["conditional_entropy_est"] > 0.9 * math.log(5)
    assert m["retrieval_accuracy"] == pytest.approx(m["retrieval_chance_level"], abs=1e-9)
    assert m["retrieval_above_chance"] == pytest.approx(0.0, abs=1e-9)


def _batch(policy: CategoricalPolicy, group_size: int, turns: int, seed: int) -> list[Trajectory]:
    rng = make_rng("batch", seed)
    out = []
    for g in range(policy.n):
        for member in range(group_size):
            traj = Trajectory(env="synthetic", tag="Synthetic", group_id=g, member=member, seed=g, env_id=g * group_size + member)
            for t in range(turns):
                z = policy.sample(g, rng)
                # later turns: the prompt's last token still names the prompt class g
                prompt = [7, 7] + [50 + t] * t + [PROMPT_BASE + g]
                traj.turns.append(Turn(prompt_ids=prompt, response_ids=[1, 2], response_text="x", reasoning="r", reasoning_ids=z))
            out.append(traj)
    return out


def test_full_diagnostic_with_oracle_scorer_separates_the_two_regimes() -> None:
    results = {}
    for name, policy in (("grounded", grounded_policy()), ("templated", templated_policy())):
        diag = CollapseDiagnostic(scorer=policy.oracle_scorer(), num_samples="all")
        m = diag.ragen_on_rollout_end(_batch(policy, group_size=64, turns=2, seed=4), step=1, context=None)
        assert m is not None and m["collapse/error"] == 0.0
        results[name] = m
    g, t = results["grounded"], results["templated"]
    for fam in ("collapse_first_turn_sample", "collapse_trajectory_sample"):
        assert g[f"{fam}/mi_estimate"] > 0.1
        assert t[f"{fam}/mi_estimate"] == pytest.approx(0.0, abs=1e-9)
        assert t[f"{fam}/conditional_entropy_est"] > g[f"{fam}/conditional_entropy_est"] * 0.9
        assert t[f"{fam}/retrieval_above_chance"] == pytest.approx(0.0, abs=1e-9)
        assert g[f"{fam}/retrieval_above_chance"] > 0.2
    # first turn: 4 groups -> 4 columns; trajectory family: distinct (prompt, turn) contexts -> 8
    assert g["collapse_first_turn_sample/num_columns"] == 4.0
    assert g["collapse_trajectory_sample/num_columns"] == 8.0
    assert g["collapse_first_turn_sample/mi_seq_estimate"] == pytest.approx(grounded_policy().truth()["mi"], abs=0.1)


def test_mi_tracks_a_gradual_slide_into_template_collapse() -> None:
    """p_α(z|x) = (1-α)·q(z) + α·p(z|x): α = 1 is the grounded policy, α = 0 the template.
    The estimate must follow the analytic MI down as α shrinks, while H(Z|X) never drops below
    the grounded policy's (concavity of entropy, and H(q) exceeds the grounded mean entropy)."""
    grounded, template = grounded_policy(), templated_policy()
    truths, estimates, entropies = [], [], []
    for alpha in (1.0, 0.6, 0.3, 0.0):
        policy = CategoricalPolicy((1 - alpha) * template.probs + alpha * grounded.probs, length=3)
        mat, lens, cols = _matrix(policy, 2000, seed=5)
        m = collapse_metrics(mat, lens, cols).metrics
        truths.append(policy.truth()["mi"])
        estimates.append(m["mi_seq_estimate"])
        entropies.append(m["conditional_entropy_seq_est"])
        r = mat.shape[0]
        matched = mat[np.arange(r), cols]
        se = float(np.std(matched - np.log(np.mean(np.exp(mat), axis=1)))) / math.sqrt(r)
        assert m["mi_seq_estimate"] == pytest.approx(truths[-1], abs=5 * se + 1e-9)
    assert truths == sorted(truths, reverse=True) and estimates == sorted(estimates, reverse=True)
    # 2000 x 4 rows: the SE of the entropy estimate is ~0.015 nats; 0.08 is > 5 SE
    assert min(entropies[1:]) >= entropies[0] - 0.08
    assert entropies[-1] > entropies[0] + 0.5  # the template is clearly *more* diverse
