"""What ``ragen diagnose`` tells the user: skipped diagnostics, bad arguments, a file instead of a run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragen_core.cli.main import main
from ragen_core.testing.run_helpers import one_line_error


def _write_skipped(run: Path) -> None:
    """A run trained with ``diagnostics=[collapse]`` whose replies never held <think> reasoning."""
    run.mkdir(parents=True)
    rows = []
    for step in range(1, 6):
        row = {"step": step, "train/reward": 0.1 * step, "rollout/in_group_reward_std": 0.3}
        if step in (1, 5):
            row.update({"collapse/valid_thinking_rate": 0.0, "collapse/first_turn_num_total": 4.0,
                        "collapse/first_turn_num_valid": 0.0, "collapse/first_turn_valid_rate": 0.0,
                        "collapse/error": 0.0, "collapse/warning_template": 0.0,
                        "collapse/warning_low_entropy": 0.0, "collapse/skipped_no_reasoning": 1.0})
        rows.append(json.dumps(row))
    (run / "metrics.jsonl").write_text("\n".join(rows) + "\n")


def test_diagnostics_skipped_for_empty_reasoning_say_so_instead_of_turn_them_on(tmp_path, capsys):
    from ragen_diagnostics.config import CollapseConfig

    assert "z_source" in CollapseConfig.model_fields  # the key the note names
    run = tmp_path / "run"
    _write_skipped(run)
    assert main(["diagnose", str(run)]) == 0
    out = capsys.readouterr().out
    assert "diagnostics=[collapse]" not in out.replace("diagnostics=[collapse] diagnostics_config", "")
    assert "Turn them on" not in out
    assert "reasoning was empty" in out and "steps 1, 5" in out
    assert "diagnostics_config.collapse.z_source=response" in out
    page = (run / "diagnostics.html").read_text()
    assert "reasoning was empty" in page and "z_source=response" in page


# -- bad arguments: one line, non-zero exit, before any model loads ------------------------------


def _run_with_checkpoint_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    _write_skipped(run)
    (run / "checkpoints" / "step_1").mkdir(parents=True)  # never loaded: the arguments are refused first
    (run / "rollouts").mkdir()
    (run / "rollouts" / "step_2.jsonl").write_text("{}\n")  # sampled by step_1's weights
    return run


@pytest.mark.parametrize(("args", "needle"), [
    (["--num-samples", "0"], "--num-samples must be an integer >= 2 or 'all', got '0'"),
    (["--num-samples", "1"], "--num-samples must be an integer >= 2 or 'all', got '1'"),
    (["--num-samples", "-3"], "--num-samples must be an integer >= 2 or 'all', got '-3'"),
    (["--device", "foo"], "--device foo"),
    (["--device", "cuda:x"], "--device cuda:x"),
])
def test_bad_offline_arguments_are_one_line_errors(tmp_path, capsys, args, needle):
    run = _run_with_checkpoint_dir(tmp_path)
    assert main(["diagnose", str(run), "--checkpoint", "step_1", *args]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "ValidationError" not in err
    assert needle in one_line_error(err)


def test_a_cuda_device_on_a_machine_without_one_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    run = _run_with_checkpoint_dir(tmp_path)
    assert main(["diagnose", str(run), "--checkpoint", "step_1", "--device", "cuda"]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert "--device cuda" in line and "no cuda device" in line


def test_a_file_given_as_the_run_directory_is_called_a_file(tmp_path, capsys):
    run = tmp_path / "run"
    _write_skipped(run)
    assert main(["diagnose", str(run / "metrics.jsonl")]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert "is a file, not a run directory" in line and "does not exist" not in line
    assert main(["diagnose", str(tmp_path / "nope")]) == 2
    assert "does not exist" in one_line_error(capsys.readouterr().err)


def test_a_folder_that_is_no_run_is_not_told_to_train_with_the_diagnostic(tmp_path, capsys):
    """An empty or unrelated folder got the hint "train with the collapse diagnostic enabled"."""
    (tmp_path / "notes").mkdir()
    assert main(["diagnose", str(tmp_path / "notes")]) == 2
    err = capsys.readouterr().err
    assert one_line_error(err) == f"RagenError: {tmp_path / 'notes'} is not a run directory (no config.yaml, no metrics.jsonl)"
    assert "collapse diagnostic" not in err


def test_a_folder_for_rollouts_and_a_file_for_checkpoint_are_named_as_such(tmp_path, capsys):
    run = _run_with_checkpoint_dir(tmp_path)
    assert main(["diagnose", str(run), "--checkpoint", "step_1", "--rollouts", str(run / "rollouts")]) == 2
    err = capsys.readouterr().err
    assert one_line_error(err) == f"RagenError: rollouts {run / 'rollouts'} is a folder; --rollouts takes one step's file"
    assert f"e.g. --rollouts {run / 'rollouts' / 'step_2.jsonl'} (the latest)" in err
    assert main(["diagnose", str(run), "--checkpoint", str(run / "metrics.jsonl")]) == 2
    assert "is a file; a checkpoint is a folder" in one_line_error(capsys.readouterr().err)


# -- plots: whole-number step ticks --------------------------------------------------------------


def test_step_axes_have_integer_ticks(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt
    from ragen_diagnostics.report import build_report

    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": s, "rollout/in_group_reward_std": 0.5 / s, "rollout/filter_kept_ratio": 0.9,
             "collapse_trajectory_sample/mi_estimate": 0.4 / s, "collapse_trajectory_sample/conditional_entropy_est": 1.2}
            for s in (1, 2, 3)]  # three steps: matplotlib's default ticks would be 1.00, 1.25, 1.50, ...
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    figures = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: (figures.append(fig), real_close(fig)))
    build_report(run)
    assert len(figures) == 5  # regime plot, MI, entropy, reward variance, kept ratio
    step_axes = [f.axes[0] for f in figures[1:]] + [figures[0].axes[1]]  # curves' x axes, the regime plot's step colorbar
    for ax in step_axes[:-1]:
        lo, hi = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
    bar = step_axes[-1]
    lo, hi = bar.get_ylim()
    ticks = [t for t in bar.get_yticks() if lo <= t <= hi]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks


def test_offline_recomputation_reports_its_stages_on_stderr(tmp_path, capsys, monkeypatch):
    from ragen_diagnostics import offline

    def fake(checkpoint, rollouts, *, config, device, step, progress):
        for line in ("reading rollouts", "loading checkpoint", "scoring collapse_first_turn_sample", "scoring collapse_trajectory_sample"):
            progress(line)
        return {"collapse/error": 0.0}

    monkeypatch.setattr(offline, "diagnose_offline", fake)
    run = _run_with_checkpoint_dir(tmp_path)
    assert main(["diagnose", str(run), "--checkpoint", "step_1"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert [line.split("]")[0] for line in err] == [f"diagnose [{i}/5" for i in range(1, 6)], err
    assert "loading checkpoint" in err[1] and "report" in err[4]


def test_ragen_help_and_diagnose_help_describe_the_command_alike(capsys):
    """``ragen --help`` reads the distribution's summary (metadata only); ``ragen diagnose --help``
    the command's own text: the same words, not the collapse diagnostic's name in front."""
    from ragen_diagnostics.cli import HELP

    with pytest.raises(SystemExit):
        main(["--help"])
    listing = " ".join(capsys.readouterr().out.split())  # argparse wraps the column
    assert f"diagnose {HELP} (ragen-diagnostics " in listing
    with pytest.raises(SystemExit):
        main(["diagnose", "--help"])
    assert HELP in " ".join(capsys.readouterr().out.split())


def test_offline_options_without_an_offline_recompute_are_refused_not_ignored(tmp_path, capsys):
    """--num-samples 1 (even an invalid value) passed silently when nothing was recomputed."""
    run = _run_with_checkpoint_dir(tmp_path)
    assert main(["diagnose", str(run), "--num-samples", "1", "--z-source", "response"]) == 2
    err = capsys.readouterr().err
    assert one_line_error(err) == ("RagenError: --num-samples, --z-source only apply to an offline recompute, which --checkpoint or "
                                   "--rollouts asks for")
    assert f"hint: ragen diagnose {run} --checkpoint step_N --num-samples 1 --z-source response (it reads" in err  # pasteable
    assert main(["diagnose", str(run), "--device", "cuda"]) == 2
    assert one_line_error(capsys.readouterr().err).startswith("RagenError: --device only applies to an offline recompute")


def test_an_eval_export_given_as_rollouts_is_named_as_such(tmp_path, capsys):
    """`ragen eval --out` writes chat transcripts; --rollouts said "16 malformed lines" and "each line
    must be one Trajectory.to_dict() JSON object"."""
    from ragen_core.cli.evaluate import trajectory_record
    from ragen_core.rollout.types import Trajectory, Turn

    run = _run_with_checkpoint_dir(tmp_path)
    turn = Turn(prompt_ids=[1], response_ids=[2], response_text="<think>x</think><answer>a</answer>", reasoning="x", answer="a")
    traj = Trajectory(env="bandit", tag="Bandit", group_id=0, member=0, seed=3, env_id=0, system_prompt="sys", turns=[turn])
    exported = tmp_path / "traj.jsonl"
    exported.write_text(json.dumps(trajectory_record(0, traj)) + "\n", encoding="utf-8")
    assert main(["diagnose", str(run), "--checkpoint", "step_1", "--rollouts", str(exported)]) == 2
    err = capsys.readouterr().err
    assert one_line_error(err) == (f"RagenError: rollouts file {exported} is a 'ragen eval --out' export (chat messages per episode), "
                                   "not saved rollouts")
    assert "save_rollouts=true" in err
    (run / "rollouts" / "step_2.jsonl").write_text("{}\nnot json\n", encoding="utf-8")
    assert main(["diagnose", str(run), "--checkpoint", "step_1"]) == 2
    assert "holds no readable trajectory (1 not JSON, 1 JSON but not a trajectory)" in one_line_error(capsys.readouterr().err)


@pytest.mark.parametrize("value", [1, 0, "abc", 2.5, True])
def test_a_bad_num_samples_is_one_plain_line(value):
    """It named pydantic's union arms: num_samples.constrained-int: ...; num_samples.literal['all']: ..."""
    from ragen_core import registry
    from ragen_core.errors import PluginConfigError

    with pytest.raises(PluginConfigError) as info:
        registry.make_config("diagnostic", "collapse", {"num_samples": value}, where="diagnostics_config.collapse")
    line = str(info.value).splitlines()[0]
    assert line == f"invalid config: diagnostics_config.collapse.num_samples: is an integer >= 2 (pairs scored per family) or 'all' (got {value!r})"


@pytest.mark.parametrize(("value", "kept"), [(2, 2), ("7", 7), ("all", "all"), (64, 64)])
def test_good_num_samples_are_kept(value, kept):
    from ragen_core import registry

    assert registry.make_config("diagnostic", "collapse", {"num_samples": value}).num_samples == kept


def test_the_report_of_a_skipped_run_recomputed_offline_does_not_repeat_the_advice(tmp_path):
    """After 'ragen diagnose RUN --checkpoint step_3 --z-source response' worked, diagnostics.html still
    said the metrics were skipped and recommended that very command."""
    from ragen_diagnostics.report import OFFLINE_FILE, build_report

    run = tmp_path / "run"
    _write_skipped(run)
    row = {"step": 3, "collapse/error": 0.0, "collapse/skipped_no_reasoning": 0.0,
           "collapse_first_turn_sample/conditional_entropy_est": 0.05, "collapse_first_turn_sample/mi_estimate": 0.68,
           "collapse_trajectory_sample/conditional_entropy_est": 0.06, "collapse_trajectory_sample/mi_estimate": 0.66}
    (run / OFFLINE_FILE).write_text(json.dumps(row) + "\n", encoding="utf-8")
    build_report(run)
    page = (run / "diagnostics.html").read_text()
    assert "collapse metrics skipped during training</b> at steps 1, 5" in page
    assert "the offline recomputation below measured steps 3" in page
    assert "ragen diagnose RUN_DIR --checkpoint step_N --z-source response" not in page


def test_an_offline_attempt_that_skipped_is_not_called_a_training_skip(tmp_path):
    """A run that measured MI during training, then an offline recompute without --z-source response
    that found no reasoning: the page said "collapse metrics skipped during training at steps 4"."""
    from ragen_diagnostics.report import OFFLINE_FILE, build_report

    run = tmp_path / "run"
    run.mkdir()
    measured = {"collapse/error": 0.0, "collapse/skipped_no_reasoning": 0.0, "collapse_first_turn_sample/mi_estimate": 0.61,
                "collapse_first_turn_sample/conditional_entropy_est": 0.2, "collapse_trajectory_sample/mi_estimate": 0.6,
                "collapse_trajectory_sample/conditional_entropy_est": 0.2}
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, **measured}) + "\n" for s in (1, 2, 3, 4)), encoding="utf-8")
    (run / OFFLINE_FILE).write_text(json.dumps({"step": 4, "collapse/error": 0.0, "collapse/skipped_no_reasoning": 1.0}) + "\n",
                                    encoding="utf-8")
    build_report(run)
    page = (run / "diagnostics.html").read_text()
    assert "skipped during training" not in page and "collapse metrics skipped</b>" not in page
    assert "offline recomputation skipped</b> at steps 4" in page


def test_a_run_whose_mi_was_undefined_is_not_told_to_turn_the_diagnostic_on(tmp_path, capsys):
    """One group (rollout.env_groups=1): the diagnostic logged mi_defined=0 with num_columns=1, and
    diagnose advised "Turn them on when training: ragen run ... diagnostics=[collapse]"."""
    run = tmp_path / "run"
    run.mkdir()
    row = {"collapse/error": 0.0, "collapse/skipped_no_reasoning": 0.0, "collapse_first_turn_sample/mi_defined": 0.0,
           "collapse_first_turn_sample/num_columns": 1.0, "collapse_trajectory_sample/mi_defined": 0.0}
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, **row}) + "\n" for s in (1, 2)), encoding="utf-8")
    assert main(["diagnose", str(run)]) == 0
    out = capsys.readouterr().out
    assert "MI needs at least 2 prompt columns" in out and "rollout.env_groups of 2 or more" in out
    assert "Turn them on" not in out


def test_a_read_only_run_folder_is_one_line(tmp_path, capsys, monkeypatch):
    from ragen_diagnostics import report

    run = tmp_path / "run"
    _write_skipped(run)

    def read_only(run_dir, **kwargs):
        raise PermissionError(13, "Permission denied", str(run_dir / "plots"))

    monkeypatch.setattr(report, "build_report", read_only)
    assert main(["diagnose", str(run)]) == 2
    assert one_line_error(capsys.readouterr().err) == f"RagenError: cannot write the report into {run} (Permission denied: {run / 'plots'})"


@pytest.mark.parametrize("blocker", ["plots-file", "html-folder", "png-folder"])
def test_something_in_the_way_of_the_report_is_one_line(tmp_path, capsys, blocker):
    """A file named plots, a folder named diagnostics.html or filter_kept.png: tracebacks before (helper-62's walk)."""
    run = tmp_path / "run"
    _write_skipped(run)
    if blocker == "plots-file":
        (run / "plots").write_text("x")
    elif blocker == "html-folder":
        (run / "diagnostics.html").mkdir()
    else:
        (run / "plots" / "reward_variance.png").mkdir(parents=True)
    assert main(["diagnose", str(run)]) == 2
    assert one_line_error(capsys.readouterr().err).startswith(f"RagenError: cannot write the report into {run} (")


def test_a_dollar_sign_in_the_run_name_draws_the_report(tmp_path, capsys):
    run = tmp_path / "tr_$^$"
    _write_skipped(run)
    assert main(["diagnose", str(run)]) == 0
    assert (run / "plots" / "reward_variance.png").is_file() and (run / "diagnostics.html").is_file()


def test_offline_results_that_cannot_be_saved_are_printed_first_and_named(tmp_path, capsys, monkeypatch):
    """The scoring's result was lost when the save failed (a traceback after minutes of work)."""
    from ragen_diagnostics import offline

    monkeypatch.setattr(offline, "diagnose_offline", lambda *a, **k: {"collapse_first_turn_sample/mi_estimate": 0.25, "collapse/error": 0.0})

    def full_disk(*_a, **_k):
        raise OSError(28, "No space left on device", "diagnostics_offline.jsonl")

    monkeypatch.setattr(offline, "save_offline_metrics", full_disk)
    run = _run_with_checkpoint_dir(tmp_path)
    assert main(["diagnose", str(run), "--checkpoint", "step_1"]) == 2
    out, err = capsys.readouterr()
    assert '"collapse_first_turn_sample/mi_estimate": 0.25' in out
    assert one_line_error(err) == ("RagenError: the offline metrics printed above were not saved: No space left on device: "
                                   "diagnostics_offline.jsonl")


def test_an_unwritable_run_folder_is_refused_before_the_offline_scoring(tmp_path, capsys, monkeypatch):
    from ragen_diagnostics import offline

    scored = []
    monkeypatch.setattr(offline, "diagnose_offline", lambda *a, **k: scored.append(1) or {})
    run = _run_with_checkpoint_dir(tmp_path)

    def refuse(folder, name="ragen"):
        raise OSError(30, "Read-only file system", str(folder / f".{name}.probe"))

    monkeypatch.setattr("ragen_core.cli.probe_folder", refuse)
    assert main(["diagnose", str(run), "--checkpoint", "step_1"]) == 2
    assert scored == []
    assert one_line_error(capsys.readouterr().err) == (f"RagenError: cannot write into {run} (Read-only file system): the offline "
                                                      "metrics and the report go there")


@pytest.mark.parametrize(("rollouts", "step", "note"), [
    ("mine.jsonl", 2, "note: mine.jsonl names no step (a run saves rollouts/step_N.jsonl): its metrics are filed as step 2, the step "
                      "after checkpoint step_1"),
    ("rollouts/step_5.jsonl", 5, "note: step 5's rollouts scored with step_1's weights (the run's own scoring of them used step_4's)"),
])
def test_offline_results_name_their_weights_and_rollouts(tmp_path, capsys, monkeypatch, rollouts, step, note):
    """A file not named step_N was filed under a guessed step, and the report never said which weights
    scored which rollouts (helper-62's walk)."""
    from ragen_diagnostics import offline

    monkeypatch.setattr(offline, "diagnose_offline",
                        lambda *a, **k: {"collapse_first_turn_sample/mi_estimate": 0.25, "collapse_first_turn_sample/conditional_entropy_est": 1.0,
                                         "collapse/error": 0.0})
    run = _run_with_checkpoint_dir(tmp_path)
    source = (run / rollouts) if rollouts.startswith("rollouts/") else (tmp_path / rollouts)
    source.write_text("{}\n")
    assert main(["diagnose", str(run), "--checkpoint", "step_1", "--rollouts", str(source)]) == 0
    err = capsys.readouterr().err
    assert note in err, err
    (row,) = [json.loads(line) for line in (run / "diagnostics_offline.jsonl").read_text().splitlines()]
    assert (row["step"], row["checkpoint"], row["rollouts"]) == (step, str(run / "checkpoints" / "step_1"), str(source))
    assert row["step_from"] == ("checkpoint" if rollouts == "mine.jsonl" else "rollouts")
    page = (run / "diagnostics.html").read_text()
    assert "Offline recomputation: sources" in page and str(source) in page
    assert ("the rollouts file names no step" in page) is (rollouts == "mine.jsonl")
