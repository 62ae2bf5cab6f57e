"""Data-parallel training (``torchrun``, gloo, 2 CPU processes) is the one-process step on the same global batch.

The end-to-end test trains one PPO step (critic and actor, two mini-batches of two micro-batches
each, so the old-log-prob and value passes are split over ranks too) on the tiny model, once with
``torchrun --standalone --nproc_per_node 2 -m ragen_core.cli.main run ...`` and once as one
process, and compares what rank 0 wrote with what the one process wrote.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from ragen_core.errors import ConfigError
from ragen_core.testing.run_helpers import distributed_child_env, first_step, run_files, torchrun_command
from ragen_core.trainer.distributed import ONE, World, from_env

# What must be exact is compared exactly: the sampled episodes (ids, rewards, groups), the run
# folder's file list, the metric keys. Floats are compared in float32 epsilons. The two runs do
# the same float32 operations on the same values except for the order in which gradients are
# summed (rank 0's micro-batches + rank 1's, by one all_reduce) and the shared-prompt forward
# running over one rank's rows instead of the mini-batch's (see test_trainer_shared_prefix.py:
# reordered float32 sums agree to <= 1.4 eps * (1 + |logp|) for log-probs and <= 19 eps of a
# gradient's largest entry). Measured here: metrics within 7 eps * (1 + |x|) (grad norms 1 eps).
EPS32 = 2.0**-23  # torch.finfo(torch.float32).eps
ROUNDING = 64.0  # metrics: ~9x the measured 7 eps
# Weights are compared through the update they received (w_after - w_before, start weights equal).
# AdamW divides each gradient entry by its own magnitude (+1e-8), so an entry that is a small sum of
# cancelling parts turns an absolute rounding error of a few eps of the gradient's scale into a
# visible change of its update. Measured: the updates of the two runs differ by <= 1.4e-4 * lr. A
# real error moves whole updates: ranks stepping on their own gradients (no all_reduce) changed
# them by 3.5 lr. A wrong gradient *scale* (a mean over ranks instead of the sum) barely moves
# Adam's update; the grad-norm and loss metrics catch it (a factor of 2).
UPDATE_TOL = 2e-3  # in units of lr: ~14x the measured 1.4e-4, >1000x below the error above
LR = 1e-4

ARGS = [
    "run", "--env", "bandit", "--algo", "ppo", "--steps", "1", "--no-progress",
    "warm_start.enabled=false", "rollout.env_groups=2", "rollout.group_size=4",
    "optim.mini_batch_size=4", "optim.micro_batch_size=2", f"optim.lr={LR}", f"optim.critic_lr={LR}",
    "sampling.train.max_new_tokens=10", "test_freq=0", "save_freq=-1", "save_rollouts=true",
    "device=cpu",  # gloo ranks on the CPU, also where a GPU is visible (device=auto would take nccl, one GPU per rank)
]


def test_two_gloo_ranks_train_the_one_process_step(tmp_path):
    from ragen_core.models import load_model_and_tokenizer

    torchrun = torchrun_command(2)
    one = subprocess.Popen([sys.executable, "-m", "ragen_core.cli.main", *ARGS, "--run-dir", str(tmp_path / "one")],
                           env=distributed_child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    two = subprocess.run([*torchrun, *ARGS, "--run-dir", str(tmp_path / "two")], env=distributed_child_env(), capture_output=True, text=True,
                         timeout=300)
    out_one = one.communicate(timeout=300)[0]
    assert one.returncode == 0, out_one[-3000:]
    assert two.returncode == 0, (two.stdout + two.stderr)[-3000:]
    assert two.stdout.count("run directory:") == 1  # rank 0 reports; rank 1 says nothing

    m1, w1, s1, r1 = first_step(tmp_path / "one")
    c1 = s1["critic"]
    m2, w2, s2, r2 = first_step(tmp_path / "two")
    c2 = s2["critic"]
    # the global batch: the same episodes, sampled with the same seeds, in the same group order
    fields = ("group_id", "member", "seed", "success")
    assert [{k: r[k] for k in fields} | {"ids": [t["response_ids"] for t in r["turns"]]} for r in r2] == \
           [{k: r[k] for k in fields} | {"ids": [t["response_ids"] for t in r["turns"]]} for r in r1]
    assert [[t["reward"] for t in r["turns"]] for r in r2] == [[t["reward"] for t in r["turns"]] for r in r1]
    assert run_files(tmp_path / "two") == run_files(tmp_path / "one")  # only rank 0 wrote, and the same files

    keys = {k for k in m1 if not k.startswith("timing_s/")}
    assert keys == {k for k in m2 if not k.startswith("timing_s/")}
    assert m1["actor/grad_norm"] > 0 and m1["critic/grad_norm"] > 0  # the step trained both models
    for k in sorted(keys):
        a, b = m1[k], m2[k]
        if isinstance(a, float) and isinstance(b, float):
            assert abs(a - b) <= ROUNDING * EPS32 * (1 + abs(a)), (k, a, b)
        else:
            assert a == b, k

    start, _ = load_model_and_tokenizer("tiny")  # both runs started from these weights (no warm start)
    before = start.state_dict()
    moved = 0.0
    for name, after_one in w1.items():
        up1, up2 = after_one.float() - before[name].float(), w2[name].float() - before[name].float()
        assert float((up1 - up2).abs().max()) <= UPDATE_TOL * LR, name
        moved = max(moved, float(up1.abs().max()))
    assert moved > 0.5 * LR  # the actor did move (an Adam step moves weights by about lr)
    assert c1.keys() == c2.keys()
    for name in c1:  # the critic's head starts random: compare its weights directly, same bound
        assert float((c1[name].float() - c2[name].float()).abs().max()) <= UPDATE_TOL * LR, name


def test_share_splits_every_item_once_in_rank_order():
    for n in range(0, 11):
        for size in (1, 2, 3, 4):
            parts = [World(rank=r, size=size).share(n) for r in range(size)]
            assert [i for p in parts for i in p] == list(range(n))
            assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_one_process_without_torchrun(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert from_env("cpu") is ONE and ONE.main and not ONE.parallel


def test_world_size_without_torchrun_is_a_one_line_error(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    for key in ("RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(ConfigError, match=r"WORLD_SIZE=2 but RANK, MASTER_ADDR, MASTER_PORT is not set: .*torchrun"):
        from_env("cpu")



def test_more_cuda_ranks_than_gpus_is_a_one_line_error(monkeypatch):
    """torchrun --nproc_per_node 2 on a one-GPU machine: rank 1 has no cuda:1 (set_device raised 'invalid device ordinal')."""
    import torch

    monkeypatch.setenv("WORLD_SIZE", "2")
    for key, value in {"RANK": "1", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", lambda _d: pytest.fail("set_device reached for a GPU that is not there"))
    with pytest.raises(ConfigError, match=r"LOCAL_RANK=1 needs cuda:1, but this machine shows 1 CUDA device\(s\)") as err:
        from_env("cuda")
    assert "--nproc_per_node 1" in str(err.value)  # the hint: one rank per GPU

# On rank 1 only, the third rollout gather (step 3's: World.gather is called once per rollout) ends
# the process as a crash would, while rank 0 waits in that gather.
_DIE_ON_RANK_1 = """
import os
if os.environ.get("RANK") == "1":
    from ragen_core.trainer import distributed
    _calls = [0]
    _gather = distributed.World.gather
    def gather(self, items):
        _calls[0] += 1
        if _calls[0] == 3:
            os._exit(3)
        return _gather(self, items)
    distributed.World.gather = gather
"""


def test_a_rank_that_dies_in_the_rollout_leaves_rank_0_a_checkpoint_and_one_line(tmp_path):
    import os

    (tmp_path / "hook").mkdir()
    (tmp_path / "hook" / "sitecustomize.py").write_text(_DIE_ON_RANK_1)
    env = distributed_child_env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "hook"), *filter(None, [env.get("PYTHONPATH")])])
    args = list(ARGS)
    args[args.index("--steps") + 1] = "5"
    out = subprocess.run([*torchrun_command(2), *args, "--run-dir", str(tmp_path / "run")], env=env, capture_output=True, text=True,
                         timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode != 0
    assert "RankLostError: rank 0: a gather (all_gather_object) over 2 ranks failed: another rank stopped or crashed" in text, text[-3000:]
    assert "step 3 failed: saved checkpoints/step_2, the last finished step" in text, text[-3000:]
    assert "[rank0]: Traceback" not in text, text[-3000:]
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step_2"]
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 2


def test_backend_errors_of_unwrapped_collectives_become_one_line():
    from ragen_core.trainer.distributed import RankLostError, rank_lost

    two = World(rank=1, size=2)
    gloo = RuntimeError("[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:1. "
                        "This is typically caused by a remote worker crashing.")
    lost = rank_lost(two, gloo)
    assert isinstance(lost, RankLostError)
    assert lost.message == ("rank 1: a collective inside FSDP over 2 ranks failed: another rank stopped or crashed "
                            "([/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:1)")
    assert rank_lost(two, RuntimeError("mat1 and mat2 shapes cannot be multiplied")) is None  # a bug, not a lost rank
    assert rank_lost(two, ValueError("gloo")) is None
    assert rank_lost(ONE, gloo) is None  # one process has no other rank to lose


def test_a_config_error_under_torchrun_is_printed_once_and_named_in_torchruns_summary(tmp_path):
    """Every rank meets the same config error: rank 0 prints it, and each rank writes it to the
    error file torchrun gives it, so torchrun's failure summary names it instead of a docs link."""
    out = subprocess.run([*torchrun_command(2), "run", "--env", "bandit", "--steps", "1", "--run-dir", str(tmp_path / "run"), "optim.lr=-1"],
                         env=distributed_child_env(), capture_output=True, text=True, timeout=300)
    text = out.stdout + out.stderr
    line = "ConfigError: invalid config: optim.lr: Input should be greater than 0 (got -1)"
    assert out.returncode != 0
    assert [x for x in text.splitlines() if x.startswith("ConfigError")] == [line], text[-3000:]
    assert text.count(f"traceback : {line}") == 2, text[-3000:]  # torchrun's summary: one entry per failed rank
    assert "To enable traceback see" not in text, text[-3000:]
    assert not (tmp_path / "run").exists()
