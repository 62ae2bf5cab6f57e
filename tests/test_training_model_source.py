"""What a run trains when ``model`` is a warm-policy folder or a float16 folder, and a run whose
update leaves weights that are not finite (helper-63's walk: a policy built with
``ragen warm-policy build --out`` trained into NaN weights, and the run exited 0)."""

from __future__ import annotations

import shutil

import pytest
import torch

from ragen_core import hookimpl
from ragen_core.errors import RagenError, TrainingError
from ragen_core.models import load_model_and_tokenizer
from ragen_core.testing.run_helpers import toy_run_config
from ragen_core.trainer import warm_policy as wp
from ragen_core.trainer.checkpoint import list_checkpoints
from ragen_core.trainer.trainer import Trainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _shipped(name: str):
    policy = wp.shipped_policy(wp.SHIPPED_ROOT / name)
    if policy is None:
        pytest.skip(f"no usable shipped policy {name!r} in this install")
    return policy


def _expected_weights(policy) -> dict[str, torch.Tensor]:
    model, _ = load_model_and_tokenizer("tiny")
    policy.load_into(model)
    return model.state_dict()


@pytest.mark.parametrize("name", ["bandit", "frozenlake"])  # a whole policy, and a delta of tiny-warm
def test_a_warm_policy_folder_as_model_is_that_policy_in_float32(tmp_path, name):
    policy = _shipped(name)
    assert bool(policy.record.get("delta")) == (name == "frozenlake")
    folder = tmp_path / f"my-{name}"  # as `ragen warm-policy build --out my-NAME` leaves it, outside the package
    shutil.copytree(policy.folder, folder)
    trainer = Trainer(toy_run_config(tmp_path / "run", f"model={folder}", "save_freq=0"))
    trainer.setup()
    try:
        want = _expected_weights(policy)
        got = trainer.model.state_dict()
        assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
        assert all(torch.equal(got[k], want[k]) for k in want)
        trainer.train()
        assert all(bool(torch.isfinite(p).all()) for p in trainer.model.parameters())
    finally:
        trainer.close()


def test_a_warm_policy_folder_that_cannot_be_used_is_one_line(tmp_path):
    folder = tmp_path / "old-policy"
    shutil.copytree(_shipped("bandit").folder, folder)
    record = (folder / wp.BUILD_FILE).read_text(encoding="utf-8").replace('"tiny_version"', '"tiny_version_was"')
    (folder / wp.BUILD_FILE).write_text(record, encoding="utf-8")
    with pytest.raises(RagenError, match=r"this warm policy \(ragen warm-policy build\) cannot be used: built for another tiny model"):
        Trainer(toy_run_config(tmp_path / "run", f"model={folder}")).setup()


def test_float16_weights_are_trained_as_float32(tmp_path, capsys):
    model, tok = load_model_and_tokenizer("tiny")
    folder = tmp_path / "half"
    model.half().save_pretrained(folder)
    tok.save_pretrained(folder)
    trainer = Trainer(toy_run_config(tmp_path / "run", f"model={folder}", "save_freq=0"))
    trainer.train()
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
    assert all(bool(torch.isfinite(p).all()) for p in trainer.model.parameters())
    assert "holds float16 weights: training them as float32" in capsys.readouterr().err


class _PoisonAfterUpdate:
    """Sets one weight to NaN after step 2's update: what an overflowing float16 AdamW step does."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    @hookimpl
    def ragen_on_update_end(self, stats, step):
        if step == 2:
            with torch.no_grad():
                next(self.trainer.model.parameters()).view(-1)[0] = float("nan")


def test_an_update_that_leaves_nan_weights_stops_the_run_at_once(tmp_path, capsys):
    trainer = Trainer(toy_run_config(tmp_path / "run", steps=6))
    trainer.setup()
    trainer.pm.register(_PoisonAfterUpdate(trainer))
    with pytest.raises(TrainingError) as err:
        trainer.train()
    message = str(err.value).splitlines()[0]
    assert message.startswith("training diverged at step 2: step 2's update left weights that are not finite (NaN or inf)"), message
    assert "step_1 holds the weights whose next step went non-finite, so it was renamed step_1.diverged" in message
    assert "or train float32 weights" in str(err.value)
    assert [r["step"] for r in trainer.history] == [1, 2]  # it did not go on skipping NaN gradients until max_skipped_steps
    assert list_checkpoints(trainer.run_dir) == []
    assert "step 2: no checkpoint written: some weights are not finite (NaN or inf)" in capsys.readouterr().err
