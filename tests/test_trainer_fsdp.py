"""FSDP training (``distributed.strategy=fsdp``, ``torchrun``, gloo, 2 CPU processes) is the one-process step on the same global batch.

One PPO step (critic and actor) with a KL loss on the tiny model, shaped so that every place where ranks could fall
out of step is hit: 9 rows (the no-grad old-log-prob and reference passes split 5 / 4 rows, so rank
1 pads; the value pass too), three mini-batches of 4, 4 and 1 rows in micro-batches of 2 (the last mini-batch has one
micro-batch: rank 1 runs a zero-weight padding micro-batch). Run once with ``torchrun`` and once as
one process; what rank 0 wrote is compared with what the one process wrote. Checkpoints are whole
(weights and optimiser states keyed as in one process): FSDP resumes one process's checkpoint and
trains the step one process trains from it; one process resumes FSDP's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ragen_core.errors import ConfigError
from ragen_core.testing.run_helpers import distributed_child_env, first_step, run_files, torchrun_command
from ragen_core.trainer.config import RunConfig
from ragen_core.trainer.distributed import World, check_supported

# Exact: the episodes (ids, rewards, groups), the run folder's file list, the metric keys. Floats,
# as in test_trainer_ddp.py: both runs do the same float32 operations on the same values except for
# the order gradients are summed in (FSDP's reduce-scatter of the two ranks' parts), micro-batches
# of different rows in the no-grad passes (padding), and the plain forward instead of the shared-
# prompt one (FSDP turns it off; test_trainer_shared_prefix.py: <= 1.4 eps * (1 + |logp|)).
# Measured here: metrics within 0.7 eps * (1 + |x|).
EPS32 = 2.0**-23  # torch.finfo(torch.float32).eps
ROUNDING = 64.0  # metrics: the DDP test's bound (its runs measured 7 eps), ~90x the 0.7 eps measured here
# Weights through their update (w_after - w_before): AdamW divides each entry by its own magnitude,
# so rounding in a small, cancelling gradient entry shows in its update, and here three Adam steps
# follow each other (the second and third start from weights that already differ by rounding).
# Measured on this run: FSDP's actor updates within 2.0e-2 lr of one process's (6 of 1.8M entries
# beyond 1e-2 lr; DDP on the same three steps: 1.3e-2 lr), the critic's within 1.2e-3 lr. A real error moves whole updates by ~lr: ranks
# stepping on their own gradients (3.5 lr in the DDP test), a padding micro-batch that is not
# zero-weighted; a gradient that misses a rank's part or is averaged over ranks changes
# actor/grad_norm (it did by 12% when the optimiser's and the clip's parameters parted).
UPDATE_TOL = 0.1  # in units of lr: 5x the measured 2.0e-2, 10x below a real error
LR = 1e-4

ARGS = [
    "run", "--env", "bandit", "--algo", "ppo", "--steps", "1", "--no-progress",
    "warm_start.enabled=false", "rollout.env_groups=3", "rollout.group_size=3",
    "optim.mini_batch_size=4", "optim.micro_batch_size=2", f"optim.lr={LR}", f"optim.critic_lr={LR}",
    "algo_config.use_kl_loss=true", "algo_config.kl_loss_coef=0.1",
    "sampling.train.max_new_tokens=10", "test_freq=0", "save_freq=-1", "save_rollouts=true",
    "device=cpu",  # gloo ranks on the CPU, also where a GPU is visible (device=auto would take nccl, one GPU per rank)
]


def test_two_fsdp_ranks_train_the_one_process_step(tmp_path):
    from ragen_core.models import load_model_and_tokenizer

    torchrun = torchrun_command(2)
    one = subprocess.Popen([sys.executable, "-m", "ragen_core.cli.main", *ARGS, "--run-dir", str(tmp_path / "one")],
                           env=distributed_child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    two = subprocess.run([*torchrun, *ARGS, "distributed.strategy=fsdp", "--run-dir", str(tmp_path / "two")], env=distributed_child_env(),
                         capture_output=True, text=True, timeout=300)
    out_one = one.communicate(timeout=300)[0]
    assert one.returncode == 0, out_one[-3000:]
    assert two.returncode == 0, (two.stdout + two.stderr)[-3000:]
    assert two.stdout.count("run directory:") == 1  # rank 0 reports; rank 1 says nothing

    m1, w1, o1, r1 = first_step(tmp_path / "one")
    m2, w2, o2, r2 = first_step(tmp_path / "two")
    fields = ("group_id", "member", "seed", "success")
    assert [{k: r[k] for k in fields} | {"ids": [t["response_ids"] for t in r["turns"]]} for r in r2] == \
           [{k: r[k] for k in fields} | {"ids": [t["response_ids"] for t in r["turns"]]} for r in r1]
    assert [[t["reward"] for t in r["turns"]] for r in r2] == [[t["reward"] for t in r["turns"]] for r in r1]
    assert run_files(tmp_path / "two") == run_files(tmp_path / "one")  # only rank 0 wrote, and the same files

    keys = {k for k in m1 if not k.startswith("timing_s/")}
    assert keys == {k for k in m2 if not k.startswith("timing_s/")}
    assert m1["actor/grad_norm"] > 0 and m1["critic/grad_norm"] > 0 and m1["actor/kl_loss"] != 0
    assert m1["train/num_mini_batches"] == 3.0
    for k in sorted(keys):
        a, b = m1[k], m2[k]
        if isinstance(a, float) and isinstance(b, float):
            assert abs(a - b) <= ROUNDING * EPS32 * (1 + abs(a)), (k, a, b)
        else:
            assert a == b, k

    start, _ = load_model_and_tokenizer("tiny")  # both runs started from these weights (no warm start)
    before = start.state_dict()
    assert w1.keys() == w2.keys()
    moved = 0.0
    for name, after_one in w1.items():
        up1, up2 = after_one.float() - before[name].float(), w2[name].float() - before[name].float()
        assert float((up1 - up2).abs().max()) <= UPDATE_TOL * LR, name
        moved = max(moved, float(up1.abs().max()))
    assert moved > 0.5 * LR  # three Adam steps moved the weights

    c1, c2 = o1["critic"], o2["critic"]
    assert c1.keys() == c2.keys()
    for name in c1:  # the critic's head starts random: compare its weights directly, same bound
        assert float((c1[name].float() - c2[name].float()).abs().max()) <= UPDATE_TOL * LR, name

    # the optimiser states are whole and indexed as in one process (a one-process run resumes below)
    for key in ("optimizer", "critic_optimizer"):
        assert o2[key]["param_groups"] == o1[key]["param_groups"] and o2[key]["state"].keys() == o1[key]["state"].keys()
        for i, s1 in o1[key]["state"].items():
            assert torch.equal(o2[key]["state"][i]["step"], s1["step"])
            assert o2[key]["state"][i]["exp_avg"].shape == s1["exp_avg"].shape
    _checkpoints_move_between_one_process_and_fsdp(tmp_path)



def _compare(m1: dict, m2: dict, w1: dict, w2: dict, before: dict, r1: list, r2: list) -> None:
    """Same episodes (exact), metrics within rounding, weight updates within UPDATE_TOL lr."""
    fields = ("group_id", "member", "seed", "success")
    assert [{k: r[k] for k in fields} | {"ids": [t["response_ids"] for t in r["turns"]]} for r in r2] == \
           [{k: r[k] for k in fields} | {"ids": [t["response_ids"] for t in r["turns"]]} for r in r1]
    keys = {k for k in m1 if not k.startswith("timing_s/")}
    assert keys == {k for k in m2 if not k.startswith("timing_s/")}
    for k in sorted(keys):
        a, b = m1[k], m2[k]
        if isinstance(a, float) and isinstance(b, float):
            assert abs(a - b) <= ROUNDING * EPS32 * (1 + abs(a)), (k, a, b)
        else:
            assert a == b, k
    for name, after_one in w1.items():
        up1, up2 = after_one.float() - before[name].float(), w2[name].float() - before[name].float()
        assert float((up1 - up2).abs().max()) <= UPDATE_TOL * LR, name


def _checkpoints_move_between_one_process_and_fsdp(tmp_path: Path) -> None:
    """After the step-1 runs ``one`` (one process) and ``two`` (FSDP): one's checkpoint resumed with
    FSDP trains the step one process trains from it (the optimiser state is loaded into the shards:
    a lost Adam moment would change the update), and one process resumes two's checkpoint."""
    import shutil

    from safetensors.torch import load_file

    torchrun = torchrun_command(2)
    shutil.copytree(tmp_path / "one", tmp_path / "one_fsdp")
    step2 = [*ARGS, "--steps", "2", "--resume"]
    procs = {
        "one": subprocess.Popen([sys.executable, "-m", "ragen_core.cli.main", *step2, str(tmp_path / "one")], env=distributed_child_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
        "one_fsdp": subprocess.Popen([*torchrun, *step2, str(tmp_path / "one_fsdp"), "distributed.strategy=fsdp"], env=distributed_child_env(),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
        "two": subprocess.Popen([sys.executable, "-m", "ragen_core.cli.main", *step2, str(tmp_path / "two"), "distributed.strategy=ddp"],
                                env=distributed_child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
    }
    for name, proc in procs.items():
        out = proc.communicate(timeout=300)[0]
        assert proc.returncode == 0, (name, out[-3000:])

    def step_2(run: str) -> tuple[dict, dict, list[dict]]:
        run_dir = tmp_path / run
        metrics = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[1])
        rollouts = [json.loads(line) for line in (run_dir / "rollouts" / "step_2.jsonl").read_text().splitlines()]
        return metrics, load_file(run_dir / "checkpoints" / "step_2" / "model.safetensors"), rollouts

    m1, w1, r1 = step_2("one")
    m2, w2, r2 = step_2("one_fsdp")
    _compare(m1, m2, w1, w2, load_file(tmp_path / "one" / "checkpoints" / "step_1" / "model.safetensors"), r1, r2)
    m3, _, _ = step_2("two")  # the FSDP run's checkpoint, resumed by one process, trains
    assert m3["actor/grad_norm"] > 0 and m3["critic/grad_norm"] > 0


def test_fsdp_needs_several_ranks_and_refuses_lora():
    with pytest.raises(ConfigError, match=r"distributed.strategy=fsdp needs several ranks"):
        check_supported(RunConfig(distributed={"strategy": "fsdp"}), World())
    with pytest.raises(ConfigError, match=r"optim.peft.rank=8 \(LoRA\) is not supported with distributed.strategy=fsdp"):
        RunConfig(distributed={"strategy": "fsdp"}, optim={"peft": {"rank": 8}})  # refused as a setting (--print-config too)
    check_supported(RunConfig(), World())  # ddp in one process: nothing to refuse
