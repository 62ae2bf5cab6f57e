"""The lean env trains for one step with the tiny model, checked by the REPL stand-in
(tests/lean_repl_double.py): it proves the env works inside the trainer (threads of the local
pool, the shared REPL process, rewards into metrics), not that the tiny model proves anything."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from ragen_env_lean.repl import close_shared

from ragen_core.cli.main import main
from ragen_core.testing.run_helpers import one_line_error
from ragen_core.testing.train_checks import TINY_RUN, train

DOUBLE = str(Path(__file__).with_name("lean_repl_double.py"))


@pytest.fixture()
def repl_closed_after():
    """The shared REPL process the run started is stopped after the test."""
    yield
    close_shared()


@pytest.mark.usefixtures("one_torch_thread", "repl_closed_after")
def test_one_training_step_with_the_stand_in(tmp_path):
    overrides = [
        *TINY_RUN, "env=lean", f"env_config.repl_command=[{sys.executable}, {DOUBLE}]", "env_config.max_turns=1",
        "env_config.max_actions_per_turn=2", "rollout.max_model_len=1536",
        "sampling.train.max_new_tokens=16", "sampling.val.max_new_tokens=16",
        "val_groups=2", "test_freq=1", "steps=1", f"run_dir={tmp_path / 'run'}",
    ]
    _, (row,) = train(overrides)
    for key in ("train/success", "train/reward", "actor/pg_loss", "actor/grad_norm"):
        assert math.isfinite(row[key]), key
    assert 0.0 <= row["train/success"] <= 1.0 and "val-env/success" in row


@pytest.mark.usefixtures("one_torch_thread", "repl_closed_after")
def test_a_repl_command_that_is_not_a_lean_repl_ends_the_run_in_one_line(tmp_path, capsys):
    """``repl_command=cat`` echoes every request back: before, each echo was read as a clean proof
    (success 1.0, exit 0); now the run stops at the first reset, naming the setting."""
    command = "/bin/cat"
    if not Path(command).exists():  # the same echo where there is no cat
        (tmp_path / "echo.py").write_text("import sys\nfor line in sys.stdin:\n    sys.stdout.write(line)\n    sys.stdout.flush()\n")
        command = f"[{sys.executable}, {tmp_path / 'echo.py'}]"
    code = main(["run", "--env", "lean", "--steps", "1", "--run-dir", str(tmp_path / "run"), *TINY_RUN,
                 f"env_config.repl_command={command}", "rollout.max_model_len=1536",
                 "sampling.train.max_new_tokens=16", "sampling.val.max_new_tokens=16", "val_groups=2"])
    line = one_line_error(capsys.readouterr().err)
    assert code == 2
    assert "ConfigError: lean env: env_config.repl_command '" in line and "' is not a Lean REPL (" in line, line
    assert "set env_config.repl_command to the community Lean REPL" in line
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # nothing trained
