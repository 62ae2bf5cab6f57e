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
    step_1 = trainer.run_dir / "checkpoints" / "step_1"
    assert message == ("training diverged at step 2: step 2's update left weights that are not finite (NaN or inf); the last good "
                       f"checkpoint is {step_1}"), message
    assert [r["step"] for r in trainer.history] == [1, 2]  # it did not go on skipping NaN gradients until max_skipped_steps
    # step_1's weights gave step 2 a finite gradient: good by the divergence rule, kept for --resume (helper-64's review)
    assert [s for s, _ in list_checkpoints(trainer.run_dir)] == [1]
    assert "step 2: no checkpoint written: some weights are not finite (NaN or inf)" in capsys.readouterr().err


def test_a_lora_run_keeps_its_float16_base_and_trains_float32_adapters(tmp_path, capsys):
    """Upcasting the frozen base doubled its memory in exactly the runs that use LoRA to save it (helper-64's review)."""
    pytest.importorskip("peft")
    model, tok = load_model_and_tokenizer("tiny")
    folder = tmp_path / "half"
    model.half().save_pretrained(folder)
    tok.save_pretrained(folder)
    trainer = Trainer(toy_run_config(tmp_path / "run", f"model={folder}", "save_freq=0", "optim.peft.rank=4", "optim.peft.alpha=8"))
    trainer.setup()
    try:
        dtypes = {n: p.dtype for n, p in trainer.model.named_parameters()}
        assert {d for n, d in dtypes.items() if "lora_" not in n} == {torch.float16}
        assert {d for n, d in dtypes.items() if "lora_" in n} == {torch.float32}
        assert "training them as float32" not in capsys.readouterr().err
    finally:
        trainer.close()



def test_a_lora_ppo_run_on_a_float16_model_trains_a_float32_critic(tmp_path):
    """The critic, a full copy of the policy, kept the float16 base and diverged at step 1 (helper-66's review)."""
    pytest.importorskip("peft")
    model, tok = load_model_and_tokenizer("tiny")
    folder = tmp_path / "half"
    model.half().save_pretrained(folder)
    tok.save_pretrained(folder)
    trainer = Trainer(toy_run_config(tmp_path / "run", f"model={folder}", "save_freq=0", "optim.peft.rank=4", "optim.peft.alpha=8",
                                     "algo=ppo", steps=3))
    rows = trainer.train()
    assert {p.dtype for p in trainer.critic.parameters()} == {torch.float32}
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(bool(torch.isfinite(p).all()) for p in trainer.critic.parameters())


@pytest.mark.parametrize("float32_weights", [False, True])
def test_bfloat16_weights_keep_small_updates_only_as_float32_weights(tmp_path, capsys, float32_weights):
    """AdamW on bfloat16 weights drops every update below ~0.4 % of a weight (helper-65's audit): at lr 1e-6 all of
    them. optim.float32_weights trains them as float32, which keeps them."""
    model, tok = load_model_and_tokenizer("tiny")
    folder = tmp_path / "bf16"
    model.to(torch.bfloat16).save_pretrained(folder)
    tok.save_pretrained(folder)
    before = {k: v.float() for k, v in model.state_dict().items()}
    trainer = Trainer(toy_run_config(tmp_path / "run", f"model={folder}", "save_freq=0", "steps=1", "optim.lr=1e-6",
                                     f"optim.float32_weights={str(float32_weights).lower()}"))
    trainer.train()
    after = trainer.model.state_dict()
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32 if float32_weights else torch.bfloat16}
    moved = sum(int((after[k].float() != before[k]).sum()) for k in before) / sum(v.numel() for v in before.values())
    if float32_weights:
        assert moved > 0.5  # AdamW's first step moves each weight with a gradient by about lr
        assert "holds bfloat16 weights: training them as float32 (optim.float32_weights)" in capsys.readouterr().err
    else:
        assert moved < 0.05  # rounded away: measured 1.1 %, the weights within about 256 x lr of 0 (and zero-initialised ones)


@pytest.mark.parametrize("float32_weights", [False, True])
def test_a_lora_ppo_run_on_a_bfloat16_model_trains_its_critic_in_the_dtype_asked_for(tmp_path, float32_weights):
    """optim.float32_weights left a LoRA run's critic (a full copy training every weight) bfloat16 (helper-76's walk)."""
    pytest.importorskip("peft")
    model, tok = load_model_and_tokenizer("tiny")
    folder = tmp_path / "bf16"
    model.to(torch.bfloat16).save_pretrained(folder)
    tok.save_pretrained(folder)
    trainer = Trainer(toy_run_config(tmp_path / "run", f"model={folder}", "save_freq=0", "optim.peft.rank=4", "optim.peft.alpha=8",
                                     "algo=ppo", f"optim.float32_weights={str(float32_weights).lower()}", steps=1))
    trainer.setup()
    try:
        lm = {p.dtype for n, p in trainer.critic.named_parameters() if not n.startswith("head") and "lora_" not in n}
        assert lm == ({torch.float32} if float32_weights else {torch.bfloat16})
        assert {p.dtype for n, p in trainer.model.named_parameters() if "lora_" not in n} == {torch.bfloat16}  # the frozen base
    finally:
        trainer.close()
