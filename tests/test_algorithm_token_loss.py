"""An algorithm plugin brings its own per-token policy loss (``Algorithm.token_loss``): before, an
algorithm was a set of config values, so a REINFORCE plugin still trained the clipped surrogate
(helper-75's walk). The trainer aggregates the plugin's loss like its own and refuses a malformed
one in one line naming the plugin."""

from __future__ import annotations

import copy
import dataclasses
import math
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from ragen_core import registry
from ragen_core.cli.main import main
from ragen_core.config import load_config
from ragen_core.errors import PluginError
from ragen_core.interfaces.algorithm import Algorithm, AlgorithmConfig, PolicyLossInputs, PolicyLossOutputs, check_metric_names
from ragen_core.masked import masked_mean
from ragen_core.rollout.types import Trajectory, Turn
from ragen_core.specs import AlgorithmSpec
from ragen_core.testing import check_algorithm
from ragen_core.testing.run_helpers import TOY_RUN, one_line_error, toy_run_config
from ragen_core.trainer.batch import build_batch
from ragen_core.trainer.config import RunConfig
from ragen_core.trainer.distributed import ONE, World
from ragen_core.trainer.loggers import read_metrics
from ragen_core.trainer.losses import agg_loss, policy_loss
from ragen_core.trainer.trainer import Trainer
from ragen_core.trainer.update import algorithm_policy_loss, prepare, update_actor

CALLS: list[str] = []
"""The function that asked for each token loss (through algorithm_policy_loss)."""
SEEN: list[PolicyLossInputs] = []
"""What each call of Reinforce.token_loss got."""


class Reinforce(Algorithm):
    """``-A * log π`` per token; every trained token flagged as clipped, so the flags reach the metrics."""

    def token_loss(self, inputs):
        CALLS.append(sys._getframe(2).f_code.co_name)
        SEEN.append(inputs)
        return PolicyLossOutputs(loss=-inputs.advantages * inputs.log_probs, flags={"pg_clipfrac": inputs.response_mask > 0})


class Answers(Algorithm):
    """A token loss that answers ``ANSWER`` (set by the test)."""

    answer = "ok"

    def token_loss(self, inputs):
        loss, mask = -inputs.advantages * inputs.log_probs, inputs.response_mask
        return {
            "a-tuple": (loss, {}),
            "short": PolicyLossOutputs(loss[:, :-1]),
            "detached": PolicyLossOutputs(loss.detach()),
            "unknown-flag": PolicyLossOutputs(loss, {"clip_ratio": mask > 0}),
            "flag-shape": PolicyLossOutputs(loss, {"pg_clipfrac": mask[0] > 0}),
            "float-flag": PolicyLossOutputs(loss, {"pg_clipfrac": mask.float()}),
            "raises": None,
        }[self.answer] if self.answer != "raises" else 1 / 0


class OwnMetric(Algorithm):
    """The clipped surrogate plus a metric of its own: the share of trained tokens less likely than
    the micro-batch's mean, also returned as the ``pg_clipfrac`` flag, so the run logs the same
    quantity both ways."""

    metric_names = ("unlikely",)

    def token_loss(self, inputs):
        log_probs, m = inputs.log_probs.detach(), inputs.response_mask.to(inputs.log_probs.dtype)
        unlikely = log_probs < masked_mean(log_probs, m)
        share = masked_mean(unlikely.to(m.dtype), m)
        return PolicyLossOutputs(super().token_loss(inputs).loss, {"pg_clipfrac": unlikely}, {"unlikely": share})


SPECS = [AlgorithmSpec(name="test-reinforce", factory=f"{__name__}:Reinforce"),
         AlgorithmSpec(name="test-own-metric", factory=f"{__name__}:OwnMetric")]


@pytest.fixture(autouse=True)
def plugins():
    CALLS.clear()
    SEEN.clear()
    for spec in SPECS:
        registry.register(spec)
    yield
    for spec in SPECS:
        registry.unregister(spec.kind, spec.name)


def _tensors(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(3, 6)
    mask[0, 1:4], mask[1, 2:6], mask[2, 0:2] = 1.0, 1.0, 1.0
    old = -torch.rand(3, 6, generator=g) * 2
    log_probs = (old + 0.4 * torch.randn(3, 6, generator=g)).requires_grad_(True)
    return log_probs, old, torch.randn(3, 6, generator=g) * mask, mask


def _inputs(log_probs, old, adv, mask) -> PolicyLossInputs:
    rows = len(mask)
    return PolicyLossInputs(log_probs=log_probs, old_log_probs=old, advantages=adv, response_mask=mask,
                            group_ids=torch.zeros(rows, dtype=torch.long), episode_ids=torch.arange(rows), turn_ends=[[5]] * rows)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_the_default_token_loss_is_the_clipped_surrogate_bit_for_bit(mode):
    """The shared clipped surrogate moved behind the hook: the same operations, so the same floats."""
    log_probs, old, adv, mask = _tensors()
    cfg = AlgorithmConfig(clip_ratio_low=0.1, clip_ratio_high=0.15, loss_agg_mode=mode)
    got, got_metrics = algorithm_policy_loss(Algorithm(cfg), _inputs(log_probs, old, adv, mask), mode)
    want, want_metrics = policy_loss(log_probs, old, adv, mask, clip_low=0.1, clip_high=0.15, agg_mode=mode)
    assert torch.equal(got, want) and got_metrics == want_metrics
    assert 0 < want_metrics["pg_clipfrac"] < 1  # the ratios reach both clip bounds: the flags are not trivially 0


def test_a_plugin_token_loss_is_aggregated_by_the_trainer():
    log_probs, old, adv, mask = _tensors()
    loss, metrics = algorithm_policy_loss(Reinforce(), _inputs(log_probs, old, adv, mask), "seq-mean-token-mean")
    assert torch.equal(loss, agg_loss(-adv * log_probs, mask, "seq-mean-token-mean"))
    assert metrics["pg_clipfrac"] == 1.0 and metrics["pg_clipfrac_lower"] == 0.0  # a flag left out is logged as 0
    (grad,) = torch.autograd.grad(loss, log_probs)
    assert torch.equal(grad == 0, mask == 0)  # the gradient flows on trained tokens only (advantages are nonzero there)


@pytest.mark.parametrize(("answer", "says"), [
    ("a-tuple", "token_loss returned a tuple, not PolicyLossOutputs"),
    ("short", "the loss tensor token_loss returned has shape (3, 5), expected a tensor of shape (3, 6)"),
    ("detached", "the loss token_loss returned does not depend on log_probs, so it trains nothing"),
    ("unknown-flag", "token_loss returned flags ['clip_ratio']; known flags: pg_clipfrac, pg_clipfrac_lower"),
    ("flag-shape", "the 'pg_clipfrac' flags token_loss returned has shape (6,), expected a tensor of shape (3, 6)"),
    ("float-flag", "the 'pg_clipfrac' flags token_loss returned are torch.float32, not bool"),  # the kit passed it (helper-87's brief)
    ("raises", "raised in token_loss: ZeroDivisionError: division by zero"),
])
def test_a_malformed_token_loss_is_one_line_naming_the_plugin(answer, says):
    algorithm = Answers()
    algorithm.answer = answer
    with pytest.raises(PluginError) as caught:
        algorithm_policy_loss(algorithm, _inputs(*_tensors()), "token-mean")
    assert says in caught.value.message
    assert "\n" not in caught.value.message
    with pytest.raises((PluginError, AssertionError)):
        check_algorithm(algorithm)  # the kit refuses it too


def test_the_kit_refuses_a_token_loss_that_is_not_deterministic():
    class Noisy(Algorithm):
        def token_loss(self, inputs):
            return PolicyLossOutputs(-inputs.advantages * inputs.log_probs * torch.rand(()))

    with pytest.raises(AssertionError, match="not deterministic"):
        check_algorithm(Noisy())
    check_algorithm(Reinforce())  # and passes a sound one


def test_an_algorithm_returns_the_metrics_it_declares():
    """A plugin could not log a metric of its own (GSPO's mean sequence ratio): the outputs held the
    two clip-fraction flags only (helper-87's brief)."""
    log_probs, old, adv, mask = _tensors()
    _, metrics = algorithm_policy_loss(OwnMetric(), _inputs(log_probs, old, adv, mask), "token-mean")
    below = log_probs < (log_probs * mask).sum() / mask.sum()
    assert metrics["algo/unlikely"] == pytest.approx(float((below * mask).sum() / mask.sum()))
    assert metrics["algo/unlikely"] == metrics["pg_clipfrac"] and 0 < metrics["algo/unlikely"] < 1
    check_algorithm(OwnMetric())


class Declares(Algorithm):
    """Declares two metrics and returns ``answer`` (set by the test) as its metrics."""

    metric_names = ("ratio", "spread")
    answer: dict = {}

    def token_loss(self, inputs):
        return PolicyLossOutputs(-inputs.advantages * inputs.log_probs, metrics=self.answer)


@pytest.mark.parametrize(("names", "answer", "says"), [
    (("ratio", "spread"), {"ratio": 1.0}, "the metrics token_loss returned lack 'spread', declared in its metric_names"),
    (("ratio", "spread"), {"ratio": 1.0, "spread": 0.5, "kl": 0.0}, "the metrics token_loss returned hold 'kl', not in its metric_names "
                                                                    "(ratio, spread)"),
    ((), {"ratio": 1.0}, "the metrics token_loss returned hold 'ratio', not in its metric_names (none declared)"),
    (("ratio", "spread"), {"ratio": torch.ones(3), "spread": 0.5}, "the metric 'ratio' token_loss returned is a tensor of shape (3,), "
                                                                   "not one number"),
    (("ratio", "spread"), {"ratio": "high", "spread": 0.5}, "the metric 'ratio' token_loss returned is a str, not one number"),
    (("ratio", "spread"), {"ratio": torch.tensor(True), "spread": 0.5}, "the metric 'ratio' token_loss returned is a bool tensor, "
                                                                        "not one number"),  # a flag: it was logged as 1.0
    (("ratio", "spread"), {"ratio": True, "spread": 0.5}, "the metric 'ratio' token_loss returned is a bool, not one number"),
])
def test_metrics_other_than_the_declared_ones_are_one_line_naming_the_plugin_and_the_key(names, answer, says):
    algorithm = Declares()
    algorithm.metric_names, algorithm.answer = names, answer
    with pytest.raises(PluginError) as caught:
        algorithm_policy_loss(algorithm, _inputs(*_tensors()), "token-mean")
    assert caught.value.message == f"plugin Declares: {says}"
    with pytest.raises(PluginError, match="metric"):
        check_algorithm(algorithm)  # the kit refuses it too
    algorithm.answer = {"ratio": torch.tensor(1.0), "spread": 0.5}
    if names:
        assert algorithm_policy_loss(algorithm, _inputs(*_tensors()), "token-mean")[1]["algo/ratio"] == 1.0  # a one-element tensor is one number
        algorithm.answer = {"ratio": np.float32(0.5), "spread": np.int64(2)}  # numpy's numbers are numbers (np.float32 was refused)
        assert algorithm_policy_loss(algorithm, _inputs(*_tensors()), "token-mean")[1]["algo/spread"] == 2.0


@pytest.mark.parametrize("names", ["ratio", ("ratio", "ratio"), ("ratio", ""), ("seq ratio",), (1,)])
def test_metric_names_must_be_distinct_names(names):
    """A bare string declared one metric per character."""
    algorithm = Declares()
    algorithm.metric_names = names
    with pytest.raises(PluginError) as caught:
        check_metric_names(algorithm)
    assert caught.value.message.startswith(f"plugin Declares: metric_names = {names!r}; it names the metrics token_loss returns")
    with pytest.raises(PluginError, match="metric_names ="):
        check_algorithm(algorithm)


class LastTurnOnly(Algorithm):
    """REINFORCE on each row's last turn only: the tokens after the row's second-to-last turn end."""

    def token_loss(self, inputs):
        width = inputs.log_probs.shape[1]
        start = torch.tensor([ends[-2] + 1 if len(ends) > 1 else 0 for ends in inputs.turn_ends])
        last = torch.tensor([ends[-1] for ends in inputs.turn_ends])  # every row has a turn: a run's rows do
        keep = (torch.arange(width) >= start[:, None]) & (torch.arange(width) <= last[:, None])
        return PolicyLossOutputs(-inputs.advantages * inputs.log_probs * keep)


def test_the_kits_row_without_trained_tokens_has_its_turn_end_as_a_runs_has():
    """The kit's empty row had no turn end, which no row of a run lacks (the run test below): an
    algorithm that reads each row's last turn end failed the kit only (helper-87's brief)."""
    check_algorithm(LastTurnOnly())
    seen = []
    probe = LastTurnOnly()
    probe.token_loss = lambda inputs: seen.append(inputs) or LastTurnOnly.token_loss(probe, inputs)
    check_algorithm(probe)
    mask, turn_ends = seen[0].response_mask, seen[0].turn_ends
    for row in range(len(mask) - 1):  # one turn each: its end is the row's last trained token
        (end,) = turn_ends[row]
        assert mask[row, end] == 1 and not mask[row, end + 1:].any()
    # the empty row: what build_batch gives a turn that generated nothing after a prompt as long as the others'
    prompt = list(range(int(mask[0].nonzero().min()) + 1))
    rows = [Trajectory(env="e", tag="t", group_id=0, member=0, seed=0, env_id=0, turns=[Turn(prompt, reply, "")]) for reply in ([7, 8], [])]
    assert not mask[-1].any() and turn_ends[-1] == build_batch(rows, 0).turn_ends[1]


class SequenceRatio(Algorithm):
    """GSPO's sequence ratio: the mean log-ratio over each row's trained tokens (``clamp=False``:
    divided by the raw token count, 0/0 on a row with none)."""

    clamp = True

    def token_loss(self, inputs):
        log_probs, m = inputs.log_probs, inputs.response_mask.to(inputs.log_probs.dtype)
        n = m.sum(-1, keepdim=True)
        seq = ((log_probs - inputs.old_log_probs) * m).sum(-1, keepdim=True) / (n.clamp(min=1) if self.clamp else n)
        return PolicyLossOutputs(-inputs.advantages * torch.exp(seq.detach()) * torch.exp(log_probs - log_probs.detach()))


def _with_an_empty_row():
    log_probs, old, adv, mask = _tensors()
    mask = torch.cat([mask, torch.zeros(1, 6)])
    old = torch.cat([old, -torch.ones(1, 6)])
    adv = torch.cat([adv, torch.zeros(1, 6)])
    return _inputs(torch.cat([log_probs.detach(), -torch.ones(1, 6)]).requires_grad_(True), old, adv, mask)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_a_nan_loss_on_a_row_without_trained_tokens_is_one_line_naming_the_plugin(mode):
    """Real batches hold rows whose response_mask is all zero; a per-row mean without a guard is NaN
    there, and NaN x 0 poisons the whole loss (before: a skipped optimiser step blamed on the
    gradient norm, or a null actor/pg_loss, and the kit passed it)."""
    naive = SequenceRatio()
    naive.clamp = False
    with pytest.raises(PluginError) as caught:
        algorithm_policy_loss(naive, _with_an_empty_row(), mode)
    assert caught.value.message == ("plugin SequenceRatio: token_loss gave a NaN or infinite loss on 1 row(s) whose response_mask "
                                    "is empty, from finite inputs")
    with pytest.raises(PluginError, match="whose response_mask is empty"):
        check_algorithm(naive)  # the kit's batch has such a row
    loss, _ = algorithm_policy_loss(SequenceRatio(), _with_an_empty_row(), mode)  # guarded: finite
    assert torch.isfinite(loss)
    check_algorithm(SequenceRatio())


def test_a_nan_loss_from_nan_log_probs_is_left_to_the_divergence_guard():
    """Non-finite inputs on trained tokens are the model's (a diverged run skips the step), not the algorithm's."""
    log_probs, old, adv, mask = _tensors()
    log_probs = log_probs.detach().clone()
    log_probs[0, 2] = float("nan")
    loss, metrics = algorithm_policy_loss(Reinforce(), _inputs(log_probs.requires_grad_(True), old, adv, mask), "token-mean")
    assert not torch.isfinite(loss) and metrics["pg_loss"] != metrics["pg_loss"]


@pytest.mark.parametrize("algorithm", [Algorithm, Reinforce])
def test_a_nan_loss_from_a_nan_log_prob_outside_the_mask_is_left_to_the_divergence_guard(algorithm):
    """A model's NaN on an untrained position (a prompt or observation token) makes every loss NaN
    (NaN x 0): it was refused as the algorithm's own, the built-in clipped surrogate included (helper-86's review)."""
    log_probs, old, adv, mask = _tensors()
    log_probs = log_probs.detach().clone()
    assert mask[2, 4] == 0
    log_probs[2, 4] = float("nan")
    loss, metrics = algorithm_policy_loss(algorithm(), _inputs(log_probs.requires_grad_(True), old, adv, mask), "token-mean")
    assert not torch.isfinite(loss) and metrics["pg_loss"] != metrics["pg_loss"]


def _run(run_dir: Path, *overrides: str) -> int:
    env = toy_run_config(None).env
    return main(["run", "--no-progress", "--env", env, "--run-dir", str(run_dir), *TOY_RUN, "steps=1", *overrides])


def test_a_run_trains_with_the_plugins_token_loss_in_the_update_and_the_gradient_analysis(tmp_path):
    assert _run(tmp_path / "run", "algo=test-reinforce", "grad_analysis.every=1") == 0
    (row,) = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert row["actor/pg_clipfrac"] == 1.0  # the plugin's flags: the clipped surrogate flags no token at ratio 1
    assert set(CALLS) == {"update_actor", "component_grad_norms"}  # the update and the gradient analysis' probes
    # each call sees its micro-batch's rows: their groups, episodes, turn ends (on trained tokens) and no reference
    assert SEEN and all(i.ref_log_probs is None for i in SEEN)  # use_kl_loss is off: none computed
    for inputs in SEEN:
        assert inputs.group_ids.shape == inputs.episode_ids.shape == (len(inputs.response_mask),) == (len(inputs.turn_ends),)
        assert all(inputs.turn_ends)  # every row has at least one turn (an episode without one is not trained)
        assert set(inputs.group_ids.tolist()) <= {0, 1} and inputs.episode_ids.max() < 4  # rollout.env_groups=2 x group_size=2
        width = inputs.response_mask.shape[1]
        assert all(0 <= end < width for ends in inputs.turn_ends for end in ends)  # positions inside the micro-batch's rows
        assert all(inputs.response_mask[row, end] == 1 for row, ends in enumerate(inputs.turn_ends) for end in ends
                   if inputs.response_mask[row].any())  # a reply's last token (a turn that generated nothing has none)
    assert _run(tmp_path / "kl", "algo=test-reinforce", "algo_config.use_kl_loss=true") == 0
    assert SEEN[-1].ref_log_probs is not None and SEEN[-1].ref_log_probs.shape == SEEN[-1].log_probs.shape


def test_a_run_logs_the_algorithms_own_metrics_averaged_as_the_flags_are(tmp_path):
    """One mini-batch of two micro-batches (TOY_RUN): each micro-batch's metric weighs by its trained
    tokens, as the flags do, so the metric and the flag that holds the same quantity agree."""
    assert _run(tmp_path / "run", "algo=test-own-metric") == 0
    (row,) = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert row["actor/algo/unlikely"] == pytest.approx(row["actor/pg_clipfrac"], rel=1e-12)
    assert 0 < row["actor/algo/unlikely"] < 1


def test_the_gradient_analysis_logs_the_algorithms_own_metrics_per_bucket(tmp_path):
    """The analysis' probes called token_loss and checked its metrics but dropped them. Before the
    actor update, on the same weights and rows, the ``all`` bucket's metric is the update's."""
    assert _run(tmp_path / "run", "algo=test-own-metric", "grad_analysis.every=1", "grad_analysis.buckets=2") == 0
    (row,) = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert row["grad_norm/all/algo/unlikely"] == pytest.approx(row["actor/algo/unlikely"], rel=1e-5)
    buckets = [k for k in row if k.startswith("grad_norm/bucket_") and k.endswith("/algo/unlikely")]
    assert len(buckets) == 2 and all(0 <= row[k] <= 1 for k in buckets)


def test_a_malformed_token_loss_stops_the_run_naming_the_algorithm(tmp_path, capsys):
    registry.register(AlgorithmSpec(name="test-detached", factory=f"{__name__}:Detached"))
    try:
        assert _run(tmp_path / "run", "algo=test-detached") == 2
    finally:
        registry.unregister("algorithm", "test-detached")
    assert one_line_error(capsys.readouterr().err) == (
        "PluginError: algorithm 'test-detached' (<in-process>): the loss token_loss returned does not depend on log_probs, "
        "so it trains nothing")


class Detached(Algorithm):
    def token_loss(self, inputs):
        return PolicyLossOutputs((-inputs.advantages * inputs.log_probs).detach())


@dataclasses.dataclass(frozen=True)
class ThreadRanks(World):
    """Ranks as threads of one process: ``all_sum`` adds the tensors every rank hands in (what
    gloo's all_reduce does), so ranks that reduce different keys, or skip a reduction, disagree."""

    slots: list = dataclasses.field(default_factory=list)
    barrier: threading.Barrier | None = None

    def all_sum(self, tensor):
        assert self.barrier is not None
        self.slots[self.rank] = tensor.detach().clone()
        self.barrier.wait()
        total = sum(self.slots[1:], self.slots[0].clone())
        self.barrier.wait()  # every rank has read the slots before the next reduction fills them
        return total.to(tensor.device)


def test_data_parallel_ranks_reduce_the_algorithms_metrics_to_the_one_process_value(tmp_path):
    """Two ranks each run half of every mini-batch's micro-batches; the metric is summed over ranks
    by the reduction the clip fractions go through, so each rank logs the one-process value."""
    cfg = load_config(RunConfig, [], [f"env={toy_run_config(None).env}", *TOY_RUN, "rollout.env_groups=4", "algo=test-own-metric",
                                      f"run_dir={tmp_path / 'run'}"])
    trainer = Trainer(cfg)
    trainer.setup()
    batch = trainer._build_batch(trainer.runner.run(mode="train", sampling=trainer.train_sampling))
    assert len(batch) == 8  # two mini-batches of two micro-batches: one each per rank
    prepared = prepare(batch, model=trainer.model, ref_model=None, critic=None, algorithm=trainer.algorithm, estimator=trainer.estimator,
                       optim=cfg.optim, sampling=trainer.train_sampling)
    models = [copy.deepcopy(trainer.model) for _ in range(3)]

    def update(model, world=ONE):
        return update_actor(prepared, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), algorithm=trainer.algorithm,
                            optim=cfg.optim, temperature=trainer.train_sampling.temperature, world=world)

    one = update(models[0])
    slots, barrier = [None, None], threading.Barrier(2, timeout=120)
    ranks: list = [None, None]

    def rank(r):
        ranks[r] = update(models[1 + r], ThreadRanks(rank=r, size=2, slots=slots, barrier=barrier))

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 0 < one["actor/algo/unlikely"] < 1 and one["actor/algo/unlikely"] == pytest.approx(one["actor/pg_clipfrac"], rel=1e-12)
    for got in ranks:
        assert got is not None and got.keys() == one.keys()
        assert got["actor/algo/unlikely"] == pytest.approx(one["actor/algo/unlikely"], rel=1e-6)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), torch.tensor(float("nan"))])
def test_a_non_finite_metric_from_finite_inputs_is_one_line_naming_the_plugin_and_the_key(value, tmp_path):
    """A NaN metric was logged as null in a run's metrics.jsonl while the kit refused it: the run
    now refuses it too, as it refuses a NaN loss from finite inputs."""
    algorithm = Declares()
    algorithm.answer = {"ratio": 1.0, "spread": value}
    with pytest.raises(PluginError) as caught:
        algorithm_policy_loss(algorithm, _inputs(*_tensors()), "token-mean")
    assert caught.value.message == f"plugin Declares: the metric 'spread' token_loss returned is {float(value)}, from finite inputs"
    with pytest.raises(PluginError, match="the metric 'spread' token_loss returned is"):
        check_algorithm(algorithm)  # the kit says the same
    log_probs, old, adv, mask = _tensors()  # from a NaN log-prob (a diverged model): the divergence guard's, not the plugin's
    log_probs = log_probs.detach().clone()
    log_probs[0, 2] = float("nan")
    _, metrics = algorithm_policy_loss(algorithm, _inputs(log_probs.requires_grad_(True), old, adv, mask), "token-mean")
    assert metrics["algo/ratio"] == 1.0 and not math.isfinite(metrics["algo/spread"])


def test_a_run_stops_on_a_nan_metric_naming_the_algorithm(tmp_path, capsys):
    registry.register(AlgorithmSpec(name="test-nan-metric", factory=f"{__name__}:NanMetric"))
    try:
        assert _run(tmp_path / "run", "algo=test-nan-metric") == 2
    finally:
        registry.unregister("algorithm", "test-nan-metric")
    assert one_line_error(capsys.readouterr().err) == (
        "PluginError: algorithm 'test-nan-metric' (<in-process>): the metric 'mean_ratio' token_loss returned is nan, from finite inputs")
    assert not read_metrics(tmp_path / "run" / "metrics.jsonl")  # no row with a null actor/algo/mean_ratio


class NanMetric(Algorithm):
    """The clipped surrogate plus a metric that is a mean over no tokens (0 / 0)."""

    metric_names = ("mean_ratio",)

    def token_loss(self, inputs):
        return PolicyLossOutputs(super().token_loss(inputs).loss, metrics={"mean_ratio": torch.tensor(0.0) / torch.tensor(0.0)})
