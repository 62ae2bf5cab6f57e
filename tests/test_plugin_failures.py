"""A third-party plugin that raises or answers nonsense during a run: one line naming it, exit 2,
and the last finished step checkpointed (a resume continues from it)."""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from pydantic import Field

from ragen_core import registry
from ragen_core.cli.main import main
from ragen_core.errors import PluginError, RegistryError
from ragen_core.hookspecs import hookimpl
from ragen_core.interfaces.advantage import AdvantageEstimator, AdvantageOutputs
from ragen_core.interfaces.algorithm import Algorithm, AlgorithmConfig
from ragen_core.interfaces.rollout_filter import FilterConfig, FilterResult, RolloutFilter
from ragen_core.specs import AlgorithmSpec, DiagnosticSpec, EstimatorSpec, FilterSpec, PluginConfig
from ragen_core.testing.run_helpers import one_line_error, toy_run_config
from ragen_core.trainer.loggers import read_metrics
from ragen_core.trainer.trainer import Trainer

CALLS: dict[str, int] = {}


class Answer(FilterConfig):
    answer: str = "ok"
    """What select returns: ok, raise-at-2, not-a-result, unknown-id, twice, nan-weight, none."""


class ScriptedFilter(RolloutFilter):
    config_class = Answer

    def select(self, rollouts):
        CALLS["select"] = CALLS.get("select", 0) + 1
        groups = list(dict.fromkeys(rollouts.group_ids))
        answer = self.config.answer
        if answer == "raise-at-2" and CALLS["select"] == 2:
            raise RuntimeError("boom from the filter")
        if answer == "not-a-result":
            return groups
        if answer == "unknown-id":
            return FilterResult(kept_groups=[*groups, 999])
        if answer == "twice":
            return FilterResult(kept_groups=[groups[0], groups[0]])
        if answer == "nan-weight":
            return FilterResult(kept_groups=groups, group_weights={groups[0]: math.nan})
        if answer == "none":
            return FilterResult(kept_groups=[], dropped=dict.fromkeys(groups, "test none"))
        return FilterResult(kept_groups=groups)


class ShapeBoom(Algorithm):
    def shape_rewards(self, token_rewards, response_mask, *, max_length=None):
        raise ValueError("boom from shape_rewards")


class ShapeNan(Algorithm):
    def shape_rewards(self, token_rewards, response_mask, *, max_length=None):
        return token_rewards + math.nan


class NoMark:
    def __init__(self, config):
        pass

    def ragen_on_step_end(self, metrics, step, context):  # no @hookimpl: pluggy would skip it
        raise AssertionError("never called")


class NanEstimator(AdvantageEstimator):
    def __call__(self, inputs):
        adv = torch.full_like(inputs.token_rewards, math.nan)
        return AdvantageOutputs(advantages=adv, returns=adv)


class DiagBoom:
    @hookimpl
    def ragen_on_rollout_end(self, trajectories, step, context):
        raise KeyError("boom from a diagnostic")


class OddReturn:
    """Returns ``config.kind`` from the rollout hook: a list, or a dict with a text value."""

    def __init__(self, config):
        self.kind, self.value = config.kind, config.value

    @hookimpl
    def ragen_on_rollout_end(self, trajectories, step, context):
        if self.kind == "bare":  # keys without a family: 'step' would overwrite the step of metrics.jsonl's row
            return {"mi": 0.5, "step": 99.0, "/x": 1.0, "odd/fine": 1.0}
        if self.kind == "core":  # names the run logs itself, before, after and around this hook
            return {"actor/lr_factor": 123.0, "actor/entropy": 123.0, "timing_s/total": 123.0, "odd/fine": 1.0}
        if self.kind == "late":  # keys of families the run logs only on some steps (validation, analysis, a stop)
            return {"val-env/success": 123.0, "val-env/mine": 123.0, "grad_norm/all/task": 123.0, "early_stopped/mine": 123.0,
                    "timing_s/testing": 123.0, "odd/fine": 1.0}
        if self.kind == "shared":  # a key another diagnostic returns too
            return {"odd/shared": self.value, "odd/fine": 1.0}
        if self.kind == "update":  # keys of the update, on steps whose update did not run
            return {"actor/pg_loss": 123.0, "actor/lr": 123.0, "critic/vf_loss": 123.0, "odd/fine": 1.0}
        return [1.0] if self.kind == "list" else {"odd/value": "high", "odd/fine": 1.0, "odd/nan": math.nan}


class OddConfig(PluginConfig):
    kind: str = "list"
    value: float = 1.0


class EndBoom:
    def __init__(self, config):
        pass

    @hookimpl
    def ragen_on_train_end(self, run_dir, context):
        raise OSError("boom at the end")


class SignalAtStep1:
    def __init__(self, config):
        self.signum, self.times = config.signum, config.times

    @hookimpl
    def ragen_on_rollout_end(self, trajectories, step, context):
        if step == 1:
            for _ in range(self.times):
                os.kill(os.getpid(), self.signum)  # arrives mid-step, as from a terminal or a scheduler


class SignalConfig(PluginConfig):
    signum: int = 2
    times: int = 1


SPECS = [
    FilterSpec(name="test-scripted-filter", config_model=Answer, factory=f"{__name__}:ScriptedFilter"),
    AlgorithmSpec(name="test-shape-boom", factory=f"{__name__}:ShapeBoom"),
    AlgorithmSpec(name="test-shape-nan", factory=f"{__name__}:ShapeNan"),
    EstimatorSpec(name="test-nan-adv", factory=f"{__name__}:NanEstimator"),
    DiagnosticSpec(name="test-diag-boom", factory=f"{__name__}:make_diag"),
    DiagnosticSpec(name="test-no-mark", factory=f"{__name__}:NoMark"),
    DiagnosticSpec(name="test-end-boom", factory=f"{__name__}:EndBoom"),
    DiagnosticSpec(name="test-signal", config_model=SignalConfig, factory=f"{__name__}:SignalAtStep1"),
    DiagnosticSpec(name="test-odd-return", config_model=OddConfig, factory=f"{__name__}:OddReturn"),
    DiagnosticSpec(name="test-odd-twin", config_model=OddConfig, factory=f"{__name__}:OddReturn"),
]


def make_diag(config):
    return DiagBoom()


@pytest.fixture(autouse=True)
def plugins():
    CALLS.clear()
    for spec in SPECS:
        registry.register(spec)
    yield
    for spec in SPECS:
        registry.unregister(spec.kind, spec.name)


def _run(run_dir: Path, *overrides: str, steps: int = 2, resume: bool = False) -> int:
    """``ragen run`` of the toy corridor with the default checkpoint cadence (every 10 steps: a
    crash at step 2 has no checkpoint of its own)."""
    from ragen_core.testing.run_helpers import TOY_RUN

    if resume:
        return main(["run", "--no-progress", "--resume", str(run_dir), *overrides, f"steps={steps}"])
    env = toy_run_config(None).env
    return main(["run", "--no-progress", "--env", env, "--run-dir", str(run_dir), *TOY_RUN, "save_freq=10", *overrides, f"steps={steps}"])


def test_a_filter_that_raises_is_named_and_the_last_finished_step_is_kept(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert _run(run_dir, "filter=test-scripted-filter", "filter_config.answer=raise-at-2") == 2
    err = capsys.readouterr().err
    assert one_line_error(err) == ("PluginError: filter 'test-scripted-filter' (<in-process>) raised in select: "
                                   "RuntimeError: boom from the filter")
    assert "step 2 failed: saved checkpoints/step_1, the last finished step" in err
    assert [r["step"] for r in read_metrics(run_dir / "metrics.jsonl")] == [1]
    # the saved step continues: a resume with a filter that behaves trains step 2
    assert _run(run_dir, "filter_config.answer=ok", resume=True) == 0
    assert [r["step"] for r in read_metrics(run_dir / "metrics.jsonl")] == [1, 2]


def test_a_failed_first_step_leaves_a_folder_that_says_to_overwrite(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert _run(run_dir, "algo=test-shape-boom") == 2
    err = capsys.readouterr().err
    assert one_line_error(err) == ("PluginError: algorithm 'test-shape-boom' (<in-process>) raised in shape_rewards: "
                                   "ValueError: boom from shape_rewards")
    assert not (run_dir / "checkpoints").exists()  # step 1 never finished: nothing to save
    assert _run(run_dir) == 2  # the folder is taken; the hint must not send the user to --resume (there is nothing to resume)
    out = capsys.readouterr().err
    assert "no checkpoint to resume from: pass --overwrite" in out and "--resume" not in out


def test_a_hook_method_without_hookimpl_is_refused_before_training(tmp_path, capsys):
    """pluggy ignores it: the diagnostic ran with no metric and no word (helper-75's walk)."""
    assert _run(tmp_path / "run", "diagnostics=[test-no-mark]") == 2
    assert one_line_error(capsys.readouterr().err) == (
        "PluginLoadError: diagnostic-test-no-mark: its method ragen_on_step_end has no @hookimpl, so it would never be called")
    assert not (tmp_path / "run").exists()  # refused in set-up


def test_nan_rewards_from_an_algorithm_name_the_algorithm_not_the_estimator(tmp_path, capsys):
    """They reached the estimator, and the error blamed the shipped 'grpo' estimator's normalisation (helper-75's walk)."""
    assert _run(tmp_path / "run", "algo=test-shape-nan") == 2
    assert one_line_error(capsys.readouterr().err) == (
        "PluginError: algorithm 'test-shape-nan' (<in-process>): the rewards shape_rewards returned are NaN or infinite on trained tokens")


@pytest.mark.parametrize(("answer", "says"), [
    ("not-a-result", "select returned a list, not a FilterResult"),
    ("unknown-id", "select kept group ids [999] that are not in the batch"),
    ("twice", "more than once"),
    ("nan-weight", "the loss weight nan (weights are finite and >= 0)"),
])
def test_a_filter_answer_the_step_cannot_use_is_refused(tmp_path, answer, says):
    cfg = toy_run_config(tmp_path / "run", "filter=test-scripted-filter", f"filter_config.answer={answer}", steps=1)
    with pytest.raises(PluginError, match="filter 'test-scripted-filter'") as err, Trainer(cfg) as trainer:
        trainer.train()
    assert says in str(err.value).splitlines()[0]


def test_a_filter_that_keeps_nothing_says_so(tmp_path, capsys):
    cfg = toy_run_config(tmp_path / "run", "filter=test-scripted-filter", "filter_config.answer=none", steps=1)
    with Trainer(cfg) as trainer:
        trainer.train()
    assert ("step 1: nothing left to train after the filter: no update (1 such step(s) in a row; the run stops after 5 in a row "
            "(filter_config.empty_stop_steps)") in capsys.readouterr().err


def test_non_finite_advantages_name_the_estimator(tmp_path):
    cfg = toy_run_config(tmp_path / "run", "algo_config.estimator=test-nan-adv", steps=1)
    with pytest.raises(PluginError, match=r"^estimator 'test-nan-adv' \(<in-process>\): advantages are NaN"), Trainer(cfg) as trainer:
        trainer.train()


def test_a_diagnostic_that_raises_is_named(tmp_path):
    cfg = toy_run_config(tmp_path / "run", "diagnostics=[test-diag-boom]", steps=1)
    with pytest.raises(PluginError, match=r"^diagnostic 'test-diag-boom' \(<in-process>\) raised in ragen_on_rollout_end: KeyError"), \
            Trainer(cfg) as trainer:
        trainer.train()


def test_a_diagnostic_returning_no_dict_is_named_and_a_non_number_is_said(tmp_path, capsys):
    """A list from the hook crashed with "AttributeError: 'list' object has no attribute 'items'" in
    the trainer, naming no plugin; a text value was dropped without a word."""
    cfg = toy_run_config(tmp_path / "run", "diagnostics=[test-odd-return]", steps=1)
    with pytest.raises(PluginError) as err, Trainer(cfg) as trainer:
        trainer.train()
    assert err.value.message == ("diagnostic 'test-odd-return' (<in-process>) returned a list from ragen_on_rollout_end: it must "
                                 "return a dict of metric names to numbers, or None")
    cfg = toy_run_config(tmp_path / "run2", "diagnostics=[test-odd-return]", "diagnostics_config.test-odd-return.kind=dict", steps=2)
    with Trainer(cfg) as trainer:
        history = trainer.train()
    assert history[0]["odd/fine"] == 1.0 and "odd/value" not in history[0] and math.isnan(history[0]["odd/nan"])
    said = [line for line in capsys.readouterr().err.splitlines() if "odd/value" in line]
    assert said == ["diagnostic 'test-odd-return' (<in-process>) returned 'odd/value': 'high' from ragen_on_rollout_end, not a number: "
                    "not logged (metrics are numbers; NaN is logged as null)"]  # once, not every step


def test_an_observer_failing_at_the_end_does_not_hide_why_training_failed(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert _run(run_dir, "algo=test-shape-boom", "diagnostics=[test-end-boom]") == 2
    err = capsys.readouterr().err
    assert "PluginError: algorithm 'test-shape-boom' (<in-process>) raised in shape_rewards: ValueError: boom from shape_rewards" in err
    assert "also: diagnostic 'test-end-boom' (<in-process>) raised in ragen_on_train_end: OSError: boom at the end" in err


def test_an_observer_failing_at_the_end_of_a_good_run_is_the_error(tmp_path, capsys):
    assert _run(tmp_path / "run", "diagnostics=[test-end-boom]", steps=1) == 2
    assert one_line_error(capsys.readouterr().err) == \
        "PluginError: diagnostic 'test-end-boom' (<in-process>) raised in ragen_on_train_end: OSError: boom at the end"


def make_dict(config):
    return {}


def test_a_factory_that_builds_the_wrong_thing_is_refused_by_make():
    registry.register(FilterSpec(name="test-returns-dict", factory=f"{__name__}:make_dict"))
    try:
        with pytest.raises(PluginError, match=rf"its factory {__name__}:make_dict returned a dict, not a RolloutFilter"):
            registry.make("filter", "test-returns-dict")
    finally:
        registry.unregister("filter", "test-returns-dict")


def test_an_algorithm_spec_without_a_config_model_gets_the_algorithm_settings():
    assert registry.get_spec("algorithm", "test-shape-boom").config_model is AlgorithmConfig
    with pytest.raises(ValueError, match="a filter's config_model must subclass ragen_core.interfaces.rollout_filter.FilterConfig"):
        FilterSpec(name="bad-config", config_model=PluginConfig, factory="x:y")


def test_register_refuses_a_name_out_of_normal_form():
    spec = registry.get_spec("filter", "test-scripted-filter")
    with pytest.raises(RegistryError, match=r"cannot register filter 'My Filter!'.*\nhint: register it as 'my-filter'"):
        registry.register(spec.model_copy(update={"name": "My Filter!"}))


class NegativeDefault(FilterConfig):
    threshold: float = Field(default=-1.0, ge=0)


class NeedsUrl(FilterConfig):
    api_url: str


@pytest.mark.parametrize(("spec", "row"), [
    (FilterSpec(name="test-no-module", factory="no_such_module_xyz:F"), "FAILED  PluginLoadError: factory 'no_such_module_xyz:F': no module named"),
    (FilterSpec(name="test-bad-default", config_model=NegativeDefault, factory=f"{__name__}:ScriptedFilter"),
     "FAILED  PluginConfigError: the default of threshold fails its own validation: Input should be greater than or equal to 0"),
    (FilterSpec(name="test-needs-url", config_model=NeedsUrl, factory=f"{__name__}:ScriptedFilter"), "ok      no default for api_url: a run sets it"),
])
def test_plugins_check_reads_factories_and_defaults(capsys, spec, row):
    registry.register(spec)
    try:
        for flags in ([], ["--strict"]):  # any failure exits 1, with or without --strict
            rc = main(["plugins", "check", "--kind", "filter", *flags])
            line = next(line for line in capsys.readouterr().out.splitlines() if spec.name in line)
            assert " ".join(row.split()) in " ".join(line.split()), line
            assert rc == (1 if row.startswith("FAILED") else 0)
    finally:
        registry.unregister("filter", spec.name)


def test_plugins_check_finds_a_factory_name_the_module_lacks_and_strict_imports_it(capsys, tmp_path, monkeypatch):
    """A factory string naming a class its module does not define is found from the module's
    source (no import); ``--strict`` imports the implementation, so one that fails to import fails (and
    builds it: Real is a whole filter)."""
    (tmp_path / "fakefactory_nope.py").write_text("import json\nfrom ragen_core.interfaces.rollout_filter import RolloutFilter\n"
                                                  "class Real(RolloutFilter):\n    def select(self, rollouts):\n        pass\n"
                                                  "if True:\n    ALSO = 1\n"
                                                  "for LOOPED in [1]:\n    pass\nglobals()['DYNAMIC'] = 1\n", encoding="utf-8")
    (tmp_path / "fakefactory_raises.py").write_text("raise ImportError('needs a library that is not installed')\nclass F:\n    pass\n",
                                                    encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    specs = [FilterSpec(name="test-missing-name", factory="fakefactory_nope:Nope"),
             FilterSpec(name="test-real-name", factory="fakefactory_nope:Real"),
             FilterSpec(name="test-nested-name", factory="fakefactory_nope:ALSO"),
             FilterSpec(name="test-looped-name", factory="fakefactory_nope:LOOPED"),  # bound in ways the scan does not read:
             FilterSpec(name="test-dynamic-name", factory="fakefactory_nope:DYNAMIC"),  # not failed without an import
             FilterSpec(name="test-import-fails", factory="fakefactory_raises:F")]
    for spec in specs:
        registry.register(spec)
    try:
        assert main(["plugins", "check", "--kind", "filter"]) == 1
        rows = {line.split()[1]: " ".join(line.split()) + " " for line in capsys.readouterr().out.splitlines() if "test-" in line}
        assert "FAILED PluginLoadError: factory 'fakefactory_nope:Nope': module 'fakefactory_nope' defines no 'Nope'" in rows["test-missing-name"]
        assert all(" ok " in rows[n] for n in ("test-real-name", "test-nested-name", "test-looped-name", "test-dynamic-name"))
        assert " ok " in rows["test-import-fails"]  # not imported without --strict: the light check cannot see it
        assert main(["plugins", "check", "--kind", "filter", "--strict"]) == 1
        rows = {line.split()[1]: " ".join(line.split()) + " " for line in capsys.readouterr().out.splitlines() if "test-" in line}
        assert "failed to import: ImportError: needs a library that is not installed" in rows["test-import-fails"]
        assert " ok " in rows["test-real-name"]
    finally:
        for spec in specs:
            registry.unregister("filter", spec.name)


class NoSuchEstimator(AlgorithmConfig):
    estimator: str = "no-such-estimator"


def test_plugins_check_strict_refuses_a_factory_class_of_another_kind_and_a_missing_default_estimator(capsys):
    """Both passed --strict: a factory class that is no RolloutFilter (a run refuses what it
    builds) and an algorithm whose default estimator is installed nowhere (a run stops at once)."""
    specs = [FilterSpec(name="test-not-a-filter", factory="collections:OrderedDict"),
             AlgorithmSpec(name="test-no-estimator", config_model=NoSuchEstimator, factory=f"{__name__}:ShapeBoom")]
    for spec in specs:
        registry.register(spec)
    try:
        assert main(["plugins", "check"]) == 0  # the light check imports nothing; a missing estimator is a note
        rows = {line.split()[1]: " ".join(line.split()) for line in capsys.readouterr().out.splitlines() if "test-no" in line}
        assert "ok its default estimator 'no-such-estimator' is not installed" in rows["test-no-estimator"]
        assert " ok " in " ".join(rows["test-not-a-filter"].split()) + " "
        assert main(["plugins", "check", "--strict"]) == 1
        rows = {line.split()[1]: " ".join(line.split()) for line in capsys.readouterr().out.splitlines() if "test-no" in line}
        assert ("FAILED PluginLoadError: factory 'collections:OrderedDict' is a class that does not subclass "
                "ragen_core.interfaces.rollout_filter.RolloutFilter") in rows["test-not-a-filter"]
        assert "FAILED PluginNotFoundError: its default estimator 'no-such-estimator' is not installed" in rows["test-no-estimator"]
    finally:
        registry.unregister("filter", "test-not-a-filter")
        registry.unregister("algorithm", "test-no-estimator")


def test_an_env_factory_that_builds_something_else_is_one_line_in_env_play(capsys):
    """``ragen env play`` printed an AttributeError traceback; the registry now checks what an env factory built."""
    from ragen_core.specs import EnvSpec

    registry.register(EnvSpec(name="test-not-an-env", factory="collections:OrderedDict"))
    try:
        assert main(["env", "play", "test-not-an-env", "--agent", "random"]) == 2
        assert one_line_error(capsys.readouterr().err) == ("PluginError: env 'test-not-an-env' (<in-process>): its factory "
                                                           "collections:OrderedDict returned an OrderedDict, not an Env")
    finally:
        registry.unregister("env", "test-not-an-env")


def test_plugins_check_notes_a_spec_without_a_summary(capsys):
    registry.register(FilterSpec(name="test-no-summary", factory=f"{__name__}:ScriptedFilter"))
    try:
        assert main(["plugins", "check", "--kind", "filter"]) == 0  # a note, not a failure
        line = next(line for line in capsys.readouterr().out.splitlines() if "test-no-summary" in line)
        assert " ok " in line and "no summary: give the spec a one-line summary=..." in line
    finally:
        registry.unregister("filter", "test-no-summary")


def test_plugins_check_counts_disabled_plugins_apart(capsys, monkeypatch):
    monkeypatch.setenv("RAGEN_DISABLE_PLUGINS", "ragen-filters")
    assert main(["plugins", "check", "--kind", "filter", "--strict"]) == 0
    out = capsys.readouterr().out
    n_disabled = sum(1 for line in out.splitlines() if " disabled " in line)
    assert n_disabled >= 1 and out.strip().splitlines()[-1].endswith(f", {n_disabled} disabled")
    assert "not checked (hidden by RAGEN_DISABLE_PLUGINS)" in out
    monkeypatch.delenv("RAGEN_DISABLE_PLUGINS")
    monkeypatch.setenv("RAGEN_LOAD_PLUGINS", "ragen-algo-grpo")  # the filters are hidden: not in the list
    assert main(["plugins", "check", "--kind", "filter"]) == 0
    assert "not checked (hidden by RAGEN_LOAD_PLUGINS)" in capsys.readouterr().out


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_run_stopped_by_a_signal_says_so_and_does_not_exit_0(tmp_path, capsys, signum):
    """``ragen run ... && ragen eval ...`` must not go on with a half-finished run."""
    run_dir = tmp_path / "run"
    rc = _run(run_dir, "diagnostics=[test-signal]", f"diagnostics_config.test-signal.signum={int(signum)}", steps=3)
    out = capsys.readouterr().out
    name = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
    assert rc == 128 + signum
    assert f"stopped by {name} after step 1 of 3: continue with 'ragen run --resume {run_dir}'" in out.splitlines()
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["step_1"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_last_step_says_the_run_finished_and_still_does_not_exit_0(tmp_path, capsys, signum):
    """A signal during the last step: it finished and was saved, and the run exited 0 without a word
    after 'finishing this step', though the README says an interrupted run exits 130 / 143."""
    run_dir = tmp_path / "run"
    rc = _run(run_dir, "diagnostics=[test-signal]", f"diagnostics_config.test-signal.signum={int(signum)}", steps=1)
    out = capsys.readouterr().out
    name = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
    assert rc == 128 + signum  # the signal asked to stop: a '&& ragen eval' after the run does not start
    assert (f"interrupted by {name} during step 1, the last of 1: it finished and was saved (checkpoints/step_1), "
            "so the run finished all its steps") in out.splitlines()
    assert "stopped by" not in out
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["step_1"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_second_signal_aborts_the_step_and_exits_with_its_own_code(tmp_path, capsys, signum):
    """A second SIGTERM used to end as 'interrupted', exit 130, as if it were Ctrl-C."""
    run_dir = tmp_path / "run"
    rc = _run(run_dir, "diagnostics=[test-signal]", f"diagnostics_config.test-signal.signum={int(signum)}",
              "diagnostics_config.test-signal.times=2", steps=3)
    err = capsys.readouterr().err
    assert rc == 128 + signum
    assert ("terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted") in err.splitlines()
    assert "so there is nothing to resume" in err  # step 1 was aborted: no checkpoint


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_second_signal_during_an_update_lets_it_finish_and_saves_the_step(tmp_path, capsys, monkeypatch, signum):
    """Two Ctrl-C during step 2's update used to abort with weights that were no step's: nothing was
    saved (step 1 had no checkpoint yet), though the README promises the last finished step."""
    from ragen_core.testing.run_helpers import toy_run_config
    from ragen_core.trainer import trainer as trainer_mod

    real_update = trainer_mod.update_actor

    def interrupted_update(prepared, **kwargs):
        if trainer.context.step == 2:
            for _ in range(2):
                os.kill(os.getpid(), signum)  # both arrive while the actor update runs
        return real_update(prepared, **kwargs)

    monkeypatch.setattr(trainer_mod, "update_actor", interrupted_update)
    run_dir = tmp_path / "run"
    with trainer_mod.Trainer(toy_run_config(run_dir, "save_freq=10", "test_freq=1", steps=4)) as trainer:
        history = trainer.train()
    assert trainer.interrupted_by == signum and len(history) == 2
    assert "val-env/success" in history[0] and not any(k.startswith("val-env/") for k in history[1])  # step 2: no validation
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["step_2"]
    how = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
    assert (f"interrupt ({how}) during step 2's update: it finishes (seconds), then the step is saved without its validation "
            f"({how} a third time quits at once, saving nothing newer)") in capsys.readouterr().out.splitlines()


def test_a_wrongly_shaped_estimator_output_reads_plainly():
    """It said "its advantages returned shape (2, 970)"."""
    from ragen_core.trainer.update import _check_shape

    with pytest.raises(PluginError) as err:
        _check_shape(torch.zeros(2, 3), torch.zeros(2, 4), "estimator 'x'", "the advantages tensor it returned", "the estimator")
    assert err.value.message == "estimator 'x': the advantages tensor it returned has shape (2, 3), expected a tensor of shape (2, 4)"
    assert err.value.hints == ["the estimator returns one value per token of each row, shaped like its input"]


class TypoAlgoConfig(AlgorithmConfig):
    estimater: str = "rloo"  # meant: estimator


def test_plugins_check_notes_a_config_field_close_to_an_inherited_one(capsys):
    """An algorithm whose config declared 'estimater' trained with the inherited estimator (grpo),
    and 'ragen plugins check --strict' said ok."""
    registry.register(AlgorithmSpec(name="test-typo-algo", summary="typo", config_model=TypoAlgoConfig, factory=f"{__name__}:ShapeBoom"))
    try:
        assert main(["plugins", "check", "--kind", "algorithm"]) == 0  # a note, not a failure
        line = next(line for line in capsys.readouterr().out.splitlines() if "test-typo-algo" in line)
        assert "field 'estimater' is close to the inherited 'estimator': a misspelt override adds a field" in line
    finally:
        registry.unregister("algorithm", "test-typo-algo")


def test_the_diagnostic_base_classes_import_from_ragen_core():
    """The README says every class it names for plugin authors imports from ragen_core; the
    diagnostic's did not."""
    import ragen_core
    from ragen_core.interfaces.diagnostic import Diagnostic, DiagnosticConfig

    assert (ragen_core.Diagnostic, ragen_core.DiagnosticConfig) == (Diagnostic, DiagnosticConfig)
    assert {"Diagnostic", "DiagnosticConfig"} <= set(ragen_core.__all__)


def test_a_diagnostic_with_a_config_that_has_no_compute_freq_is_refused_when_built():
    """A Diagnostic subclass with a plain PluginConfig ran step 1 and died at step 2 with an AttributeError (helper-75's walk)."""
    from ragen_core.errors import PluginConfigError
    from ragen_core.interfaces.diagnostic import Diagnostic

    class Plain(PluginConfig):
        size: int = 3

    class Mine(Diagnostic):
        config_class = Plain

    with pytest.raises(PluginConfigError, match=r"^Mine.config_class is Plain, not a subclass of DiagnosticConfig"):
        Mine()


def test_the_kit_takes_a_nan_diagnostic_metric_as_a_run_logs_it():
    """README: NaN is logged as null; check_diagnostic failed on it (helper-75's walk)."""
    from ragen_core import Trajectory, Turn  # importable from the top level, as the README says of every class it names
    from ragen_core.testing.plugin_checks import check_diagnostic

    class Undefined:
        @hookimpl
        def ragen_on_rollout_end(self, trajectories, step, context):
            return {"mine/mi": math.nan, "mine/count": len(trajectories)}

    traj = Trajectory(env="bandit", tag="Bandit", group_id=0, member=0, seed=0, env_id=0,
                      turns=[Turn(prompt_ids=[1], response_ids=[2], response_text="x")])
    assert check_diagnostic(Undefined(), [traj], context=None)["mine/count"] == 1
    with pytest.raises(AssertionError, match="is not a number"):
        check_diagnostic(type("Text", (), {"ragen_on_rollout_end": hookimpl(lambda self, trajectories, step, context: {"mine/x": "a"})})(),
                         [traj], context=None)


class ZeroNorm(Algorithm):
    @property
    def agg_kwargs(self):
        return {"norm_constant": 0.0}


def test_an_algorithm_whose_norm_constant_is_no_positive_number_is_refused_when_the_run_is_set_up(tmp_path):
    """agg_kwargs' norm_constant=0.0 trained with the padded width as divisor, without a word (helper-80's walk)."""
    registry.register(AlgorithmSpec(name="test-zero-norm", factory=f"{__name__}:ZeroNorm"))
    try:
        cfg = toy_run_config(tmp_path / "run", "algo=test-zero-norm", "algo_config.loss_agg_mode=seq-mean-token-sum-norm", steps=1)
        with pytest.raises(PluginError) as err, Trainer(cfg) as trainer:
            trainer.train()
        assert err.value.message == ("algorithm 'test-zero-norm' (<in-process>): its agg_kwargs give norm_constant=0.0, but "
                                     "seq-mean-token-sum-norm divides the loss by it: a positive number, or None for the padded "
                                     "response width")
    finally:
        registry.unregister("algorithm", "test-zero-norm")


def test_a_diagnostic_metric_named_without_a_family_is_said_once_and_not_logged_as_the_kit_says(tmp_path, capsys):
    """check_diagnostic refused a key without 'family/' (the README's contract) while a run logged it,
    and a key 'step' overwrote the step of the metrics.jsonl row (helper-80's walk): a run now does
    what the kit says, and the kit says what the run does."""
    from ragen_core import Trajectory, Turn
    from ragen_core.testing.plugin_checks import check_diagnostic

    cfg = toy_run_config(tmp_path / "run", "diagnostics=[test-odd-return]", "diagnostics_config.test-odd-return.kind=bare", steps=2)
    with Trainer(cfg) as trainer:
        history = trainer.train()
    assert history[0]["odd/fine"] == 1.0 and not {"mi", "/x"} & set(history[0])
    assert [row["step"] for row in read_metrics(tmp_path / "run" / "metrics.jsonl")] == [1, 2]
    said = [line for line in capsys.readouterr().err.splitlines() if "family/metric" in line]
    assert said == [f"diagnostic 'test-odd-return' (<in-process>) returned {key!r} from ragen_on_rollout_end: a metric is named "
                    "'family/metric' (e.g. 'mine/mi'): not logged" for key in ("mi", "step", "/x")]  # once each, not every step
    traj = Trajectory(env="bandit", tag="Bandit", group_id=0, member=0, seed=0, env_id=0,
                      turns=[Turn(prompt_ids=[1], response_ids=[2], response_text="x")])
    bare = type("Bare", (), {"ragen_on_rollout_end": hookimpl(lambda self, trajectories, step, context: {"mine/": 1.0})})()
    with pytest.raises(AssertionError, match=r"^diagnostic metric key 'mine/': a metric is named 'family/metric' \(e\.g\. 'mine/mi'\), "
                                             r"as a run logs only those"):
        check_diagnostic(bare, [traj], context=None)



def test_a_diagnostic_metric_named_as_a_metric_of_the_run_is_said_once_and_not_logged(tmp_path, capsys):
    """A diagnostic returning 'actor/entropy' (or 'actor/lr_factor', written before its hook ran) lost
    to, or overwrote, the run's own value in the metrics row, saying nothing."""
    cfg = toy_run_config(tmp_path / "run", "diagnostics=[test-odd-return]", "diagnostics_config.test-odd-return.kind=core", steps=2)
    with Trainer(cfg) as trainer:
        history = trainer.train()
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    for row in (*history, *rows):
        assert row["odd/fine"] == 1.0
        assert row["actor/lr_factor"] == 1.0 and row["actor/entropy"] != 123.0 and row["timing_s/total"] != 123.0
    said = [line for line in capsys.readouterr().err.splitlines() if "logs itself" in line]
    assert said == [f"diagnostic 'test-odd-return' (<in-process>) returned {key!r} from ragen_on_rollout_end, a metric the run logs "
                    "itself: not logged (name it in a family of the plugin's own, e.g. 'mine/...')"
                    for key in ("actor/lr_factor", "actor/entropy", "timing_s/total")]  # once each, not every step


def test_check_diagnostic_refuses_a_key_the_run_logs_itself_as_the_run_drops_it():
    """The kit passed a diagnostic returning 'actor/entropy' or 'val-env/mine', keys a run never logs
    (the run's own families and timings): it now refuses them, and a timing of the diagnostic's own passes."""
    from ragen_core import Trajectory, Turn
    from ragen_core.testing.plugin_checks import check_diagnostic

    traj = Trajectory(env="bandit", tag="Bandit", group_id=0, member=0, seed=0, env_id=0,
                      turns=[Turn(prompt_ids=[1], response_ids=[2], response_text="x")])

    def returning(key):
        return type("Diag", (), {"ragen_on_rollout_end": hookimpl(lambda self, trajectories, step, context: {key: 1.0})})()

    for key in ("actor/entropy", "val-env/mine", "grad_norm/all/task", "timing_s/total"):
        with pytest.raises(AssertionError, match=rf"^diagnostic metric key {re.escape(repr(key))} is one the run logs itself "):
            check_diagnostic(returning(key), [traj], context=None)
    assert check_diagnostic(returning("timing_s/mine_step"), [traj], context=None) == {"timing_s/mine_step": 1.0}


def test_the_run_families_are_read_without_torch():
    """The conformance kit reads the run's metric families from ragen_core.hookspecs, which imports no torch."""
    code = ("import sys; from ragen_core.hookspecs import CORE_FAMILIES, CORE_TIMINGS, is_core_metric; "
            "assert is_core_metric('actor/x') and not is_core_metric('mine/x'); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "False"


def test_a_diagnostic_metric_in_a_family_the_run_logs_only_later_is_never_logged(tmp_path, capsys):
    """'val-env/success' from a diagnostic was logged on the steps before the first validation (and
    'val-env/mine' on every step): the run's families are its own from the start."""
    cfg = toy_run_config(tmp_path / "run", "diagnostics=[test-odd-return]", "diagnostics_config.test-odd-return.kind=late", "test_freq=2",
                         steps=2)
    with Trainer(cfg) as trainer:
        trainer.train()
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [row["odd/fine"] for row in rows] == [1.0, 1.0] and "val-env/success" in rows[1]  # the run's own, at its validation
    assert not [(row["step"], k) for row in rows for k, v in row.items() if v == 123.0]
    said = [line.split(" returned ")[1] for line in capsys.readouterr().err.splitlines() if "logs itself" in line]
    tail = " the run logs itself: not logged (name it in a family of the plugin's own, e.g. 'mine/...')"
    assert said == [f"{key!r} from ragen_on_rollout_end, {what}{tail}" for key, what in [
        ("val-env/success", "in 'val-env/', a metric family"), ("val-env/mine", "in 'val-env/', a metric family"),
        ("grad_norm/all/task", "in 'grad_norm/', a metric family"), ("early_stopped/mine", "in 'early_stopped/', a metric family"),
        ("timing_s/testing", "a metric")]]  # once each, from step 1 on


def test_every_metric_of_a_run_is_in_a_family_of_its_own_or_a_timing_it_names(tmp_path):
    """CORE_FAMILIES and CORE_TIMINGS hold every key a run logs (validation, gradient analysis, an
    early stop, a critic): a key the run adds later must be added there, or a plugin's could stand in for it."""
    from ragen_core.trainer.trainer import CORE_FAMILIES, CORE_TIMINGS

    cfg = toy_run_config(tmp_path / "run", "test_freq=1", "grad_analysis.every=1", "grad_analysis.log_prefilter=true", "algo=ppo",
                         "early_stop.low_val_success_patience=1", steps=1)
    with Trainer(cfg) as trainer:
        history = trainer.train()
    keys = {k for row in history for k in row if k != "step"}
    assert {"val-env/success", "grad_norm/all/task", "grad_norm_prefilter/all/task", "critic/vf_loss", "timing_s/testing"} <= keys
    assert [k for k in keys if not k.startswith(CORE_FAMILIES) and k not in CORE_TIMINGS] == []


@pytest.mark.parametrize("order", [("test-odd-return", "test-odd-twin"), ("test-odd-twin", "test-odd-return")])
def test_two_diagnostics_returning_one_metric_key_are_said_once_and_the_first_listed_is_logged(tmp_path, capsys, order):
    """The observer pluggy called last silently overwrote the other's value of the key."""
    first, second = order
    settings = [f"diagnostics_config.{name}.{key}" for name in order for key in ("kind=shared", f"value={len(name)}")]
    cfg = toy_run_config(tmp_path / "run", f"diagnostics=[{first},{second}]", *settings, steps=2)
    with Trainer(cfg) as trainer:
        history = trainer.train()
    assert [row["odd/shared"] for row in read_metrics(tmp_path / "run" / "metrics.jsonl")] == [float(len(first))] * 2
    said = [line for line in capsys.readouterr().err.splitlines() if "odd/shared" in line]
    assert said == [f"diagnostic {second!r} (<in-process>) returned 'odd/shared' from ragen_on_rollout_end, as diagnostic {first!r} "
                    "(<in-process>) does: not logged (only the first observer's value of a key is; name the two metrics apart)"]
    assert history[0]["odd/fine"] == 1.0


def test_a_diagnostic_metric_named_as_an_update_metric_is_not_logged_on_a_step_without_an_update(tmp_path, capsys):
    """On a step the filter left nothing to train, the row has no actor/pg_loss of the run's: a plugin's stood in
    its place (the clash was found only from the first step that updated)."""
    cfg = toy_run_config(tmp_path / "run", "diagnostics=[test-odd-return]", "diagnostics_config.test-odd-return.kind=update",
                         "filter=snr-topp", "filter_config.value=0", steps=1)
    with Trainer(cfg) as trainer:
        history = trainer.train()
    assert history[0]["odd/fine"] == 1.0 and not {"actor/pg_loss", "actor/lr", "critic/vf_loss"} & set(history[0])
    assert history[0]["rollout/empty_after_filter"] == 1.0  # the step had no update
    said = [line for line in capsys.readouterr().err.splitlines() if "logs itself" in line]
    assert len(said) == 3 and all(f"{key!r}" in line for key, line in zip(("actor/pg_loss", "actor/lr", "critic/vf_loss"), said))
