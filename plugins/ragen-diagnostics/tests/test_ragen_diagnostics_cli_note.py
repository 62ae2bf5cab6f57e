"""``ragen diagnose`` on a run trained without the collapse diagnostic says how to get its metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragen_core.cli.main import main


def _write(run: Path, collapse: bool) -> None:
    run.mkdir(parents=True)
    rows = []
    for step in range(1, 4):
        row = {"step": step, "train/reward": step / 3, "rollout/in_group_reward_std": 0.5 / step}
        if collapse:
            row.update({"collapse_trajectory_sample/mi_estimate": 0.4 / step, "collapse_trajectory_sample/conditional_entropy_est": 1.2,
                        "collapse_trajectory_sample/retrieval_accuracy": 0.5, "collapse_trajectory_sample/retrieval_chance_level": 0.125})
        rows.append(json.dumps(row))
    (run / "metrics.jsonl").write_text("\n".join(rows) + "\n")


@pytest.mark.parametrize("collapse", [False, True])
def test_the_note_names_the_setting_only_when_collapse_metrics_are_missing(tmp_path, capsys, collapse):
    _write(tmp_path / "run", collapse)
    assert main(["diagnose", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert ("diagnostics=[collapse]" in out) is (not collapse)
    assert ("has no collapse metrics" in out) is (not collapse)
    assert (tmp_path / "run" / "diagnostics.html").is_file()
