"""What a run folder says after a kill, a resume or a hand edit (findings of a walk through run folders):
rollouts files are written whole and a resume removes those of steps it recomputes, a resume says
which metrics rows it replaces, and ``--resume`` / ``ragen eval`` name what is true of the folder given."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ragen_core.cli.main import main
from ragen_core.testing.run_helpers import one_line_error, toy_run_config
from ragen_core.trainer.loggers import read_metrics
from ragen_core.trainer.trainer import Trainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _train(run_dir: Path, *overrides: str, steps: int = 2, resume: bool = False) -> list[dict]:
    with Trainer(toy_run_config(run_dir, *overrides, steps=steps), resume=resume) as trainer:
        return trainer.train()


def test_rollouts_are_written_whole_and_a_resume_removes_those_of_steps_it_recomputes(tmp_path, capsys, monkeypatch):
    """A step killed after its rollouts were saved left rollouts/step_N.jsonl with no metrics row
    and no checkpoint (and, killed mid-write, a truncated one: it was written in place)."""
    run_dir = tmp_path / "run"
    _train(run_dir, "save_rollouts=true", steps=2)
    rollouts = run_dir / "rollouts"
    assert sorted(p.name for p in rollouts.iterdir()) == ["step_1.jsonl", "step_2.jsonl"]  # no temp file left

    import os

    written: list[str] = []
    real_replace = os.replace

    def replace(src, dst):  # a rollouts file appears under its name in one rename, complete
        if Path(dst).parent == rollouts:
            written.append(Path(dst).name)
            assert len(Path(src).read_text(encoding="utf-8").splitlines()) == 2 * 2  # one line per episode
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    # what kills during steps 3 and 4 (checkpoints lost), and one during the write of step 4's file, leave behind
    shutil.copy(rollouts / "step_2.jsonl", rollouts / "step_3.jsonl")
    shutil.copy(rollouts / "step_2.jsonl", rollouts / "step_4.jsonl")
    (rollouts / "step_3.jsonl.tmp").write_text('{"torn": ')
    capsys.readouterr()
    _train(run_dir, "save_rollouts=false", steps=2, resume=True)  # nothing to train: the files are removed all the same
    out = capsys.readouterr().out.splitlines()
    # step_3's whole file stays: checkpoint step_2's weights sampled it ('ragen diagnose --checkpoint step_2' reads it; helper-86)
    assert sorted(p.name for p in rollouts.iterdir()) == ["step_1.jsonl", "step_2.jsonl", "step_3.jsonl"]
    assert [line for line in out if "removed" in line] == [
        "resume: removed rollouts/step_3.jsonl.tmp, step_4.jsonl (steps after checkpoints/step_2, which the run continues from)"]
    _train(run_dir, "save_rollouts=true", steps=3, resume=True)
    assert written == ["step_3.jsonl"]
    assert "removed rollouts" not in capsys.readouterr().out  # nothing to remove: no word


def test_a_resume_says_which_metrics_rows_it_replaces(tmp_path, capsys):
    """With save_freq=2, a run killed after step 3's row resumes from step_2 and recomputes step 3:
    its row was replaced without a word."""
    run_dir = tmp_path / "run"
    _train(run_dir, "save_freq=2", steps=3)
    metrics = run_dir / "metrics.jsonl"
    shutil.rmtree(run_dir / "checkpoints" / "step_3")  # killed after step 3's row, before its checkpoint
    capsys.readouterr()
    _train(run_dir, "save_freq=2", steps=3, resume=True)
    said = [line for line in capsys.readouterr().out.splitlines() if "metrics.jsonl" in line]
    assert said == ["resume: metrics.jsonl rows of steps 3..3 (after checkpoints/step_2) are replaced; "
                    "resuming from step_2 recomputes from step 3"]
    assert [r["step"] for r in read_metrics(metrics)] == [1, 2, 3]
    capsys.readouterr()
    _train(run_dir, "save_freq=2", steps=4, resume=True)  # every row has its checkpoint: nothing replaced, no word
    assert not [line for line in capsys.readouterr().out.splitlines() if "metrics.jsonl" in line]


def test_a_resume_says_why_it_falls_back_before_which_rows_it_replaces(tmp_path):
    """A damaged newest checkpoint: "rows of steps 2..2 (after checkpoints/step_1) are replaced" came
    before the line saying step_2 is damaged, which is why step_1 is the one resumed."""
    from ragen_core.trainer.checkpoint import resume_checkpoint

    run_dir = tmp_path / "run"
    _train(run_dir, steps=2)
    weights = run_dir / "checkpoints" / "step_2" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    said: list[str] = []
    assert resume_checkpoint(run_dir, log=said.append)[0] == 1
    assert len(said) == 2, said
    assert said[0].startswith("resume: checkpoint ") and "step_2: model.safetensors is damaged" in said[0]
    assert said[0].endswith("; resuming from step_1")
    assert said[1] == "resume: metrics.jsonl rows of steps 2..2 (after checkpoints/step_1) are replaced; resuming from step_1 recomputes from step 2"


def test_resume_of_a_checkpoint_folder_names_its_run_folder(tmp_path, capsys, monkeypatch):
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints" / "step_4" / "adapter").mkdir(parents=True)
    (run_dir / "config.yaml").write_text("env: bandit\n")
    for given in (run_dir / "checkpoints" / "step_4", run_dir / "checkpoints", run_dir / "checkpoints" / "step_4" / "adapter"):
        assert main(["run", "--resume", str(given)]) == 2
        err = capsys.readouterr().err
        assert one_line_error(err) == f"ConfigError: --resume: {given} is inside the run directory {run_dir}, not a run directory itself"
        assert f"hint: pass the run directory: ragen run --resume {run_dir} (it continues from its newest intact checkpoint)" in err
    monkeypatch.chdir(run_dir / "checkpoints")  # a relative path from inside checkpoints/ (helper-86's review)
    for given in ("step_4", "."):
        assert main(["run", "--resume", given]) == 2
        err = capsys.readouterr().err
        assert one_line_error(err) == f"ConfigError: --resume: {given} is inside the run directory {run_dir}, not a run directory itself"


@pytest.mark.parametrize("case", ["deleted", "save_freq=0", "killed-before-a-save"])
def test_eval_of_a_run_without_checkpoints_says_why(tmp_path, capsys, case):
    """A finished run whose checkpoints/ were deleted was said to have 'stopped before saving one'."""
    run_dir = tmp_path / "run"
    _train(run_dir, *(["save_freq=0"] if case == "save_freq=0" else []), steps=2)
    if case == "killed-before-a-save":  # save_freq=5, killed after step 2's row: no checkpoint ever
        config = run_dir / "config.yaml"
        config.write_text(config.read_text().replace("save_freq: 1", "save_freq: 5").replace("steps: 2", "steps: 6"))
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    capsys.readouterr()
    assert main(["eval", "--model", str(run_dir)]) == 2
    err = capsys.readouterr().err
    line = one_line_error(err)
    assert line == {
        "deleted": f"ConfigError: run directory {run_dir} has no checkpoint in checkpoints/, though it ran all its 2 steps "
                   "and a run saves its last step: they were deleted or moved",
        "save_freq=0": f"ConfigError: run directory {run_dir} has no checkpoint: it ran with save_freq=0, which saves one "
                       "only on Ctrl-C / SIGTERM",
        "killed-before-a-save": f"ConfigError: run directory {run_dir} has no checkpoint in checkpoints/, though metrics.jsonl "
                                "logs steps up to 2 of 6: it stopped before its first save (save_freq=5), or they were deleted",
    }[case]
    assert "stopped before saving one" not in err
    assert (f"hint: put its checkpoints back into {run_dir / 'checkpoints'}" in err) == (case != "save_freq=0")
    stopped = tmp_path / "stopped"  # no row at all: stopped before its first step ended
    stopped.mkdir()
    shutil.copy(run_dir / "config.yaml", stopped / "config.yaml")
    assert main(["eval", "--model", str(stopped)]) == 2
    assert one_line_error(capsys.readouterr().err) == f"ConfigError: run directory {stopped} has no checkpoint yet (it stopped before saving one)"

