"""One run per directory, and ``--resume`` only with the run's own config (issue 13, items 2, 3, 6).

* A fresh run refuses a non-empty run directory unless told to overwrite it.
* Default directory names are unique, and the directory is created atomically.
* An empty or unreadable ``config.yaml`` stops ``--resume`` with a one-line error.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragen_core.cli.main import main
from ragen_core.errors import ConfigError
from ragen_core.testing.run_helpers import TOY_RUN, one_line_error, toy_run_config
from ragen_core.testing.toy_env import register_toy_env
from ragen_core.trainer.config import RunConfig
from ragen_core.trainer.loggers import read_metrics
from ragen_core.trainer.run_dir import record_resume_changes
from ragen_core.trainer.trainer import Trainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

def make_config(tmp_path: Path | None, *overrides: str, name: str = "run", steps: int = 2) -> RunConfig:
    return toy_run_config(tmp_path / name if tmp_path is not None else None, *overrides, steps=steps)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _run_cli(run_dir: Path, *extra: str) -> int:
    return main(["run", "--env", register_toy_env(), "--run-dir", str(run_dir), "--no-progress", *TOY_RUN, *extra])


# ----------------------------------------------------------------------------- item 2: one run per directory
def test_fresh_run_refuses_a_directory_that_holds_a_run(tmp_path, capsys):
    cfg = make_config(tmp_path, steps=2)
    Trainer(cfg).train()
    before = _snapshot(Path(cfg.run_dir))
    with pytest.raises(ConfigError, match="--resume") as info:
        Trainer(cfg).train()
    assert "--overwrite" in str(info.value)
    assert _snapshot(Path(cfg.run_dir)) == before  # metrics, config.yaml and checkpoints untouched
    assert _run_cli(Path(cfg.run_dir), "--steps", "1") == 2
    line = one_line_error(capsys.readouterr().err)
    assert line.startswith("ConfigError:") and str(cfg.run_dir) in line
    assert _snapshot(Path(cfg.run_dir)) == before


def test_fresh_run_refuses_a_directory_with_other_files(tmp_path):
    cfg = make_config(tmp_path, steps=1)
    Path(cfg.run_dir).mkdir()
    (Path(cfg.run_dir) / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not empty"):
        Trainer(cfg).setup()


def test_fresh_run_accepts_an_empty_directory(tmp_path):
    cfg = make_config(tmp_path, steps=1)
    Path(cfg.run_dir).mkdir()
    Trainer(cfg).train()
    assert [r["step"] for r in read_metrics(Path(cfg.run_dir) / "metrics.jsonl")] == [1]


def test_overwrite_replaces_the_run_and_keeps_foreign_files(tmp_path, capsys):
    cfg = make_config(tmp_path, steps=2)
    Trainer(cfg).train()
    run_dir = Path(cfg.run_dir)
    (run_dir / "notes.txt").write_text("mine")
    capsys.readouterr()
    Trainer(cfg.model_copy(update={"steps": 1}), overwrite=True).train()
    assert [r["step"] for r in read_metrics(run_dir / "metrics.jsonl")] == [1]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_1"]
    assert (run_dir / "notes.txt").read_text() == "mine"
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("overwrite:")]
    assert len(said) == 1 and "metrics.jsonl" in said[0] and "checkpoints" in said[0] and "notes.txt" in said[0]


def test_cli_overwrite_flag(tmp_path, capsys):
    run_dir = tmp_path / "cli"
    assert _run_cli(run_dir, "--steps", "1") == 0
    assert _run_cli(run_dir, "--steps", "1", "--overwrite") == 0
    assert [r["step"] for r in read_metrics(run_dir / "metrics.jsonl")] == [1]
    capsys.readouterr()
    assert main(["run", "--resume", str(run_dir), "--overwrite"]) == 2
    assert "--overwrite" in one_line_error(capsys.readouterr().err)


# ----------------------------------------------------------------------------- item 3: unique default names
def test_two_runs_started_in_the_same_second_get_their_own_directories(tmp_path, monkeypatch):
    import time

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(time, "strftime", lambda fmt, *a: "20250101-120000")
    first, second = Trainer(make_config(None, steps=1)), Trainer(make_config(None, steps=1))
    assert first.run_dir != second.run_dir
    assert first.run_dir.parent == second.run_dir.parent == Path("runs")
    assert not Path("runs").exists()  # a Trainer built and dropped leaves nothing (it left an empty runs/<name>)
    first.setup()
    try:
        assert first.run_dir.is_dir() and (first.run_dir / "config.yaml").is_file()
    finally:
        first.close()
    assert not second.run_dir.exists()
    assert "20250101-120000" in first.run_dir.name


def test_a_default_folder_taken_between_construction_and_set_up_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    trainer = Trainer(make_config(None, steps=1))
    trainer.run_dir.mkdir(parents=True)  # another run took the name meanwhile (its suffix is random: rare)
    (trainer.run_dir / "metrics.jsonl").write_text("{}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^run directory runs/.+ was created by another run after this Trainer chose it"):
        trainer.setup()
    assert (trainer.run_dir / "metrics.jsonl").read_text(encoding="utf-8") == "{}\n"  # the other run's folder is left alone


def test_default_directory_creation_retries_a_taken_name(tmp_path, monkeypatch):
    from ragen_core.trainer import run_dir as rd

    monkeypatch.chdir(tmp_path)
    suffixes = iter(["aaaa", "aaaa", "bbbb"])
    monkeypatch.setattr(rd, "_suffix", lambda: next(suffixes))
    cfg = make_config(None, steps=1)
    a = rd.default_run_dir(cfg)
    a.mkdir(parents=True)
    b = rd.default_run_dir(cfg)
    assert a.name.endswith("-aaaa") and b.name.endswith("-bbbb")


def test_a_default_folder_name_has_no_colon_for_a_chosen_duplicate(tmp_path, monkeypatch):
    """``--algo dist:name`` picks one of two distributions' plugins; the folder name keeps only the name."""
    from ragen_core.trainer import run_dir as rd

    monkeypatch.chdir(tmp_path)
    cfg = make_config(None, steps=1).model_copy(update={"algo": "ragen-algo-grpo:grpo"})
    path = rd.default_run_dir(cfg)
    assert ":" not in path.name and path.name.startswith(f"{cfg.env}-grpo-")


# ----------------------------------------------------------------------------- item 6: config.yaml on resume
@pytest.mark.parametrize("content", [b"", b"\n# nothing\n", b"\xff\xfe\x00garbage", b"- a list\n"])
def test_resume_refuses_an_empty_or_unreadable_config_yaml(tmp_path, capsys, content):
    cfg = make_config(tmp_path, steps=1)
    Trainer(cfg).train()
    config_yaml = Path(cfg.run_dir) / "config.yaml"
    config_yaml.write_bytes(content)
    before = _snapshot(Path(cfg.run_dir))
    capsys.readouterr()
    assert main(["run", "--resume", cfg.run_dir, "steps=2"]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert line.startswith("ConfigError:") and "config.yaml" in line
    assert _snapshot(Path(cfg.run_dir)) == before


@pytest.mark.parametrize(("bad", "said"), [
    (("--filter", "snr-topp", "filter_config.loss_scaling=linear", "optim.filter_loss_scaling=linear"), "scaled twice"),
    (("rollout.extra.foo=1",), "rollout.extra.foo: unknown RolloutConfig field"),
    (("rollout.extra.max_context_turns=abc",), "rollout.extra.max_context_turns"),
    (("device=cuda:7",), "device=cuda:7"),  # no such device here (none at all in CI)
])
def test_overwrite_keeps_the_old_run_when_the_new_config_is_refused(tmp_path, capsys, bad, said):
    """--overwrite removed the run first; the new run then failed on a setting checked only later
    (and --print-config had accepted it): nothing was left of either run."""
    cfg = make_config(tmp_path, steps=1)
    Trainer(cfg).train()
    before = _snapshot(Path(cfg.run_dir))
    capsys.readouterr()
    assert _run_cli(Path(cfg.run_dir), "--steps", "1", "--overwrite", *bad) == 2
    assert said in one_line_error(capsys.readouterr().err)
    assert _snapshot(Path(cfg.run_dir)) == before
    if not bad[0].startswith("device"):  # --print-config checks settings, not this machine's devices
        assert main(["run", "--env", register_toy_env(), "--print-config", *bad]) == 2
        assert said in one_line_error(capsys.readouterr().err)


def test_a_finished_run_holds_only_entries_that_overwrite_knows(tmp_path):
    """``overwrite`` removes only what a run writes: every entry of a finished run must be in that list."""
    from ragen_core.trainer.run_dir import RUN_ENTRIES

    cfg = make_config(tmp_path, "save_rollouts=true", "test_freq=1", steps=1)
    Trainer(cfg).train()
    assert {p.name for p in Path(cfg.run_dir).iterdir()} <= set(RUN_ENTRIES)


# ----------------------------------------------------------------------------- resume keeps the run's experiment
def _resume_cli(run_dir: Path, *extra: str) -> int:
    return main(["run", "--resume", str(run_dir), "--no-progress", *extra])


@pytest.mark.parametrize(("flag", "key"), [("--algo=ppo", "algo"), ("--model=tiny-qwen-tok", "model"), ("--preset=Long", "preset"),
                                          # the checkpoint's seed schedule and RNGs won (the new seed was only recorded)
                                          ("seed=777", "seed"), ("seed_val=999", "seed_val"),
                                          ("optim.peft.rank=4", "optim.peft")])  # LoRA on: a traceback from the optimiser's state
def test_resume_refuses_to_change_what_the_run_trains(tmp_path, capsys, flag, key):
    cfg = make_config(tmp_path, steps=1)
    Trainer(cfg).train()
    before = _snapshot(Path(cfg.run_dir))
    capsys.readouterr()
    assert _resume_cli(Path(cfg.run_dir), "--steps", "2", flag) == 2
    line = one_line_error(capsys.readouterr().err)
    assert line.startswith((f"ConfigError: --resume: this run trains {key} ", f"ConfigError: --resume: this run trains no {key};"))
    assert "mix two experiments" in line
    assert _snapshot(Path(cfg.run_dir)) == before  # nothing written, the checkpoint untouched


def test_resume_refuses_another_run_dir(tmp_path, capsys):
    cfg = make_config(tmp_path, steps=1)
    Trainer(cfg).train()
    capsys.readouterr()
    other = tmp_path / "fork"
    for extra in (["--run-dir", str(other)], [f"run_dir={other}"]):
        assert _resume_cli(Path(cfg.run_dir), "--steps", "2", *extra) == 2
        line = one_line_error(capsys.readouterr().err)
        assert line.startswith(f"ConfigError: --resume {cfg.run_dir} continues that run in its own folder, so ") and "would be ignored" in line
    assert not other.exists() and [r["step"] for r in read_metrics(Path(cfg.run_dir) / "metrics.jsonl")] == [1]
    assert _resume_cli(Path(cfg.run_dir), "--steps", "2", "--run-dir", cfg.run_dir) == 0  # the same folder: fine


def test_resume_refuses_another_env(tmp_path, capsys):
    cfg = make_config(tmp_path, steps=1)
    Trainer(cfg).train()
    capsys.readouterr()
    assert _resume_cli(Path(cfg.run_dir), "--steps", "2", "--env", "bandit") == 2
    line = one_line_error(capsys.readouterr().err)
    assert line.startswith(f"ConfigError: --resume: this run trains env {cfg.env!r}; continuing it with env 'bandit'")


def test_resume_names_the_checkpoint_and_every_changed_setting(tmp_path, capsys):
    cfg = make_config(tmp_path, steps=1)
    Trainer(cfg).train()
    capsys.readouterr()
    assert _resume_cli(Path(cfg.run_dir), "--steps", "2", f"optim.lr={cfg.optim.lr / 2}") == 0
    out = capsys.readouterr().out.splitlines()
    assert "resume: from checkpoints/step_1, training steps 2..2" in out
    assert (f"resume: settings changed from the run's config.yaml from step 2 on: optim.lr {cfg.optim.lr!r} -> {cfg.optim.lr / 2!r} "
            "(recorded in config_changes.jsonl)") in out
    assert [r["step"] for r in read_metrics(Path(cfg.run_dir) / "metrics.jsonl")] == [1, 2]
    rows = [json.loads(line) for line in (Path(cfg.run_dir) / "config_changes.jsonl").read_text().splitlines()]
    assert [(r["from_step"], r["changed"]) for r in rows] == [(2, {"optim.lr": [cfg.optim.lr, cfg.optim.lr / 2]})]


def test_resume_that_changes_the_prompts_text_says_the_policy_saw_other_prompts(tmp_path, capsys):
    """Turning rollout.enforce_env_max_tokens on at a resume changed every prompt's stated budget and
    success fell from 0.25 to 0.03, with only the change record to tell."""
    cfg = make_config(tmp_path, steps=1)
    Trainer(cfg).train()
    capsys.readouterr()
    assert _resume_cli(Path(cfg.run_dir), "--steps", "2", "rollout.enforce_env_max_tokens=true", "compat.prompt_merge_quirk=true") == 0
    out = capsys.readouterr().out.splitlines()
    said = [line for line in out if "the policy was trained on other prompts" in line]
    assert len(said) == 1 and said[0].startswith("resume: rollout.enforce_env_max_tokens, compat.prompt_merge_quirk change the prompts' text")
    assert record_resume_changes(tmp_path, {"optim.lr": [1e-5, 5e-6]}, 3).count("\n") == 0  # other settings: the record alone


def test_resume_applies_changed_optimiser_settings(tmp_path, capsys):
    """optim.betas and optim.weight_decay were recorded as changed, but the optimiser's state loaded
    from the checkpoint kept the old ones (only lr was set again)."""
    import torch

    cfg = make_config(tmp_path, steps=1)
    Trainer(cfg).train()
    assert _resume_cli(Path(cfg.run_dir), "--steps", "2", "optim.weight_decay=0.5", "optim.betas=[0.5,0.6]") == 0
    state = torch.load(Path(cfg.run_dir) / "checkpoints" / "step_2" / "trainer_state.pt", weights_only=True)
    groups = state["optimizer"]["param_groups"]
    assert [(tuple(g["betas"]), g["weight_decay"]) for g in groups] == [((0.5, 0.6), 0.5)] * len(groups)


def test_resume_of_a_run_without_a_checkpoint_refuses_before_any_settings_line(tmp_path, capsys):
    """It printed "resume: settings changed ..." (and wrote config_changes.jsonl) before finding
    that there was no checkpoint to continue from."""
    import shutil

    cfg = make_config(tmp_path, "filter=snr-topp", "filter_config.value=0.8", steps=1)
    Trainer(cfg).train()
    shutil.rmtree(Path(cfg.run_dir) / "checkpoints")
    before = _snapshot(Path(cfg.run_dir))
    capsys.readouterr()
    # another filter drops the saved filter_config ("resume: the filter changed, so ..."): not said first
    assert _resume_cli(Path(cfg.run_dir), "--steps", "2", "--filter", "snr-topk", f"optim.lr={cfg.optim.lr / 2}") == 2
    out, err = capsys.readouterr()
    assert one_line_error(err).startswith(f"CheckpointError: --resume: no checkpoint found under {Path(cfg.run_dir) / 'checkpoints'}")
    assert not any(line.startswith("resume:") for line in (out + err).splitlines()), out + err
    assert _snapshot(Path(cfg.run_dir)) == before  # no config_changes.jsonl for a resume that never ran


def test_a_run_folder_in_use_is_refused_by_a_resume_and_by_overwrite(tmp_path, capsys):
    """Two resumes of one folder both trained, writing steps 4 and 5 twice into its metrics.jsonl.
    While a process trains there (holds the folder's lock) a resume and an --overwrite are refused
    before anything is read or removed; once it is done, the resume runs."""
    from ragen_core.trainer.run_dir import RunDirLock

    cfg = make_config(tmp_path, steps=1)
    Trainer(cfg).train()  # ends holding no lock
    run = Path(cfg.run_dir)
    busy = RunDirLock(run)  # another process training there (flock: a second descriptor conflicts in-process too)
    before = _snapshot(run)
    capsys.readouterr()
    try:
        assert _resume_cli(run, "--steps", "2") == 2
        assert one_line_error(capsys.readouterr().err) == (f"ConfigError: run directory {run} is in use by another ragen process "
                                                           "(a run or a resume of it that is still going)")
        assert _run_cli(run, "--overwrite", "--steps", "1") == 2
        assert "is in use by another ragen process" in one_line_error(capsys.readouterr().err)
        assert _snapshot(run) == before  # nothing read into a new step, nothing removed
    finally:
        busy.release()
    assert _resume_cli(run, "--steps", "2") == 0
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl")] == [1, 2]


def test_a_run_refused_by_the_lock_of_a_run_it_raced_leaves_that_runs_folder(tmp_path):
    """Two fresh runs into one new --run-dir: both saw it missing, the second was refused by the
    first's lock and removed the folder (then empty) the first was about to write into."""
    from ragen_core.trainer.run_dir import RunDirLock

    cfg = make_config(tmp_path, steps=1)
    loser = Trainer(cfg)  # the folder does not exist yet: this trainer would make it
    run = Path(cfg.run_dir)
    run.mkdir()
    winner = RunDirLock(run)  # the other run made it first and holds it
    try:
        with pytest.raises(ConfigError, match="is in use by another ragen process"):
            loser.setup()
        assert run.is_dir(), "the refused run removed the folder of the run that holds it"
    finally:
        winner.release()


def test_a_file_system_without_flock_leaves_the_folder_unguarded_not_refused(tmp_path, monkeypatch):
    """Only "held by another process" refuses; a file system that cannot lock (ENOLCK on some NFS
    mounts) must not read as a folder in use."""
    import errno
    import fcntl

    from ragen_core.trainer.run_dir import RunDirLock

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    RunDirLock(tmp_path).release()  # no ConfigError


def test_a_child_forked_while_the_lock_is_held_does_not_keep_the_folder_locked(tmp_path):
    """A vLLM engine (or a fork-started pool) inherits the folder's descriptor; a flock lives while any
    copy is open, so the folder stayed locked after the run released it until that child ended."""
    import os
    import signal

    from ragen_core.trainer.run_dir import RunDirLock

    lock = RunDirLock(tmp_path)
    started, ready = os.pipe()
    child = os.fork()
    if child == 0:  # the forked child lives on, as an engine process would (killed below)
        import time

        os.write(ready, b"1")  # fork's hooks have run by the time the child's own code does
        time.sleep(30)
        os._exit(0)
    try:
        assert os.read(started, 1) == b"1"
        lock.release()
        RunDirLock(tmp_path).release()  # the child still runs; the folder is free (it raised ConfigError before)
        assert os.waitpid(child, os.WNOHANG) == (0, 0)  # the child was indeed alive during the check
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        os.close(started)
        os.close(ready)


def test_the_trainer_api_refuses_a_resume_into_another_env_too(tmp_path):
    cfg = make_config(tmp_path, steps=1)
    Trainer(cfg).train()
    other = cfg.model_copy(update={"steps": 2, "algo": "ppo"})
    with pytest.raises(ConfigError, match="this run trains algo 'grpo'; continuing it with algo 'ppo'"):
        Trainer(other, resume=True).train()
    assert [r["step"] for r in read_metrics(Path(cfg.run_dir) / "metrics.jsonl")] == [1]


def test_resuming_a_finished_run_says_how_to_train_further(tmp_path, capsys):
    cfg = make_config(tmp_path, steps=1)
    Trainer(cfg).train()
    capsys.readouterr()
    assert _resume_cli(Path(cfg.run_dir)) == 0
    out = capsys.readouterr().out
    assert "resume: the run is at step 1 of steps=1: nothing to train (pass --steps N with N > 1 to train further)" in out.splitlines()
    assert "settings changed" not in out and not (Path(cfg.run_dir) / "config_changes.jsonl").exists()
    assert [r["step"] for r in read_metrics(Path(cfg.run_dir) / "metrics.jsonl")] == [1]


def test_resuming_a_finished_run_with_new_settings_leaves_its_config_alone(tmp_path, capsys):
    """Nothing trains, so config.yaml keeps the settings its steps ran with and no change is recorded."""
    cfg = make_config(tmp_path, steps=1)
    Trainer(cfg).train()
    config_text = (Path(cfg.run_dir) / "config.yaml").read_text()
    capsys.readouterr()
    assert _resume_cli(Path(cfg.run_dir), f"optim.lr={cfg.optim.lr / 2}") == 0
    out = capsys.readouterr().out.splitlines()
    assert ("resume: the run is at step 1 of steps=1: nothing to train (pass --steps N with N > 1 to train further) "
            "(settings not applied: optim.lr)") in out
    assert (Path(cfg.run_dir) / "config.yaml").read_text() == config_text
    assert not (Path(cfg.run_dir) / "config_changes.jsonl").exists()


def test_naming_a_preset_that_changes_nothing_is_no_change(tmp_path, capsys):
    from ragen_core import registry
    from ragen_core.trainer.config import plain_preset
    from ragen_core.trainer.warm_policy import check_payload

    if "bandit" in registry.names("env") and "Bandit" in registry.get_spec("env", "bandit").presets:
        assert plain_preset("bandit", "Bandit") is None  # the reference's tag is the defaults
        from ragen_core.config import load_config
        from ragen_core.trainer.config import RunConfig

        plain, named = (load_config(RunConfig, [], ["env=bandit", *extra]) for extra in ([], ["preset=Bandit"]))
        assert check_payload(plain) == check_payload(named)  # the same shipped-policy match
    assert plain_preset(register_toy_env(), "Long") == "Long"  # 9 cells, not 5: a real change
    cfg = make_config(tmp_path, steps=1)
    Trainer(cfg).train()
    capsys.readouterr()
    assert _resume_cli(Path(cfg.run_dir), "--steps", "2", "--preset", "Long") == 2
    assert "this run trains no preset; continuing it with preset 'Long'" in one_line_error(capsys.readouterr().err)


def test_resume_of_a_file_says_it_is_a_file(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert _resume_cli(afile) == 2
    assert one_line_error(capsys.readouterr().err) == f"ConfigError: --resume: {afile} is a file, not a run directory"


def test_repeated_or_unordered_metric_rows_are_read_and_kept_one_per_step(tmp_path, capsys, caplog):
    """A metrics.jsonl with a step written twice or out of order (files concatenated, rows pasted
    back by hand) was kept as it was by a resume, and `ragen plot` drew its curves back and forth."""
    import logging

    from ragen_core.trainer.loggers import one_row_per_step

    rows = [{"step": 2, "a": 1}, {"step": 1, "a": 2}, {"step": 2, "a": 3}, {"step": None, "a": 4}]
    kept, note = one_row_per_step(rows)
    assert kept == [{"step": 1, "a": 2}, {"step": 2, "a": 3}, {"step": None, "a": 4}]
    assert note == "step 2 has several rows (the last written is used); rows are out of step order (read in step order)"
    assert one_row_per_step(kept[:2]) == (kept[:2], "")

    cfg = make_config(tmp_path, steps=2)
    Trainer(cfg).train()
    metrics = Path(cfg.run_dir) / "metrics.jsonl"
    first, second = metrics.read_text(encoding="utf-8").splitlines()
    metrics.write_text("\n".join([second, first, second]) + "\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="ragen_core.trainer.loggers"):
        assert [r["step"] for r in read_metrics(metrics)] == [1, 2]
    assert "step 2 has several rows (the last written is used); rows are out of step order" in caplog.text
    capsys.readouterr()
    assert _resume_cli(Path(cfg.run_dir), "--steps", "3") == 0
    out = capsys.readouterr().out
    assert ("resume: metrics.jsonl: step 2 has several rows (the last written is used); rows are out of step order "
            "(read in step order); the file now holds one row per step") in out
    assert [json.loads(line)["step"] for line in metrics.read_text(encoding="utf-8").splitlines()] == [1, 2, 3]


def test_a_resume_with_another_pool_lists_the_pool_not_the_settings_that_came_with_it():
    """'rollout.pool process -> local' came with 'rollout.pool_config.threads (not set) -> None', a
    setting no one set; the old pool's own settings are still named (as removed)."""
    from ragen_core.trainer.run_dir import NOT_SET, resume_changes

    before = make_config(None, "rollout.pool=process", "rollout.pool_config.workers=2", "rollout.pool_config.step_timeout_s=30")
    after = make_config(None, "rollout.pool=local", "rollout.pool_config.step_timeout_s=60")
    changes = resume_changes(before.model_dump(mode="json"), after)
    assert changes == {"rollout.pool": ["process", "local"], "rollout.pool_config.step_timeout_s": [30.0, 60.0],
                       "rollout.pool_config.workers": [2, NOT_SET]}


def test_a_run_records_every_plugin_and_the_software_it_ran_on(tmp_path):
    """plugins.json left out the engine and the env pool, and nothing said which torch, transformers or ragen-core
    (or which commit of a checkout) made the run (helper-81's walk)."""
    import json
    import subprocess
    from importlib.metadata import version

    cfg = make_config(tmp_path, steps=1)
    Trainer(cfg).train()
    run_dir = Path(cfg.run_dir)
    plugins = {row["kind"]: row for row in json.loads((run_dir / "plugins.json").read_text())}
    assert set(plugins) == {"env", "algorithm", "estimator", "filter", "engine", "pool"}
    assert (plugins["engine"]["name"], plugins["engine"]["dist"]) == ("hf", "ragen-core")
    assert (plugins["pool"]["name"], plugins["pool"]["dist"]) == (cfg.rollout.pool, "ragen-core")
    (record,) = json.loads((run_dir / "versions.json").read_text())
    assert record["from_step"] == 1
    assert record["ragen-core"] == version("ragen-core") and record["torch"] == version("torch")
    assert record["transformers"] == version("transformers") and record["python"].count(".") == 2
    root = Path(__file__).resolve().parents[1]
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=root, check=False).stdout.strip()
    import ragen_core

    from_checkout = Path(ragen_core.__file__).resolve().parents[1] == root and (root / ".git").exists()
    if from_checkout and head:
        assert record["ragen_core_commit"] in (head, head + "+dirty")


def test_versions_json_gains_a_record_when_a_resume_runs_on_other_software(tmp_path):
    from ragen_core.trainer.run_dir import record_versions

    path = tmp_path / "versions.json"
    record_versions(path, {"torch": "2.13.0"}, 1)
    record_versions(path, {"torch": "2.13.0"}, 4)  # the same software: nothing to add
    assert json.loads(path.read_text()) == [{"from_step": 1, "torch": "2.13.0"}]
    record_versions(path, {"torch": "2.14.0"}, 4)
    record_versions(path, {"torch": "2.15.0"}, 6)
    record_versions(path, {"torch": "2.15.1"}, 5)  # resumed from an older checkpoint: steps 6.. are trained again
    assert json.loads(path.read_text()) == [{"from_step": 1, "torch": "2.13.0"}, {"from_step": 4, "torch": "2.14.0"},
                                            {"from_step": 5, "torch": "2.15.1"}]
    path.write_text("{not json")
    record_versions(path, {"torch": "2.13.0"}, 2)  # unreadable: started again
    assert json.loads(path.read_text()) == [{"from_step": 2, "torch": "2.13.0"}]


def test_versions_json_after_a_resume_from_a_checkpoint_older_than_its_last_record(tmp_path):
    """Steps 1..5 ran on A, 6.. on B; a resume from step_3 (step_5 lost) trains 4.. again. On B the
    file kept 'B from 6', crediting A with steps 4-5; on A it added a second A record (helper-86's review)."""
    from ragen_core.trainer.run_dir import record_versions

    path = tmp_path / "versions.json"
    record_versions(path, {"torch": "A"}, 1)
    record_versions(path, {"torch": "B"}, 6)
    record_versions(path, {"torch": "B"}, 4)
    assert json.loads(path.read_text()) == [{"from_step": 1, "torch": "A"}, {"from_step": 4, "torch": "B"}]
    record_versions(path, {"torch": "A"}, 3)  # A again from step 3: A's record covers every step
    assert json.loads(path.read_text()) == [{"from_step": 1, "torch": "A"}]


def test_the_commit_a_run_records_leaves_the_checkouts_git_index_alone(tmp_path, monkeypatch):
    """Every run read '+dirty' with 'git status', which rewrites .git/index (taking index.lock) when
    a file's timestamps changed: a 'git commit' in the checkout at that moment failed (helper-86's review)."""
    import os
    import shutil
    import subprocess

    from ragen_core import distributions

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    (repo / "ragen_core").mkdir(parents=True)
    source = repo / "ragen_core" / "distributions.py"
    source.write_text("x = 1\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "one"]):
        subprocess.run([*git, *args], cwd=repo, check=True, capture_output=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()
    index = repo / ".git" / "index"
    os.utime(index, (1_000_000_000, 1_000_000_000))
    os.utime(source, (1_000_000_100, 1_000_000_100))  # touched, not changed: git status would refresh the index
    monkeypatch.setattr(distributions, "__file__", str(source))
    assert distributions.source_commit() == head
    assert index.stat().st_mtime == 1_000_000_000
    source.write_text("x = 2\n")
    assert distributions.source_commit() == head + "+dirty"


def test_overwrite_removes_the_old_runs_watchdog_dump(tmp_path, capsys):
    """It was kept as 'not written by a run', so the new run's folder held the old run's hang dump (helper-81's walk)."""
    from ragen_core.trainer.run_dir import claim_run_dir

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "watchdog-stacks.txt").write_text("old stacks")
    (run_dir / "notes.txt").write_text("mine")
    claim_run_dir(run_dir, overwrite=True)
    assert sorted(p.name for p in run_dir.iterdir()) == ["notes.txt"]
    assert "overwrite: removed watchdog-stacks.txt" in capsys.readouterr().out
