"""Env pools: the local and the process pool pass the same conformance checks; pools by name."""

from __future__ import annotations

import os
import re
import signal

import pytest

from ragen_core import registry
from ragen_core.errors import ConfigError, EnvError, PluginConfigError, PluginNotFoundError, UsageError
from ragen_core.interfaces.env import EnvConfig
from ragen_core.interfaces.env_pool import EnvRef, ResetRequest, StepRequest
from ragen_core.rollout.env_pool import ASYNC_STEP_THREADS, LocalEnvPool
from ragen_core.rollout.process_pool import ProcessEnvPool
from ragen_core.specs import EnvSpec
from ragen_core.testing.pool_checks import POOL_CHECKS, TOY
from ragen_core.testing.toy_env import register_toy_env


def local_pool(env: EnvRef, step_timeout_s: float | None) -> LocalEnvPool:
    return LocalEnvPool(env, step_timeout_s=step_timeout_s)


def process_pool(env: EnvRef, step_timeout_s: float | None) -> ProcessEnvPool:
    # Two workers: the timeout check's two episodes then live in different workers.
    return ProcessEnvPool(env, workers=2, step_timeout_s=step_timeout_s)


@pytest.mark.parametrize("check", list(POOL_CHECKS))
@pytest.mark.parametrize("make", [local_pool, process_pool], ids=["local", "process"])
def test_pool_conformance(make, check):
    POOL_CHECKS[check](make)


def test_killed_process_worker_fails_its_episodes_and_is_replaced():
    requests = [ResetRequest(i, 30 + i, 0) for i in range(4)]
    with ProcessEnvPool(TOY, workers=2) as pool:
        pool.reset(requests)
        pids = pool.worker_pids()
        os.kill(pids[1], signal.SIGKILL)  # worker 1 holds episodes 1 and 3
        outcomes = pool.step([StepRequest(i, ("Right",)) for i in range(4)])
        assert [o.end_reason for o in outcomes] == ["", "failed", "", "failed"]
        assert outcomes[0].executed == ["Right"] and outcomes[1].executed == []
        assert f"worker 1 (pid {pids[1]}) died with exit code -{int(signal.SIGKILL)}" in outcomes[1].error
        assert "episode 3" in outcomes[3].error and "\n" not in outcomes[3].error
        # The rollout goes on: a failed episode has ended (a step for it is refused), and the next reset starts a fresh worker.
        with pytest.raises(UsageError, match=r"^env 'toy-slow-corridor' \(seed 33, member 0\), episode 3, has ended \(failed\) and cannot"):
            pool.step([StepRequest(0, ("Left",)), StepRequest(3, ("Left",))])
        starts = pool.reset(requests)
        assert [s.episode_id for s in starts] == [0, 1, 2, 3]
        new = pool.worker_pids()
        assert new[0] == pids[0] and new[1] != pids[1]
        assert [o.end_reason for o in pool.step([StepRequest(i, ("Right",)) for i in range(4)])] == ["", "", "", ""]
    assert pool.worker_pids() == {}


def test_an_episode_of_a_replaced_worker_fails_at_its_next_step_and_is_refused_after():
    """An episode whose worker was replaced while another episode's step ran has not been told it
    ended: its next step says so (``"failed"``); only a step after that one is refused."""
    requests = [ResetRequest(i, 30 + i, 0) for i in range(4)]
    with ProcessEnvPool(TOY, workers=2, step_timeout_s=1.5) as pool:
        pool.reset(requests)
        assert pool.step([StepRequest(1, ("Wait",))])[0].end_reason == "timeout"  # worker 1 also held episode 3
        (lost,) = pool.step([StepRequest(3, ("Right",))])
        assert lost.end_reason == "failed" and "did not finish episode 1's step" in lost.error
        with pytest.raises(UsageError, match=r"^env 'toy-slow-corridor' \(seed 33, member 0\), episode 3, has ended \(failed\)"):
            pool.step([StepRequest(3, ("Right",))])
        with pytest.raises(UsageError, match=r"\(seed 31, member 0\), episode 1, has ended \(timeout\)"):
            pool.step([StepRequest(1, ())])


def test_a_warning_logged_in_a_process_worker_names_the_worker():
    """It went to the worker's stderr, glued to the progress bar and past the trainer's logging."""
    from ragen_core.testing.pool_checks import check_env_warnings_reach_this_process

    assert re.match(r"process pool worker [01] \(pid \d+\): env 'unsaid'", check_env_warnings_reach_this_process(process_pool))


def test_process_pool_refuses_env_registered_in_process_only():
    name = register_toy_env()
    with pytest.raises(ConfigError, match=f"env '{name}' is registered in this process only") as info:
        ProcessEnvPool(EnvRef(name=name), workers=1)
    assert "EnvRef(factory=" in str(info.value)


def test_process_pool_reports_an_env_its_worker_cannot_build():
    broken = EnvRef(name="broken", factory="ragen_core.testing.toy_env:NoSuchEnv")
    with ProcessEnvPool(broken, workers=1) as pool, pytest.raises(EnvError, match=r"worker \(pid \d+\) could not build env 'broken': .*NoSuchEnv"):
        pool.reset([ResetRequest(0, 1)])


def test_process_pool_builds_an_installed_env_by_name():
    if "bandit" not in registry.names("env"):
        pytest.skip("ragen-env-bandit is not installed")
    env = EnvRef(name="bandit")
    request = ResetRequest(0, 5, 1, "val")
    with ProcessEnvPool(env, workers=1) as remote, LocalEnvPool(env) as here:
        assert remote.reset([request]) == here.reset([request])
        action = here.reset([request])[0].facts.action_names[0]
        remote.reset([request])
        assert remote.step([StepRequest(0, (action,))]) == here.step([StepRequest(0, (action,))])


def test_process_pool_sizes_workers_from_env_resources():
    if "bandit" not in registry.names("env"):
        pytest.skip("ragen-env-bandit is not installed")
    cores = os.cpu_count() or 1
    assert ProcessEnvPool(EnvRef(name="bandit")).size == cores  # resources.cpus defaults to 1
    assert ProcessEnvPool(EnvRef(name="bandit"), workers=3).size == 3


def test_local_pool_threads_follow_async_step():
    registry.register(EnvSpec(name="pool-test-async", config_model=EnvConfig, factory="ragen_core.testing.toy_env:CorridorEnv", async_step=True))
    try:
        assert LocalEnvPool(EnvRef(name="pool-test-async")).threads == ASYNC_STEP_THREADS
        assert LocalEnvPool(EnvRef(name="pool-test-async"), threads=2).threads == 2
        assert LocalEnvPool(EnvRef(name=register_toy_env())).threads == 1
    finally:
        registry.unregister("env", "pool-test-async")


def test_local_pool_env_factory_needs_no_registry():
    from ragen_core.testing.toy_env import CorridorEnv

    with LocalEnvPool(EnvRef(name="not-registered"), env_factory=lambda: CorridorEnv(length=4)) as pool:
        (start,) = pool.reset([ResetRequest(0, 3)])
        assert len(start.observation) == 4 and start.facts.action_names == ("Left", "Right")


def test_pools_by_name_with_validated_config():
    local = registry.make("pool", "local", {"threads": 2, "step_timeout_s": 3}, env=TOY)
    assert isinstance(local, LocalEnvPool) and local.threads == 2 and local.config.step_timeout_s == 3 and local.env == TOY
    process = registry.make("pool", "process", {"workers": 1}, env=TOY)
    assert isinstance(process, ProcessEnvPool) and process.size == 1
    process.close()
    with pytest.raises(PluginConfigError, match=r"pool\.local\.thread: unknown key"):
        registry.make("pool", "local", {"thread": 2}, env=TOY)
    with pytest.raises(PluginNotFoundError, match="no pool named 'no-such-pool'") as info:
        registry.make("pool", "no-such-pool", {}, env=TOY)
    assert "local" in str(info.value) and "process" in str(info.value)


def test_make_runner_builds_the_configured_pool():
    from ragen_core.models.tiny import build_byte_tokenizer
    from ragen_core.trainer.config import RunConfig
    from ragen_core.trainer.setup import make_runner

    tok = build_byte_tokenizer()
    name = register_toy_env()
    config = RunConfig(env=name, env_config={"length": 6}, rollout={"pool": "local", "pool_config": {"threads": 3}, "max_turns": 2})
    runner = make_runner(config, engine=None, tokenizer=tok, mode="val", groups=2, group_size=1)
    assert isinstance(runner.pool, LocalEnvPool) and runner.pool.threads == 3
    assert runner.pool.env == EnvRef(name=name, config={"length": 6, "max_turns": 2})
    bad = RunConfig(env=name, rollout={"pool": "local", "pool_config": {"workers": 2}})
    with pytest.raises(PluginConfigError, match=r"pool\.local\.workers: unknown key"):
        make_runner(bad, engine=None, tokenizer=tok)



def test_process_workers_ignore_ctrl_c_so_the_step_being_finished_keeps_its_episodes():
    # Ctrl-C in a terminal signals the whole process group; the trainer finishes the step on it, so
    # a worker that died of KeyboardInterrupt would fail that step's episodes.
    requests = [ResetRequest(i, 30 + i, 0) for i in range(2)]
    with ProcessEnvPool(TOY, workers=2) as pool:
        pool.reset(requests)
        pids = pool.worker_pids()
        for pid in pids.values():
            os.kill(pid, signal.SIGINT)
        outcomes = pool.step([StepRequest(i, ("Right",)) for i in range(2)])
        assert [o.end_reason for o in outcomes] == ["", ""], [o.error for o in outcomes]
        assert pool.worker_pids() == pids


def test_a_process_worker_that_dies_keeps_the_warning_it_logged_first(caplog):
    """Warnings rode with the next reply: a worker that died before it lost them (its death was said
    without its last words)."""
    from ragen_core.testing.toy_env import DYING_TOY_FACTORY

    with ProcessEnvPool(EnvRef(name="dying", factory=DYING_TOY_FACTORY, config={"length": 5}), workers=1) as pool:
        pool.reset([ResetRequest(0, 3, 0)])
        pid = pool.worker_pids()[0]
        with caplog.at_level("WARNING"):
            (outcome,) = pool.step([StepRequest(0, ("Die",))])
    assert outcome.end_reason == "failed" and "died with exit code 3" in outcome.error
    said = [r.getMessage() for r in caplog.records if "about to die" in r.getMessage()]
    assert said == [f"process pool worker 0 (pid {pid}): about to die (pid {pid})"]


def test_a_process_worker_that_dies_while_resetting_is_replaced_and_its_episodes_reset(tmp_path):
    """The whole run stopped (with the hint about 'if __name__ == "__main__"'); the Ray pool already
    replaced an actor that died while resetting and reset its episodes once more."""
    from ragen_core.errors import EnvError
    from ragen_core.testing.toy_env import DYING_TOY_FACTORY

    once = EnvRef(name="dying", factory=DYING_TOY_FACTORY, config={"length": 5, "die_on_reset": str(tmp_path / "died")})
    with ProcessEnvPool(once, workers=2) as pool:
        starts = pool.reset([ResetRequest(i, 3, i) for i in range(4)])
        assert [s.episode_id for s in starts] == [0, 1, 2, 3] and (tmp_path / "died").exists()
        assert [o.end_reason for o in pool.step([StepRequest(i, ("Right",)) for i in range(4)])] == ["", "", "", ""]
    always = EnvRef(name="dying", factory=DYING_TOY_FACTORY, config={"die_on_reset": str(tmp_path / "never"), "die_on_reset_once": False})
    with ProcessEnvPool(always, workers=1) as pool, pytest.raises(EnvError) as info:
        pool.reset([ResetRequest(0, 3, 0)])
    assert "died with exit code 3 while resetting" in info.value.message
    assert info.value.hints == []  # it started: the spawn hint is for a worker that could not


def test_a_reset_past_reset_timeout_s_names_the_env_and_the_seed():
    """The process pool said only "process pool worker 0 (pid N) did not reset its episodes", with no env or seed."""
    from ragen_core.testing.toy_env import SLOW_TOY_FACTORY

    slow = EnvRef(name="slow", factory=SLOW_TOY_FACTORY, config={"reset_sleep_s": 60})
    with LocalEnvPool(slow, reset_timeout_s=0.5) as pool, pytest.raises(EnvError) as info:
        pool.reset([ResetRequest(0, 7, 1)])
    assert info.value.message == ("env 'slow' (seed 7, member 1) did not reset within reset_timeout_s=0.5: raise it "
                                  "(rollout.pool_config.reset_timeout_s in a run; null waits forever) if its resets load data or start a service")
    with ProcessEnvPool(slow, workers=1, reset_timeout_s=1) as pool, pytest.raises(EnvError) as info:
        pool.reset([ResetRequest(0, 7, 0), ResetRequest(1, 7, 1), ResetRequest(2, 8, 0)])
    assert re.fullmatch(r"env 'slow' \(seed 7, member 0\) and 2 more episodes did not reset within reset_timeout_s=1 "
                        r"in process pool worker 0 \(pid \d+\): raise it \(rollout\.pool_config\.reset_timeout_s in a run; .*",
                        info.value.message), info.value.message


KILLED_TRAINER = """
from ragen_core.interfaces.env_pool import EnvRef, ResetRequest, StepRequest
from ragen_core.rollout.process_pool import ProcessEnvPool
ref = EnvRef(name="slow", factory="ragen_core.testing.toy_env:SlowCorridorEnv", config={"sleep_s": 300})
pool = ProcessEnvPool(ref, workers=1)
pool.reset([ResetRequest(0, 1)])
print(next(iter(pool.worker_pids().values())), flush=True)
pool.step([StepRequest(0, ("Wait",))])  # the worker blocks 300 s in this step
"""


def test_a_worker_busy_in_a_step_dies_with_a_trainer_killed_by_sigkill():
    """It lived on under init until its step returned (idle workers ended: their pipe closed)."""
    import subprocess
    import sys
    import time

    trainer = subprocess.Popen([sys.executable, "-c", KILLED_TRAINER], stdout=subprocess.PIPE, text=True)
    worker = 0
    try:
        worker = int(trainer.stdout.readline())
        time.sleep(1.0)  # the step is under way in the worker
        trainer.kill()
        trainer.wait(10)
        deadline = time.monotonic() + 20  # the worker checks its parent every 0.5 s; 20 s is only reached by a failure
        while time.monotonic() < deadline and _alive(worker):
            time.sleep(0.1)
        assert not _alive(worker), "the worker outlived its killed trainer"
    finally:
        trainer.kill()
        if worker and _alive(worker):
            os.kill(worker, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")
