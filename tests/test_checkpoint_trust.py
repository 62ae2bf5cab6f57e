"""Files a user may have received never run code, and damage never crashes or skews a resume (issue 13, items 1, 4, 5).

A run directory, a checkpoint or a model folder can come from someone else. Loading one must
read plain data only (tensors, numbers, strings, lists, dicts): a planted pickle payload is
refused with a one-line error and never executes. A checkpoint carries a manifest (file sizes
and SHA-256, written last); ``--resume`` skips damaged checkpoints for the newest intact one and
says so, ``ragen eval`` refuses a damaged one with a one-line error. A torn last line of
``metrics.jsonl`` is cut off and its step computed again from an older checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from ragen_core.cli.main import main
from ragen_core.errors import ConfigError
from ragen_core.testing.run_helpers import one_line_error, toy_run_config
from ragen_core.testing.toy_env import register_toy_env
from ragen_core.trainer import checkpoint as ck
from ragen_core.trainer.config import RunConfig
from ragen_core.trainer.loggers import read_metrics
from ragen_core.trainer.trainer import Trainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def make_config(tmp_path: Path, *overrides: str, name: str = "run") -> RunConfig:
    return toy_run_config(tmp_path / name, *overrides)


class Payload:
    """Unpickling this runs a shell command that creates ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _reseal(folder: Path) -> None:
    """What an attacker who edits a checkpoint can do: make its manifest match again."""
    if (folder / "manifest.json").is_file():
        ck.write_manifest(folder)


def _call_cli(argv: list[str]) -> object:
    """``main(argv)``, or the exception it let escape (a traceback for a user)."""
    try:
        return main(argv)
    except Exception as exc:  # noqa: BLE001 - the test asserts it is not an exception
        return exc


def _eval_argv(model: Path) -> list[str]:
    return ["eval", "--env", register_toy_env(), "--model", str(model), "--groups", "1", "--group-size", "1",
            "env_config.length=3", "env_config.max_turns=1", "sampling.val.max_new_tokens=4"]


# ----------------------------------------------------------------------------- item 1: plain data only
def test_resume_refuses_a_planted_pickle_payload(tmp_path, capsys):
    cfg = make_config(tmp_path, "steps=1")
    Trainer(cfg).train()
    ckpt = Path(cfg.run_dir) / "checkpoints" / "step_1"
    marker = tmp_path / "marker"
    torch.save({"step": 1, "optimizer": Payload(marker)}, ckpt / ck.STATE_FILE)
    _reseal(ckpt)
    rc = _call_cli(["run", "--resume", cfg.run_dir, "steps=2"])
    assert not marker.exists(), "the payload ran"
    assert rc == 2
    line = one_line_error(capsys.readouterr().err)
    assert line.startswith("CheckpointError:") and ck.STATE_FILE in line and "plain data" in line


def test_checkpoint_state_is_plain_data_and_restores_every_rng(tmp_path):
    """The whole state, RNG states included, loads with ``weights_only=True`` and no allow-list."""
    import random

    import numpy as np

    from ragen_core.models import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer("tiny")
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    path = ck.save_checkpoint(tmp_path, 1, model, tok, {"runner": {"counter": 4}, "stopper": {"rv_history": [np.float64(0.5)]}})
    expected = (random.random(), np.random.random(), torch.rand(1))
    state = torch.load(path / ck.STATE_FILE, map_location="cpu", weights_only=True)
    assert state["runner"] == {"counter": 4} and state["stopper"] == {"rv_history": [0.5]}
    random.seed(0), np.random.seed(0), torch.manual_seed(0)
    ck.set_rng_state(state["rng"])
    assert (random.random(), np.random.random(), torch.rand(1)) == expected


def test_state_that_is_not_plain_data_is_refused_when_saving(tmp_path):
    from ragen_core.errors import CheckpointError
    from ragen_core.models import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer("tiny")
    with pytest.raises(CheckpointError, match=r"diagnostics\.mine\.tracker"):
        ck.save_checkpoint(tmp_path, 1, model, tok, {"diagnostics": {"mine": {"tracker": object()}}})
    assert ck.list_checkpoints(tmp_path) == []


def test_checkpoint_of_an_older_ragen_still_resumes(tmp_path, capsys):
    """Before manifests, the numpy RNG state was pickled as an ndarray: still accepted, with a warning."""
    import numpy as np

    cfg = make_config(tmp_path, "steps=1")
    Trainer(cfg).train()
    ckpt = Path(cfg.run_dir) / "checkpoints" / "step_1"
    state = torch.load(ckpt / ck.STATE_FILE, weights_only=True)
    state["rng"]["numpy"] = np.random.get_state()
    torch.save(state, ckpt / ck.STATE_FILE)
    (ckpt / ck.MANIFEST_FILE).unlink()
    capsys.readouterr()
    resumed = Trainer(cfg.model_copy(update={"steps": 2}), resume=True)
    resumed.train()
    assert [r["step"] for r in read_metrics(Path(cfg.run_dir) / "metrics.jsonl")] == [1, 2]
    assert "step_1 has no manifest" in capsys.readouterr().out


def test_a_damaged_checkpoint_without_a_manifest_says_so_not_that_the_model_name_is_wrong(tmp_path, capsys):
    """An older RAGEN's checkpoint (no manifest) whose weights are cut: the hint said "use 'tiny' for
    the built-in offline model, or a local folder / Hub id", as if the name were the problem."""
    cfg = make_config(tmp_path, "steps=1")
    Trainer(cfg).train()
    ckpt = Path(cfg.run_dir) / "checkpoints" / "step_1"
    (ckpt / ck.MANIFEST_FILE).unlink()
    _damage(ckpt / "model.safetensors", "truncated")
    capsys.readouterr()
    assert _call_cli(["run", "--resume", cfg.run_dir, "--steps", "2"]) == 2
    err = capsys.readouterr().err
    assert one_line_error(err).startswith(f"RagenError: could not load model '{ckpt}'")
    assert "hint: the folder's weights are damaged" in err and "'tiny'" not in err


def _plant_pickled_weights(folder: Path, marker: Path) -> None:
    """A model folder whose weights are a pickle payload (no safetensors file)."""
    from ragen_core.models import tiny_path

    shutil.copytree(tiny_path(), folder)
    (folder / "model.safetensors").unlink()
    torch.save({"model.embed_tokens.weight": Payload(marker)}, folder / "pytorch_model.bin")


def test_eval_refuses_pickled_weights_in_a_model_folder(tmp_path, capsys):
    marker = tmp_path / "marker"
    _plant_pickled_weights(tmp_path / "model", marker)
    rc = _call_cli(_eval_argv(tmp_path / "model"))
    assert not marker.exists(), "the payload ran"
    assert rc == 2
    assert "model" in one_line_error(capsys.readouterr().err)


def test_warm_start_cache_refuses_pickled_weights(tmp_path):
    from ragen_core.errors import RagenError
    from ragen_core.trainer.warmstart import cache_folder

    cfg = make_config(tmp_path, "warm_start.enabled=true", "warm_start.start_from=scratch", f"warm_start.cache_dir={tmp_path / 'ws-cache'}")
    marker = tmp_path / "marker"
    _plant_pickled_weights(cache_folder(cfg), marker)  # a shared cache someone else filled
    with pytest.raises(RagenError) as info:
        Trainer(cfg).setup()
    assert not marker.exists(), "the payload ran"
    assert "model.safetensors" in str(info.value) and len(info.value.message.splitlines()) == 1


def test_resume_loads_checkpoint_weights_from_safetensors_only(tmp_path, capsys):
    cfg = make_config(tmp_path, "steps=1")
    Trainer(cfg).train()
    ckpt = Path(cfg.run_dir) / "checkpoints" / "step_1"
    marker = tmp_path / "marker"
    (ckpt / "model.safetensors").unlink()
    torch.save({"model.embed_tokens.weight": Payload(marker)}, ckpt / "pytorch_model.bin")
    _reseal(ckpt)
    rc = _call_cli(["run", "--resume", cfg.run_dir, "steps=2"])
    assert not marker.exists(), "the payload ran"
    assert rc == 2
    assert "model.safetensors" in one_line_error(capsys.readouterr().err)


def test_lora_resume_refuses_a_pickled_adapter(tmp_path, capsys):
    pytest.importorskip("peft")  # optional extra: LoRA needs it
    cfg = make_config(tmp_path, "steps=1", "optim.peft.rank=4", "optim.peft.alpha=8")
    Trainer(cfg).train()
    adapter = Path(cfg.run_dir) / "checkpoints" / "step_1" / ck.ADAPTER_DIR
    marker = tmp_path / "marker"
    (adapter / "adapter_model.safetensors").unlink()
    torch.save({"base_model.model.lm_head.lora_A.weight": Payload(marker)}, adapter / "adapter_model.bin")
    _reseal(adapter.parent)
    rc = _call_cli(["run", "--resume", cfg.run_dir, "steps=2"])
    assert not marker.exists(), "the payload ran"
    assert rc == 2
    assert "adapter_model.safetensors" in one_line_error(capsys.readouterr().err)


# ----------------------------------------------------------------------------- item 4: damaged checkpoints
def _damage(path: Path, how: str) -> None:
    if how == "missing":
        path.unlink()
        return
    data = path.read_bytes()
    if how == "empty":
        data = b""
    elif how == "truncated":
        data = data[: len(data) // 2]
    else:  # one flipped byte in the middle: same size, loads fine without a hash check
        i = len(data) // 2
        data = data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]
    path.write_bytes(data)


DAMAGE = [(ck.STATE_FILE, "empty"), (ck.STATE_FILE, "truncated"), ("model.safetensors", "truncated"), ("model.safetensors", "flipped"),
          (ck.STATE_FILE, "missing"), ("model.safetensors", "missing")]  # a missing trainer_state.pt used to be skipped unsaid


def test_manifest_lists_every_file_with_size_and_hash(tmp_path):
    import hashlib

    cfg = make_config(tmp_path, "steps=1")
    Trainer(cfg).train()
    ckpt = Path(cfg.run_dir) / "checkpoints" / "step_1"
    manifest = json.loads((ckpt / ck.MANIFEST_FILE).read_text())
    on_disk = {p.relative_to(ckpt).as_posix() for p in ckpt.rglob("*") if p.is_file() and p.name != ck.MANIFEST_FILE}
    assert set(manifest["files"]) == on_disk and {ck.STATE_FILE, "model.safetensors", "config.json"} <= on_disk
    for name, entry in manifest["files"].items():
        data = (ckpt / name).read_bytes()
        assert entry == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert ck.verify_checkpoint(ckpt) is True
    # every file readable as the umask allows (transformers wrote model.safetensors 0600 through a private temp file)
    mask = os.umask(0o022)
    os.umask(mask)
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in ckpt.iterdir() if p.is_file()} == \
        {p.name: oct(0o666 & ~mask) for p in ckpt.iterdir() if p.is_file()}


@pytest.mark.parametrize("file,how", DAMAGE)
def test_resume_falls_back_to_the_newest_intact_checkpoint(tmp_path, capsys, file, how):
    cfg = make_config(tmp_path, "steps=2")
    Trainer(cfg).train()
    run_dir = Path(cfg.run_dir)
    _damage(run_dir / "checkpoints" / "step_2" / file, how)
    capsys.readouterr()
    resumed = Trainer(cfg, resume=True)
    resumed.setup()
    assert resumed.start_step == 2
    said = [line for line in capsys.readouterr().out.splitlines() if "step_2" in line]
    assert len(said) == 1 and file in said[0] and "step_1" in said[0]
    assert [r["step"] for r in read_metrics(run_dir / "metrics.jsonl")] == [1]


def test_resume_with_every_checkpoint_damaged_is_a_one_line_error(tmp_path, capsys):
    cfg = make_config(tmp_path, "steps=2")
    Trainer(cfg).train()
    for step in (1, 2):
        _damage(Path(cfg.run_dir) / "checkpoints" / f"step_{step}" / ck.STATE_FILE, "truncated")
    capsys.readouterr()
    rc = _call_cli(["run", "--resume", cfg.run_dir])
    assert rc == 2
    line = one_line_error(capsys.readouterr().err)
    assert line.startswith("CheckpointError:") and "step_1" in line and "step_2" in line


@pytest.mark.parametrize("file,how", [(file, how) for file, how in DAMAGE if file != ck.STATE_FILE])  # eval reads no trainer state
def test_eval_of_a_damaged_checkpoint_is_a_one_line_error(tmp_path, capsys, file, how):
    cfg = make_config(tmp_path, "steps=1")
    Trainer(cfg).train()
    run_dir = Path(cfg.run_dir)
    _damage(run_dir / "checkpoints" / "step_1" / file, how)
    capsys.readouterr()
    for model in (run_dir, run_dir / "checkpoints" / "step_1"):  # a run directory means its latest checkpoint
        rc = _call_cli(_eval_argv(model))
        assert rc == 2
        line = one_line_error(capsys.readouterr().err)
        assert "step_1" in line and file in line


# ----------------------------------------------------------------------------- item 5: torn metrics line
def _without_timings(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if not k.startswith("timing_s/")} for row in rows]


def test_torn_last_metrics_line_is_recomputed_from_a_checkpoint(tmp_path, capsys):
    full = make_config(tmp_path, "steps=3", name="full")
    Trainer(full).train()
    cfg = make_config(tmp_path, "steps=3", name="torn")
    Trainer(cfg).train()
    metrics = Path(cfg.run_dir) / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    metrics.write_text("".join(lines[:2]) + lines[2][: len(lines[2]) // 2])  # step 3's line torn mid-write
    capsys.readouterr()
    Trainer(cfg, resume=True).train()
    said = [line for line in capsys.readouterr().out.splitlines() if "metrics.jsonl" in line]
    assert len(said) == 1 and "step 3" in said[0] and "step_2" in said[0]
    rows = read_metrics(metrics)
    assert [r["step"] for r in rows] == [1, 2, 3]
    # the same computation in one process: every value equal, bit for bit
    assert _without_timings(rows) == _without_timings(read_metrics(Path(full.run_dir) / "metrics.jsonl"))


def test_a_damaged_metrics_line_with_rows_after_it_is_refused_not_cut(tmp_path, capsys, caplog):
    """A broken line in the middle (damaged after writing, not a killed writer) used to be taken for
    a torn end: --resume cut every good row after it and deleted the checkpoint that could have
    recomputed them."""
    cfg = make_config(tmp_path, "steps=2")
    Trainer(cfg).train()
    metrics = Path(cfg.run_dir) / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    metrics.write_text(lines[0][:-6] + "\n" + lines[1])  # step 1's row damaged, step 2's intact
    before = metrics.read_bytes()
    with pytest.raises(ConfigError, match=r"metrics.jsonl line 1 is not a JSON row, but rows follow it") as err:
        Trainer(make_config(tmp_path, "steps=3"), resume=True).train()
    assert err.value.hints == ["restore the file, or delete that one line (its step's metrics are lost) and resume again"]
    assert metrics.read_bytes() == before
    assert sorted(p.name for p in (Path(cfg.run_dir) / "checkpoints").iterdir()) == ["step_1", "step_2"]
    with caplog.at_level("WARNING", logger="ragen_core.trainer.loggers"):  # plot / diagnose read the rows they can, and say so
        assert [r["step"] for r in read_metrics(metrics)] == [2]
    assert [r.getMessage() for r in caplog.records] == [f"{metrics}: 1 line(s) not JSON rows, skipped (line 1)"]
    metrics.write_text("not json\nneither\n")
    with pytest.raises(ConfigError, match=r"holds no JSON row \(2 line\(s\) of other text\): not a RAGEN metrics file"):
        read_metrics(metrics)
    metrics.write_text('{"step": 1, "a": 1.0}\n{"step": 2, "a"')  # a live run's line being written, or a killed writer's
    caplog.clear()
    assert [r["step"] for r in read_metrics(metrics)] == [1]
    assert [r.getMessage() for r in caplog.records] == [f"{metrics}: 1 line(s) not JSON rows, skipped (line 2; the last line is cut "
                                                        "short: a run is writing it, or was killed while writing it)"]


@pytest.mark.parametrize("how", ["missing", "truncated"])
def test_eval_does_not_need_the_trainer_state(tmp_path, capsys, how):
    """trainer_state.pt holds the optimiser and RNG states a resume needs: eval refused a checkpoint
    without it, though the model folder was whole."""
    cfg = make_config(tmp_path, "steps=1")
    Trainer(cfg).train()
    _damage(Path(cfg.run_dir) / "checkpoints" / "step_1" / ck.STATE_FILE, how)
    capsys.readouterr()
    assert _call_cli(_eval_argv(Path(cfg.run_dir) / "checkpoints" / "step_1")) == 0
    assert "success" in capsys.readouterr().out


def test_resuming_a_run_that_is_already_there_says_so(tmp_path, capsys):
    """--resume RUN --steps 1 of a run at step 2 exited 0 with a malformed bar ("2step [00:00, ?step/s]") and no word."""
    cfg = make_config(tmp_path, "steps=2")
    Trainer(cfg).train()
    capsys.readouterr()
    rows = (Path(cfg.run_dir) / "metrics.jsonl").read_text()
    assert _call_cli(["run", "--resume", cfg.run_dir, "--steps", "1", "progress=true"]) == 0
    out = capsys.readouterr()
    assert "resume: the run is at step 2 of steps=1: nothing to train (pass --steps N with N > 2 to train further)" in out.out.splitlines()
    assert out.out.count("nothing to train") == 1  # said once (the trainer said it again: helper-71's walk)
    assert "step/s" not in out.err and (Path(cfg.run_dir) / "metrics.jsonl").read_text() == rows
    Trainer(cfg.model_copy(update={"steps": 1}), resume=True).train()  # in code too, once
    assert capsys.readouterr().out.count("nothing to train") == 1


# ----------------------------------------------------------------------------- hostile run directories (session 24's walk)
def test_weights_left_out_of_the_manifest_are_not_trusted(tmp_path, capsys):
    """Deleting a file's entry from manifest.json, then damaging the file: eval and --resume used it."""
    cfg = make_config(tmp_path, "steps=1")
    Trainer(cfg).train()
    ckpt = Path(cfg.run_dir) / "checkpoints" / "step_1"
    manifest = json.loads((ckpt / ck.MANIFEST_FILE).read_text())
    del manifest["files"]["model.safetensors"]
    (ckpt / ck.MANIFEST_FILE).write_text(json.dumps(manifest))
    _damage(ckpt / "model.safetensors", "flipped")
    with pytest.raises(ck.CheckpointError, match=r"model.safetensors is not in its manifest.json, so it cannot be verified"):
        ck.verify_checkpoint(ckpt)
    capsys.readouterr()
    assert _call_cli(_eval_argv(ckpt)) == 2
    assert "model.safetensors is not in its manifest.json" in one_line_error(capsys.readouterr().err)


def test_a_checkpoint_of_another_step_in_a_step_folder_is_refused(tmp_path, capsys):
    """A step_15 checkpoint of another run put at checkpoints/step_3: the resume trained steps 16..17
    after the run's 1..3, from the other run's weights, without a word."""
    cfg = make_config(tmp_path, "steps=2")
    Trainer(cfg).train()
    checkpoints = Path(cfg.run_dir) / "checkpoints"
    shutil.rmtree(checkpoints / "step_2")
    shutil.copytree(checkpoints / "step_1", checkpoints / "step_2")  # step_1's state, under step_2's name
    capsys.readouterr()
    assert _call_cli(["run", "--resume", cfg.run_dir, "--steps", "3"]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert line.startswith("CheckpointError: checkpoints/step_2/trainer_state.pt holds step 1, not 2"), line


def test_pruning_does_not_count_a_checkpoint_the_resume_found_damaged(tmp_path, capsys):
    """A flipped byte keeps the size: pruning (sizes only) kept the damaged step_3 and removed the
    intact step_2 the resume had fallen back to, leaving one intact checkpoint of the two kept."""
    cfg = make_config(tmp_path, "steps=3", "save_freq=1")
    Trainer(cfg).train()
    checkpoints = Path(cfg.run_dir) / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step_2", "step_3"]
    _damage(checkpoints / "step_3" / "model.safetensors", "flipped")
    resumed = Trainer(cfg.model_copy(update={"steps": 4}), resume=True)
    resumed.train()  # from step_2: step 3 is trained and saved again, intact
    left = sorted(p.name for p in checkpoints.iterdir())
    # the newest two intact ones; the damaged step_3, once written again, counts as intact (all three were kept: helper-81)
    assert left == ["step_3", "step_4"], left
    for name in left:
        assert ck.verify_checkpoint(checkpoints / name)


def test_a_metrics_row_without_a_number_step_does_not_stop_a_resume(tmp_path, capsys):
    cfg = make_config(tmp_path, "steps=1")
    Trainer(cfg).train()
    with (Path(cfg.run_dir) / "metrics.jsonl").open("a") as fh:
        fh.write('{"step": null}\n')
    assert ck.resume_checkpoint(cfg.run_dir, log=lambda _: None)[0] == 1  # was: TypeError from int(None)


def test_a_state_write_that_fails_is_a_checkpoint_error(tmp_path, monkeypatch):
    """torch.save raises RuntimeError ('unexpected pos') when a file-size limit or a full disk stops
    it: a traceback with exit 1, where the weights' write failing was one line."""
    import torch

    def full_disk(*args, **kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 512 vs 448")

    cfg = make_config(tmp_path, "steps=1")
    trainer = Trainer(cfg)
    trainer.train()
    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(ck.CheckpointError, match=r"could not write checkpoint .*step_2: writing trainer_state.pt failed"):
        trainer.save(2)
    assert not (Path(cfg.run_dir) / "checkpoints" / "step_2").exists() and ck.verify_checkpoint(Path(cfg.run_dir) / "checkpoints" / "step_1")


def test_cutting_metrics_on_resume_skips_stepless_rows_and_a_read_only_folder_is_one_line(tmp_path, monkeypatch):
    from ragen_core.trainer.loggers import truncate_metrics

    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 1, "a": 1}\n{"step": null}\n{"step": 2, "a": 2}\n{"step": 3}\n')
    truncate_metrics(metrics, 2)  # was: TypeError from int(None)
    assert [json.loads(line).get("step") for line in metrics.read_text().splitlines()] == [1, 2]

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", read_only)
    with pytest.raises(ConfigError, match=rf"cannot write to run directory {tmp_path} \(PermissionError: Permission denied\)"):
        truncate_metrics(metrics, 1)


def test_a_resume_that_sees_fewer_gpus_restores_the_cuda_rng_states_it_has(monkeypatch):
    """Saved with 3 GPUs visible, resumed with one: set_rng_state_all raised IndexError (helper-65's audit)."""
    import torch

    from ragen_core.trainer.checkpoint import rng_state, set_rng_state

    state = rng_state()
    state["cuda"] = [torch.zeros(8, dtype=torch.uint8) + i for i in range(3)]
    restored = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda s, device: restored.append((int(s[0]), device)))
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda states: [torch.cuda.default_generators[i] for i in range(len(states))])
    set_rng_state(state)
    assert restored == [(0, 0)]
