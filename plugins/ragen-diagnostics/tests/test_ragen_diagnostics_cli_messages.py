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
    (run / "rollouts" / "step_1.jsonl").write_text("{}\n")
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
