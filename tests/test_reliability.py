"""Reliability suite: a run survives kill -9, a damaged newest checkpoint and a full disk (issue 13).

Each test trains the tiny model for a few steps on CPU with the warm start off. The comparisons
are exact: on one CPU thread the tiny model's training is deterministic, so a resumed run must
reproduce every logged value of an uninterrupted one bit for bit (wall-clock timings aside).
The kill -9 test runs seven real ``ragen run`` processes (one to two minutes in all); its kill
points are random, drawn from a seed that a failure message names (rerun it with
``RAGEN_RELIABILITY_SEED=<seed>``).
"""

from __future__ import annotations

import errno
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ragen_core.cli.main import main
from ragen_core.testing.toy_env import TOY_ENV_NAME, register_toy_env
from ragen_core.trainer import checkpoint as ck
from ragen_core.trainer.loggers import read_metrics

pytestmark = pytest.mark.usefixtures("one_torch_thread")

STEPS = 4
SETTINGS = [
    "--env", TOY_ENV_NAME, "--steps", str(STEPS), "--no-progress", "--algo", "ppo",  # a critic and two optimisers to restore
    "env_config.length=3", "env_config.max_turns=2", "env_config.max_actions_per_turn=1",
    "rollout.env_groups=2", "rollout.group_size=2", "rollout.max_model_len=512",
    "sampling.train.max_new_tokens=10", "sampling.val.max_new_tokens=10",
    "optim.mini_batch_size=2", "optim.micro_batch_size=2", "optim.lr=1e-3",
    "val_groups=2", "test_freq=2", "save_freq=1", "warm_start.enabled=false",
    "device=cpu",  # exact replay is a CPU property: CUDA's default kernels are not bit-deterministic
]

# `ragen run` in a child process, with the in-repo toy env registered first (core tests use no env package)
CHILD = ("import sys; from ragen_core.testing.toy_env import register_toy_env; register_toy_env(); "
         "from ragen_core.cli.main import main; sys.exit(main(sys.argv[1:]))")


def _run(run_dir: Path, *extra: str) -> int:
    """``ragen run`` in this process."""
    register_toy_env()
    return main(["run", "--run-dir", str(run_dir), *SETTINGS, *extra])


def _child_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD, "run", *args], env=_child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(proc: subprocess.Popen, what: str) -> str:
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, f"{what} failed:\n{out[-3000:]}"
    return out


def _without_timings(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if not k.startswith("timing_s/")} for row in rows]


def assert_exactly_equal(reference: Path, resumed: Path, note: str = "") -> None:
    a = _without_timings(read_metrics(reference / "metrics.jsonl"))
    b = _without_timings(read_metrics(resumed / "metrics.jsonl"))
    assert [r["step"] for r in b] == list(range(1, STEPS + 1)), note
    for ra, rb in zip(a, b):
        assert ra == rb, f"{note} step {ra['step']}: " + ", ".join(k for k in ra if ra.get(k) != rb.get(k))


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _wait_for(condition, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and proc.poll() is None:
        assert time.monotonic() < deadline, "the run made no progress"
        time.sleep(0.002)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, one_torch_thread) -> Path:
    """The uninterrupted run every test compares with (trained once, in this process)."""
    run_dir = tmp_path_factory.mktemp("reliability") / "reference"
    assert _run(run_dir) == 0
    return run_dir


@pytest.mark.slow
def test_kill_9_at_random_points_then_resume_equals_an_uninterrupted_run(tmp_path, reference):
    seed = int(os.environ.get("RAGEN_RELIABILITY_SEED", time.time_ns() % 10_000))
    rng = np.random.default_rng(seed)
    step_s = float(np.median([r["timing_s/step"] for r in read_metrics(reference / "metrics.jsonl")]))
    # trial 0 kills while a checkpoint is being written; the others after a random number of
    # logged steps (>= 2, so step 1's checkpoint exists) plus a random part of one step's time
    trials = [("mid-save", 0, 0.0)] + [("random", int(rng.integers(2, STEPS)), float(rng.uniform(0.0, step_s))) for _ in range(2)]
    for i, (kind, logged, delay) in enumerate(trials):
        note = f"trial {i} ({kind}, after {logged} rows + {delay:.2f} s; RAGEN_RELIABILITY_SEED={seed})"
        run_dir = tmp_path / f"trial{i}"
        proc = _start("--run-dir", str(run_dir), *SETTINGS)
        if kind == "mid-save":
            step_1 = run_dir / "checkpoints" / "step_1"
            _wait_for(lambda: step_1.is_dir() and any(p.name.endswith(".tmp") for p in step_1.parent.iterdir()), proc)  # noqa: B023 - called in this iteration
        else:
            _wait_for(lambda: _lines(run_dir / "metrics.jsonl") >= logged, proc)  # noqa: B023 - called in this iteration
            time.sleep(delay)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGKILL, f"{note}: the run ended before the kill:\n{out[-2000:]}"
        _finish(_start("--resume", str(run_dir)), f"the resume of {note}")
        assert_exactly_equal(reference, run_dir, note)
        assert [s for s, _ in ck.list_checkpoints(run_dir)] == [STEPS - 1, STEPS], note
        assert all(ck.verify_checkpoint(p) for _, p in ck.list_checkpoints(run_dir)), note


def test_damaged_newest_checkpoint_resume_falls_back_and_matches_an_uninterrupted_run(tmp_path, capsys, reference):
    run_dir = tmp_path / "damaged"
    assert _run(run_dir) == 0
    weights = run_dir / "checkpoints" / f"step_{STEPS}" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # e.g. a copy of the run directory that was cut short
    capsys.readouterr()
    assert main(["run", "--resume", str(run_dir)]) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("resume:")]
    assert len(said) == 3 and "model.safetensors" in said[0] and f"step_{STEPS - 1}" in said[0]  # why it falls back, first
    assert said[1] == (f"resume: metrics.jsonl rows of steps {STEPS}..{STEPS} (after checkpoints/step_{STEPS - 1}) are replaced; "
                       f"resuming from step_{STEPS - 1} recomputes from step {STEPS}")
    assert said[2] == f"resume: from checkpoints/step_{STEPS - 1}, training steps {STEPS}..{STEPS}"
    assert_exactly_equal(reference, run_dir)
    assert ck.verify_checkpoint(run_dir / "checkpoints" / f"step_{STEPS}")  # written again, intact


def _disk_full_at_step(step: int, monkeypatch) -> None:
    """The model writer fails with ENOSPC when writing checkpoint ``step`` (tests run as root: chmod stops nothing)."""
    real = ck._save_model_folder

    def writer(folder: Path, model, tokenizer, *rest) -> None:
        if folder.name == f"step_{step}.tmp":
            (folder / "model.safetensors").write_bytes(b"\0" * 4096)  # part of it made it to disk
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(folder, model, tokenizer, *rest)

    monkeypatch.setattr(ck, "_save_model_folder", writer)


def _path_blocked_at_step(step: int, run_dir: Path, monkeypatch) -> None:
    """The checkpoint's temporary folder cannot be created: a file already has its name."""
    blocked = run_dir / "checkpoints" / f"step_{step}.tmp"
    real = ck._save_model_folder

    def writer(folder: Path, model, tokenizer, *rest) -> None:
        real(folder, model, tokenizer, *rest)
        if folder.name == f"step_{step - 1}.tmp":  # put the obstacle in place once the previous one is written
            blocked.write_text("not a folder")

    monkeypatch.setattr(ck, "_save_model_folder", writer)


@pytest.mark.parametrize("failure", ["disk full", "path blocked"])
def test_unwritable_checkpoint_stops_with_one_line_and_keeps_the_previous_one(tmp_path, capsys, monkeypatch, failure, reference):
    run_dir = tmp_path / "run"
    if failure == "disk full":
        _disk_full_at_step(3, monkeypatch)
    else:
        _path_blocked_at_step(3, run_dir, monkeypatch)
    capsys.readouterr()
    assert _run(run_dir) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    errors = [i for i, line in enumerate(lines) if re.match(r"[A-Z]\w*Error: ", line)]
    assert len(errors) == 1 and all(line.startswith("hint: ") for line in lines[errors[0] + 1:]), lines
    assert lines[errors[0]].startswith("CheckpointError: could not write checkpoint") and "step_3" in lines[errors[0]]
    assert [s for s, _ in ck.list_checkpoints(run_dir)] == [1, 2]
    assert all(ck.verify_checkpoint(p) for _, p in ck.list_checkpoints(run_dir))
    if failure == "disk full":
        assert not (run_dir / "checkpoints" / "step_3.tmp").exists()  # the partial write was removed
    else:
        (run_dir / "checkpoints" / "step_3.tmp").unlink()  # the user clears the obstacle
    monkeypatch.undo()
    assert main(["run", "--resume", str(run_dir)]) == 0
    assert_exactly_equal(reference, run_dir)


def test_a_step_failing_after_its_rollout_saves_the_step_before_and_a_resume_replays_it_exactly(tmp_path, capsys, monkeypatch, reference):
    """The rescue checkpoint (also written for an aborted or stalled step) holds the seed counter and
    random generators of when the failed step began: a resume then matches an uninterrupted run."""
    from ragen_core.trainer import trainer as trainer_mod

    real = trainer_mod.report_pool_failures

    def fail_at_step_3(step, trajs, *rest):
        if step == 3 and not rest:  # the training rollout of step 3: after it used its seeds, before any weight changes
            raise RuntimeError("the env pool broke")
        return real(step, trajs, *rest)

    run_dir = tmp_path / "failed"
    monkeypatch.setattr(trainer_mod, "report_pool_failures", fail_at_step_3)
    with pytest.raises(RuntimeError, match="the env pool broke"):
        _run(run_dir, "save_freq=3")  # steps 1-2 not checkpointed by save_freq
    assert "step 3 failed: saved checkpoints/step_2, the last finished step" in capsys.readouterr().err
    monkeypatch.setattr(trainer_mod, "report_pool_failures", real)
    assert main(["run", "--resume", str(run_dir), "save_freq=1"]) == 0
    assert_exactly_equal(reference, run_dir)


def test_a_damaged_checkpoint_does_not_count_towards_the_kept_ones(tmp_path):
    """A damaged newer checkpoint must not push out the intact one a resume would fall back to."""
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=1, n_embd=8, vocab_size=16, n_positions=8))
    for step in (1, 2):
        ck.save_checkpoint(tmp_path, step, model, None, {"optimizer": {}}, keep=2)
    weights = tmp_path / "checkpoints" / "step_2" / "model.safetensors"
    weights.write_bytes(weights.read_bytes() + b"garbage")  # step_2 is damaged now
    ck.save_checkpoint(tmp_path, 3, model, None, {"optimizer": {}}, keep=2)
    assert [s for s, _ in ck.list_checkpoints(tmp_path)] == [1, 2, 3]  # step_1, the intact fallback, stays
    ck.save_checkpoint(tmp_path, 4, model, None, {"optimizer": {}}, keep=2)
    assert [s for s, _ in ck.list_checkpoints(tmp_path)] == [3, 4]  # two intact ones newer than both
    ck.save_checkpoint(tmp_path, 5, model, None, {"optimizer": {}}, keep=3)
    assert [s for s, _ in ck.list_checkpoints(tmp_path)] == [3, 4, 5]
