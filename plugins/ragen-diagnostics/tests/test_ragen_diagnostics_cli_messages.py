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
