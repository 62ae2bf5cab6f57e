"""A trainer used as a context manager closes its engine when the block ends, also on an error.

Before, nothing closed the engine a Trainer built: a script or notebook that trained several runs in
one process kept every run's engine (with vLLM, its engine core and GPU memory) until the process
ended. ``ragen run`` now trains inside ``with Trainer(...)``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ragen_core.errors import RagenError
from ragen_core.testing.run_helpers import toy_run_config
from ragen_core.trainer.config import RunConfig
from ragen_core.trainer.trainer import Trainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def make_config(tmp_path: Path, *overrides: str) -> RunConfig:
    """One step of the toy corridor run, no checkpoints."""
    return toy_run_config(tmp_path / "run", "save_freq=0", *overrides, steps=1)


def _count_closes(trainer: Trainer) -> list[str]:
    """Wraps the built engine's and env pool's ``close`` to record their calls (the real ones still run)."""
    trainer.setup()
    calls: list[str] = []
    for name, obj in (("engine", trainer.engine), ("pool", trainer.runner.pool)):
        real = obj.close

        def close(real=real, name=name) -> None:
            calls.append(name)
            real()

        obj.close = close
    return calls


def test_leaving_the_block_closes_the_engine_once_and_the_trainer_refuses_to_roll_out(tmp_path):
    with Trainer(make_config(tmp_path, "test_freq=1")) as trainer:  # validates, so it has a validation runner
        calls = _count_closes(trainer)
        history = trainer.train()
        assert calls == ["pool"]  # train() closes the env pool only: the engine can still validate
        assert trainer.validate(1)["val-env/success"] >= 0.0
    assert calls == ["pool", "pool", "engine"]
    assert trainer.engine.model is None  # the HF engine let go of the policy and its kept caches
    assert len(history) == 1 and trainer.history == history  # what the run produced stays readable
    trainer.shutdown()  # idempotent
    assert calls == ["pool", "pool", "engine"]
    with pytest.raises(RagenError, match="shut down"):
        trainer.train()
    with pytest.raises(RagenError, match="shut down"):
        trainer.validate(2)


def test_an_error_in_the_block_still_closes_the_engine(tmp_path):
    with pytest.raises(RuntimeError, match="stop here"):
        with Trainer(make_config(tmp_path)) as trainer:
            calls = _count_closes(trainer)
            raise RuntimeError("stop here")
    assert calls == ["pool", "engine"]


def test_a_trainer_that_never_built_anything_shuts_down_quietly(tmp_path):
    with Trainer(make_config(tmp_path)) as trainer:
        pass  # a refused or abandoned run: no engine was made
    with pytest.raises(RagenError, match="build a new Trainer"):
        trainer.train()


def test_an_engine_built_by_a_setup_that_failed_later_is_closed(tmp_path, monkeypatch):
    from ragen_core.trainer import setup as su

    made: list = []
    real_make_engine = su.make_engine

    def make_engine(*args, **kwargs):
        made.append(real_make_engine(*args, **kwargs))
        return made[-1]

    def make_runner(*args, **kwargs):
        raise RuntimeError("runner failed")

    monkeypatch.setattr(su, "make_engine", make_engine)
    monkeypatch.setattr(su, "make_runner", make_runner)
    with pytest.raises(RuntimeError, match="runner failed"):
        with Trainer(make_config(tmp_path)) as trainer:
            trainer.train()
    assert len(made) == 1 and made[0].model is None  # closed although setup() never finished


def test_a_second_train_on_one_trainer_is_refused(tmp_path):
    """It trained from step 1 again: metrics.jsonl held steps 1, 2, 1, 2 and step_2 held other weights."""
    cfg = make_config(tmp_path, "steps=2")
    with Trainer(cfg) as trainer:
        assert len(trainer.train()) == 2
        rows = (trainer.run_dir / "metrics.jsonl").read_text()
        with pytest.raises(RagenError, match=r"^this Trainer has trained already \(to step 2\): a Trainer trains once") as err:
            trainer.train()
    assert "resume=True" in err.value.hints[0]
    assert (trainer.run_dir / "metrics.jsonl").read_text() == rows
