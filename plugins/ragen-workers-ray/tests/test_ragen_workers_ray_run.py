"""``ragen run --workers ray``: one training step on sokoban with the envs in Ray actors, and a
cluster address that does not answer stopping the run before any training.

The pool starts (and, when the run closes it, stops) its own local Ray here: the one Ray start
of this module.
"""

from __future__ import annotations

import os
import socket
import sys
import time

import pytest

from ragen_core.testing.installed import require_distribution

require_distribution("ray", module_level=True)
require_distribution("ragen-env-sokoban", module_level=True)

import ray  # noqa: E402
from ragen_workers_ray.pool import RayEnvPool  # noqa: E402

from ragen_core import registry  # noqa: E402
from ragen_core.cli.main import main  # noqa: E402
from ragen_core.testing.run_helpers import one_line_error  # noqa: E402
from ragen_core.trainer.loggers import read_metrics  # noqa: E402

pytestmark = pytest.mark.skipif("grpo" not in registry.names("algorithm"),
                                reason="needs the default algorithm (ragen-algo-grpo)")

RUN = ["run", "--env", "sokoban", "--workers", "ray", "--steps", "1", "warm_start.enabled=false", "rollout.env_groups=2",
       "rollout.group_size=2", "sampling.train.max_new_tokens=24", "test_freq=0", "save_freq=0", "progress=false"]


def test_unreachable_ray_address_stops_the_run_before_training(tmp_path, capsys):
    with socket.socket() as s:  # a port nothing listens on: bound, then closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = main([*RUN, "--run-dir", str(tmp_path / "run"), f"rollout.pool_config.address=127.0.0.1:{port}"])
    assert code == 2
    line = one_line_error(capsys.readouterr().err)
    assert line.startswith(f"ConfigError: ray pool: no Ray cluster answers at address '127.0.0.1:{port}'")
    assert not (tmp_path / "run").exists()  # refused before the run folder, the model or a warm start
    assert not ray.is_initialized()


def test_one_training_step_with_envs_in_ray_actors(tmp_path, monkeypatch, capsys):
    stepped: list[int] = []
    original = RayEnvPool.step

    def counting_step(self, requests):
        stepped.append(len(requests))
        return original(self, requests)

    monkeypatch.setattr(RayEnvPool, "step", counting_step)
    assert not ray.is_initialized()
    code = main([*RUN, "--run-dir", str(tmp_path / "run"), "rollout.pool_config.local_cpus=2", "rollout.pool_config.workers=2"])
    assert code == 0, capsys.readouterr().err
    (row,) = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert row["step"] == 1 and 0.0 <= row["train/success"] <= 1.0
    assert stepped and stepped[0] == 4  # the first turn stepped all 4 episodes through the actors
    assert not ray.is_initialized()  # the run closed its pool, which stopped the Ray it started


_POOL_CHILD = """
import logging, sys, time
from ragen_workers_ray.pool import RayEnvPool
from ragen_core.interfaces.env_pool import EnvRef, ResetRequest
pool = RayEnvPool(EnvRef(name="bandit"), workers=1, local_cpus=1)
pool.reset([ResetRequest(0, seed=0)])  # Ray, its agents and the actor are up
print("ready", flush=True)
time.sleep(300)
"""


def _descendants(root: int) -> dict[int, str]:
    """pid -> start time of every process below ``root`` now."""
    procs = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                procs[int(name)] = (int(fields[1]), fields[19])
            except (OSError, IndexError, ValueError):
                pass
    found, todo = {}, [root]
    while todo:
        parent = todo.pop()
        for pid, (ppid, start) in procs.items():
            if ppid == parent and pid not in found:
                found[pid] = start
                todo.append(pid)
    return found


def _still_running(pid: int, start: str) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return False
    return fields[19] == start and fields[0] not in "ZX"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_trainer_killed_with_sigkill_leaves_no_ray_process_behind():
    """Its local Ray's dashboard and runtime-env agents lived on under init (helper-72's walk)."""
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", _POOL_CHILD], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    below: dict[int, str] = {}
    try:
        assert child.stdout.readline().strip() == "ready"
        time.sleep(1.5)  # the sweeper samples every second
        below = _descendants(child.pid)
        assert len(below) >= 3  # Ray's own processes, its agents, the actor, the sweeper
        child.kill()
        child.wait()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(_still_running(p, s) for p, s in below.items()):
            time.sleep(0.2)
        left = [p for p, s in below.items() if _still_running(p, s)]
        assert not left, [open(f"/proc/{p}/cmdline").read().replace("\0", " ")[:80] for p in left]
    finally:
        child.kill()
        for pid, start in {**below, **_descendants(child.pid)}.items():  # whatever a failure left: not into the next test
            if _still_running(pid, start):
                os.kill(pid, 9)
