"""A validation split that cannot start fails before the first step, and a run that fails with
no checkpoint says there is nothing to resume."""

from __future__ import annotations

import pytest

from ragen_core import registry
from ragen_core.errors import ConfigError, RagenError
from ragen_core.specs import EnvSpec
from ragen_core.testing.run_helpers import toy_run_config
from ragen_core.testing.toy_env import CorridorConfig, CorridorEnv

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class NoValidationCorridor(CorridorEnv):
    """The corridor whose data (say) held nothing out for validation: a val reset raises."""

    train_resets = 0

    def reset(self, seed: int, *, member: int = 0, mode: str = "train") -> str:
        if mode == "val":
            raise ConfigError("no validation problems in corridor.jsonl", ["raise env_config.val_fraction"])
        NoValidationCorridor.train_resets += 1
        return super().reset(seed, member=member, mode=mode)


SPEC = EnvSpec(name="test-no-val-corridor", config_model=CorridorConfig, factory=f"{__name__}:NoValidationCorridor")


@pytest.fixture
def no_val_env():
    registry.register(SPEC)
    NoValidationCorridor.train_resets = 0
    yield SPEC.name
    registry.unregister("env", SPEC.name)


def test_an_env_that_cannot_start_validation_fails_before_any_training(tmp_path, capsys, no_val_env):
    from ragen_core.trainer.trainer import Trainer

    run = tmp_path / "run"
    with pytest.raises(RagenError, match="no validation problems in corridor.jsonl"):
        Trainer(toy_run_config(run, f"env={no_val_env}", "test_freq=1", steps=2)).train()
    assert NoValidationCorridor.train_resets == 1  # the set-up's own check of the first training episode, no rollout
    assert not run.exists()  # failed in set-up: the fresh run's folder is removed, so a rerun needs no --overwrite


def test_a_run_that_fails_before_its_first_checkpoint_says_there_is_nothing_to_resume(tmp_path, capsys, monkeypatch):
    from ragen_core.trainer.trainer import Trainer

    run = tmp_path / "run"
    trainer = Trainer(toy_run_config(run, "save_freq=1", steps=2))
    monkeypatch.setattr(trainer, "train_step", lambda step: (_ for _ in ()).throw(RuntimeError("boom at step 1")))
    with pytest.raises(RuntimeError, match="boom"):
        trainer.train()
    err = capsys.readouterr().err
    assert f"no checkpoint in {run}, so there is nothing to resume: start again with --overwrite" in err


def test_without_validation_the_validation_episode_is_not_probed(tmp_path, no_val_env):
    from ragen_core.trainer.trainer import Trainer

    history = Trainer(toy_run_config(tmp_path / "run", f"env={no_val_env}", "test_freq=0", steps=1)).train()
    assert len(history) == 1 and NoValidationCorridor.train_resets > 0


def test_a_failure_after_a_checkpoint_does_not_say_nothing_was_saved(tmp_path, capsys, monkeypatch):
    from ragen_core.trainer.trainer import Trainer

    trainer = Trainer(toy_run_config(tmp_path / "run", "save_freq=1", steps=3))
    real = trainer.train_step

    def fail_at_two(step: int):
        if step == 2:
            raise RuntimeError("boom at step 2")
        return real(step)

    monkeypatch.setattr(trainer, "train_step", fail_at_two)
    with pytest.raises(RuntimeError, match="boom"):
        trainer.train()
    assert "nothing to resume" not in capsys.readouterr().err
