"""Issue 13 item 7: a diverging run is reported as it happens, stops with exit code 2, and leaves
its last good checkpoint as the one ``--resume`` picks.

``optim.lr=1e4`` diverges the tiny model the way a far too high rate does: AdamW's first step
blows the weights up to huge but finite values (that step's own gradient norm is still finite),
and from the next step on every gradient norm is NaN, so every optimiser step is skipped. Before
the fix such a run ended with exit code 0, printed nothing, and checkpointed the broken weights
at every ``save_freq`` -- with ``keep=2`` they replaced the good checkpoints within two saves.
(``optim.lr=inf`` itself is now refused by the config.)
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ragen_core.cli.main import main
from ragen_core.testing.run_helpers import CHILD_MAIN, register_run_helpers
from ragen_core.testing.toy_env import TOY_ENV_NAME
from ragen_core.trainer.checkpoint import list_checkpoints, load_state, verify_checkpoint
from ragen_core.trainer.divergence import SkipMonitor
from ragen_core.trainer.loggers import read_metrics

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SETTINGS = [
    "--env", TOY_ENV_NAME, "--no-progress",
    "env_config.length=3", "env_config.max_turns=1", "env_config.max_actions_per_turn=1",
    "rollout.env_groups=2", "rollout.group_size=2", "rollout.max_model_len=512",
    "sampling.train.max_new_tokens=8", "sampling.val.max_new_tokens=8",
    "optim.mini_batch_size=4", "optim.micro_batch_size=2", "optim.lr=1e-3",  # one optimiser step per training step
    "test_freq=0", "save_freq=1", "warm_start.enabled=false",
]
DIVERGE = "optim.lr=1e4"


def _child_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_run_diverging_from_the_start_stops_with_exit_2_and_leaves_no_checkpoint_to_resume(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-c", CHILD_MAIN, "run", "--run-dir", str(run_dir), *SETTINGS, "--steps", "8",
                           DIVERGE, "optim.max_skipped_steps=1"], capture_output=True, text=True, env=_child_env(), timeout=600)
    err = proc.stderr
    assert proc.returncode == 2, err[-3000:]
    assert "Traceback" not in err
    last, hint = err.strip().splitlines()[-2:]
    assert hint == "hint: lower optim.lr and start again"
    assert last == ("TrainingError: training diverged at step 3: 2 optimiser steps in a row were skipped for a non-finite gradient "
                    "norm (optim.max_skipped_steps=1); step_1 holds the weights whose next step went non-finite, so it was renamed "
                    "step_1.diverged; no good checkpoint was written"), err[-3000:]
    # reported as they happened
    assert "step 2: skipped optimiser steps (actor 1/1): non-finite gradient norm; 1 in a row, the run stops after 1" in err
    assert "step 3: skipped optimiser steps (actor 1/1): non-finite gradient norm; 2 in a row, the run stops after 1" in err
    assert "step 2: no checkpoint written: the last 1 optimiser step(s) were skipped (non-finite gradient norm)" in err
    assert list_checkpoints(run_dir) == []  # nothing left that --resume or ragen eval would take for a trained model
    assert (run_dir / "checkpoints" / "step_1.diverged" / "trainer_state.pt").is_file()  # kept for inspection
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [r["actor/skipped_steps"] for r in rows] == [0.0, 1.0, 1.0]
    assert rows[-1]["diverged/skipped_optimizer_steps"] == 1.0


def test_diverging_after_resume_keeps_the_last_good_checkpoint_intact_and_resumable(tmp_path, capsys):
    register_run_helpers()
    run_dir = tmp_path / "run"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["run", "--run-dir", str(run_dir), *SETTINGS, "--steps", "2"]) == 0
    step_2 = run_dir / "checkpoints" / "step_2"
    good = _digest(step_2)
    capsys.readouterr()

    # step 3 blows the weights up (saved: finite, its gradient was finite), steps 4-6 skip: 3 in a row > 2 stops at step 6
    assert main(["run", "--resume", str(run_dir), "--no-progress", "steps=10", DIVERGE, "optim.max_skipped_steps=2"]) == 2
    err = capsys.readouterr().err
    last, hint = err.strip().splitlines()[-2:]
    assert hint == f"hint: lower optim.lr and resume from it: ragen run --resume {run_dir} optim.lr=..."
    assert last.startswith("TrainingError: training diverged at step 6: 3 optimiser steps in a row were skipped"), err[-3000:]
    assert last.endswith(f"step_3 holds the weights whose next step went non-finite, so it was renamed step_3.diverged; "
                         f"the last good checkpoint is {step_2}")
    assert [line.split(":")[0] for line in err.splitlines() if "no checkpoint written" in line] == ["step 4", "step 5", "step 6"]
    # step_2 is exactly as it was and is what --resume picks (step_1 was rotated out by step 3's save, as keep=2 says)
    assert [s for s, _ in list_checkpoints(run_dir)] == [2]
    assert _digest(step_2) == good
    verify_checkpoint(step_2)
    assert (run_dir / "checkpoints" / "step_3.diverged").is_dir()

    # and it resumes: with a sane learning rate the run goes on from step 3
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["run", "--resume", str(run_dir), "--no-progress", "steps=3", "optim.lr=1e-3"]) == 0
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[-1]["actor/skipped_steps"] == 0.0 and math.isfinite(rows[-1]["actor/grad_norm"])
    assert load_state(run_dir / "checkpoints" / "step_3")["step"] == 3


def test_skip_monitor_counts_in_a_row_and_a_clean_step_resets(capsys):
    monitor = SkipMonitor(limit=3, ppo_epochs=2)
    step = {"actor/skipped_steps": 1.0, "critic/skipped_steps": 0.0, "train/num_mini_batches": 2.0}
    assert monitor.observe(1, step) is False and monitor.in_a_row == 1
    expected = "step 1: skipped optimiser steps (actor 1/4, critic 0/4): non-finite gradient norm; 1 in a row, the run stops after 3"
    assert expected in capsys.readouterr().err
    assert monitor.unsafe_to_save() == "the last 1 optimiser step(s) were skipped (non-finite gradient norm)"
    assert monitor.observe(2, {"actor/skipped_steps": 0.0, "train/num_mini_batches": 2.0}) is False and monitor.in_a_row == 0
    assert capsys.readouterr().err == ""  # a clean step prints nothing
    assert monitor.unsafe_to_save() is None
    assert monitor.observe(3, {**step, "critic/skipped_steps": 2.0}) is False and monitor.in_a_row == 3  # actor and critic count together
    assert monitor.observe(4, step) is True and monitor.in_a_row == 4  # 4 > 3
    unlimited = SkipMonitor(limit=None, ppo_epochs=1)
    assert not any(unlimited.observe(s, {"actor/skipped_steps": 1.0}) for s in range(1, 100))


def test_non_finite_weights_are_unsafe_to_save():
    import torch

    model = torch.nn.Linear(2, 2)
    monitor = SkipMonitor(limit=3, ppo_epochs=1)
    assert monitor.unsafe_to_save(model, None) is None
    with torch.no_grad():
        model.weight[0, 0] = float("nan")
    assert monitor.unsafe_to_save(None, model) == "some weights are not finite (NaN or inf)"


def test_weights_finite_checks_every_module_with_one_host_sync_per_device(monkeypatch):
    import torch

    from ragen_core.trainer.divergence import weights_finite

    policy, critic = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 2)), torch.nn.Linear(2, 1)
    syncs = []
    real_bool = torch.Tensor.__bool__
    monkeypatch.setattr(torch.Tensor, "__bool__", lambda t: syncs.append(1) or real_bool(t))
    assert weights_finite(policy, None, critic) is True
    assert len(syncs) == 1  # 6 parameters on one device: one read back, not one per parameter (a GPU stall each)
    assert weights_finite(torch.nn.ReLU()) is True  # nothing to check
    with torch.no_grad():
        critic.bias[0] = float("inf")  # the last parameter of the last module
    assert weights_finite(policy, critic) is False


_SHARDED_NAN = """
import sys
import torch, torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from ragen_core.trainer.divergence import weights_finite
dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
fully_shard(model)
first = weights_finite(model)
if dist.get_rank() == 1:  # a NaN in rank 1's shard only
    with torch.no_grad():
        model[0].weight.to_local().view(-1)[0] = float("nan")
verdict = weights_finite(model)
uneven = torch.nn.Linear(4, 1)  # one row over two ranks: rank 1 holds no element of either parameter
fully_shard(uneven)
assert [p.to_local().numel() for p in uneven.parameters()] == ([4, 1] if dist.get_rank() == 0 else [0, 0])
even = weights_finite(uneven)
if dist.get_rank() == 0:  # a NaN on the one rank that holds the weights
    with torch.no_grad():
        uneven.weight.to_local().view(-1)[0] = float("nan")
uneven_verdict = weights_finite(uneven)
with open(f"{sys.argv[1]}/rank{dist.get_rank()}.txt", "w") as fh:  # a file per rank: their stdout lines interleave
    fh.write(f"{first} {verdict} {even} {uneven_verdict}")
dist.barrier()  # neither rank leaves while the other is still in a collective (gloo aborts then)
dist.destroy_process_group()
"""


def test_sharded_weights_are_judged_alike_on_every_rank(tmp_path):
    """A stack of FSDP2's DTensor flags could not be reduced ('Replicate to Partial(product)'), and a rank that looked at its
    own shard alone would stop while the other went on into a collective: one verdict, agreed by all ranks."""
    import subprocess

    from ragen_core.testing.run_helpers import distributed_child_env, torchrun_command

    script = tmp_path / "sharded_nan.py"
    script.write_text(_SHARDED_NAN)
    launcher = torchrun_command(2)[:-2]  # without its "-m ragen_core.cli.main": this script instead
    done = subprocess.run([*launcher, str(script), str(tmp_path)], env=distributed_child_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    # rank 0 agrees with rank 1's NaN; rank 1, holding nothing of the uneven model, agrees with rank 0's
    assert [(tmp_path / f"rank{r}.txt").read_text() for r in (0, 1)] == ["True False True False"] * 2
