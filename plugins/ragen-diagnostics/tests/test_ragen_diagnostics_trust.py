"""``ragen diagnose --checkpoint`` reads a checkpoint as ``--resume`` and ``ragen eval`` do (issue 13, items 1 and 4).

A checkpoint RAGEN wrote is checked against its manifest and its weights load from safetensors
only; in any folder, weights that are a pickle payload are refused in one line and never run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from ragen_core.cli.main import main as ragen_main
from ragen_core.testing.run_helpers import one_line_error


class Payload:
    """Unpickling this runs a shell command that creates ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A run directory with a RAGEN checkpoint (``step_1``: tiny Qwen2, manifest) and its rollouts."""
    from ragen_core.rollout.types import Trajectory, Turn
    from ragen_core.trainer.checkpoint import save_checkpoint

    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    run = tmp_path / "run"
    save_checkpoint(run, 1, transformers.Qwen2ForCausalLM(cfg).eval(), None, {"optimizer": {}})
    turn = Turn(prompt_ids=[1, 2, 3], response_ids=[4, 5], response_text="<think>r</think>", reasoning="r", reasoning_ids=[6, 7])
    trajs = [Trajectory(env="e", tag="E", group_id=g, member=0, seed=g, env_id=g, turns=[turn]) for g in range(2)]
    (run / "rollouts").mkdir()
    (run / "rollouts" / "step_1.jsonl").write_text("".join(json.dumps(t.to_dict()) + "\n" for t in trajs))
    return run


def _diagnose(run: Path, checkpoint: str) -> object:
    try:
        return ragen_main(["diagnose", str(run), "--checkpoint", checkpoint, "--rollouts", str(run / "rollouts" / "step_1.jsonl")])
    except Exception as exc:  # noqa: BLE001 - the test asserts it is not an exception (a traceback for a user)
        return exc


def test_damaged_checkpoint_is_a_one_line_error(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    weights = run / "checkpoints" / "step_1" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, loads without complaint unless the hash is checked
    weights.write_bytes(bytes(data))
    assert _diagnose(run, "step_1") == 2
    line = one_line_error(capsys.readouterr().err)
    assert line.startswith("CheckpointError:") and "model.safetensors" in line


@pytest.mark.parametrize("ragen_checkpoint", [True, False])
def test_pickled_weights_never_run(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], ragen_checkpoint: bool) -> None:
    from ragen_core.trainer.checkpoint import MANIFEST_FILE, STATE_FILE, write_manifest

    folder = run / "checkpoints" / "step_1"
    if not ragen_checkpoint:  # a plain Hugging Face folder: no manifest, no trainer state
        (folder / MANIFEST_FILE).unlink()
        (folder / STATE_FILE).unlink()
    marker = tmp_path / "marker"
    (folder / "model.safetensors").unlink()
    torch.save({"model.embed_tokens.weight": Payload(marker)}, folder / "pytorch_model.bin")
    if ragen_checkpoint:
        write_manifest(folder)  # an attacker can make the manifest match again
    rc = _diagnose(run, str(folder))
    assert not marker.exists(), "the payload ran"
    assert rc == 2
    assert "model" in one_line_error(capsys.readouterr().err)
