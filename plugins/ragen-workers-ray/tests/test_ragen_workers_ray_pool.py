"""The ray pool: the core's pool conformance kit, and its faults (killed actor, hanging env, bad address).

One local Ray (2 CPUs, no dashboard) serves the whole module; every pool here joins it.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragen_core.testing.installed import require_distribution

require_distribution("ray", module_level=True)

import ray  # noqa: E402 - after the skip: ray is this distribution's dependency, optional for the suite
from ragen_workers_ray.pool import RayEnvPool  # noqa: E402

from ragen_core import registry  # noqa: E402
from ragen_core.errors import ConfigError, EnvError, UsageError  # noqa: E402
from ragen_core.interfaces.env_pool import EnvRef, ResetRequest, StepRequest  # noqa: E402
from ragen_core.rollout.env_pool import LocalEnvPool  # noqa: E402
from ragen_core.specs import EnvResources  # noqa: E402
from ragen_core.testing.pool_checks import POOL_CHECKS, SLEEP_S, TOY  # noqa: E402
from ragen_core.testing.toy_env import register_toy_env  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    yield
    if started:
        ray.shutdown()


def ray_pool(env: EnvRef, step_timeout_s: float | None) -> RayEnvPool:
    # Two actors: the timeout check's two episodes then live in different actors.
    return RayEnvPool(env, workers=2, step_timeout_s=step_timeout_s)


@pytest.mark.parametrize("check", list(POOL_CHECKS))
def test_ray_pool_conformance(check):
    POOL_CHECKS[check](ray_pool)


# Any action text (the runner sends what it mapped; unknown words are no-ops), never the blocking "Wait".
ACTIONS = st.sampled_from(["Left", "Right", "left", " RIGHT ", "Jump", ""])
PLANS = st.lists(st.dictionaries(st.integers(0, 5), st.lists(ACTIONS, max_size=3), min_size=1), min_size=1, max_size=4)


def test_random_rollouts_match_the_local_pool():
    # One pair of pools for every example; closed before the next test (the module's Ray has 2 CPUs, one per actor).
    with RayEnvPool(TOY, workers=2) as remote, LocalEnvPool(TOY) as here:

        @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(seed=st.integers(0, 2**31), members=st.integers(1, 3), plan=PLANS)
        def check(seed, members, plan):
            requests = [ResetRequest(i, seed + i // members, i % members) for i in range(6)]
            assert remote.reset(requests) == here.reset(requests)
            ended: set[int] = set()
            for turn in plan:  # each turn steps a random subset of the episodes still running, in a random order
                steps = [StepRequest(eid, tuple(actions)) for eid, actions in turn.items() if eid not in ended]
                outcomes = remote.step(steps)
                assert outcomes == here.step(steps)
                ended |= {o.episode_id for o in outcomes if o.done}
            if ended:  # both refuse a step past an episode's end, in the same words
                refusals = []
                for pool in (remote, here):
                    with pytest.raises(UsageError) as refused:
                        pool.step([StepRequest(min(ended), ("Left",))])
                    refusals.append(str(refused.value))
                assert refusals[0] == refusals[1]

        check()


def test_pool_by_name_joins_the_running_ray_and_sizes_from_its_cpus():
    pool = registry.make("pool", "ray", {"step_timeout_s": 3}, env=TOY)
    assert isinstance(pool, RayEnvPool) and pool.config.step_timeout_s == 3
    assert pool.size == 2  # the module's Ray has 2 CPUs; the toy env (a factory) asks 1 per actor
    pool.close()
    assert ray.is_initialized()  # a Ray the pool did not start stays up


def test_actor_killed_mid_step_fails_its_episodes_and_is_replaced(caplog):
    requests = [ResetRequest(i, 30 + i, 0) for i in range(4)]
    with RayEnvPool(TOY, workers=2) as pool:
        pool.reset(requests)
        pids = pool.worker_pids()
        assert sorted(pids) == [0, 1] and pids[0] != pids[1]
        # Actor 1 holds episodes 1 and 3; it is killed while episode 1's "Wait" blocks.
        killer = threading.Timer(0.5, os.kill, (pids[1], signal.SIGKILL))
        killer.start()
        started = time.monotonic()
        outcomes = pool.step([StepRequest(0, ("Right",)), StepRequest(1, ("Wait",)), StepRequest(2, ("Right",)), StepRequest(3, ("Right",))])
        elapsed = time.monotonic() - started
        killer.join()
        assert elapsed < SLEEP_S, f"the step waited {elapsed:.1f} s for a dead actor"
        assert [o.end_reason for o in outcomes] == ["", "failed", "", "failed"]
        assert outcomes[0].executed == ["Right"] and outcomes[1].executed == [] and outcomes[3].executed == []
        assert f"ray pool actor 1 (pid {pids[1]}) died" in outcomes[1].error and "episode 1 lost its env" in outcomes[1].error
        assert "episode 3 lost its env" in outcomes[3].error
        assert all("\n" not in o.error for o in outcomes)
        assert any(f"replaced ray pool actor 1 (pid {pids[1]}): died (" in r.getMessage() and "episodes [1, 3] failed" in r.getMessage()
                   for r in caplog.records if r.name == "ragen_workers_ray")
        # The rollout goes on: the other actor still steps, a failed episode has ended (a step for it is refused) ...
        with pytest.raises(UsageError, match=r"^env 'toy-slow-corridor' \(seed 33, member 0\), episode 3, has ended \(failed\) and cannot"):
            pool.step([StepRequest(0, ("Right",)), StepRequest(3, ("Left",))])
        assert [o.end_reason for o in pool.step([StepRequest(0, ("Right",))])] == [""]
        # ... and the next reset starts a fresh actor in its place.
        pool.reset(requests)
        new = pool.worker_pids()
        assert new[0] == pids[0] and new[1] != pids[1]
        assert [o.end_reason for o in pool.step([StepRequest(i, ("Right",)) for i in range(4)])] == ["", "", "", ""]
    assert pool.worker_pids() == {}


def test_actor_that_died_between_rollouts_is_replaced_at_the_next_reset(caplog):
    requests = [ResetRequest(i, 40 + i, 0) for i in range(2)]
    with RayEnvPool(TOY, workers=2) as pool:
        first = pool.reset(requests)
        pids = pool.worker_pids()
        os.kill(pids[0], signal.SIGKILL)  # idle: nothing is waiting on it
        assert pool.reset(requests) == first  # actor 0's episode reset again on a fresh actor
        assert pool.worker_pids()[0] != pids[0] and pool.worker_pids()[1] == pids[1]
        assert [o.end_reason for o in pool.step([StepRequest(0, ("Right",)), StepRequest(1, ("Right",))])] == ["", ""]
    assert any(f"replaced ray pool actor 0 (pid {pids[0]}): died" in r.getMessage() for r in caplog.records if r.name == "ragen_workers_ray")


def test_hanging_env_times_out_and_the_actors_other_episodes_fail(caplog):
    requests = [ResetRequest(i, 50 + i, 0) for i in range(4)]
    with RayEnvPool(TOY, workers=2, step_timeout_s=1.5) as pool:
        pool.reset(requests)
        pids = pool.worker_pids()
        started = time.monotonic()
        outcomes = pool.step([StepRequest(i, ("Wait",) if i == 1 else ("Right",)) for i in range(4)])
        assert time.monotonic() - started < SLEEP_S
        # Episode 3 was queued behind the hanging step in actor 1: it fails with it.
        assert [o.end_reason for o in outcomes] == ["", "timeout", "", "failed"]
        assert outcomes[1].error.startswith(f"ray pool actor 1 (pid {pids[1]}) did not finish episode 1's step within step_timeout_s=1.5")
        assert any("replaced ray pool actor 1" in r.getMessage() for r in caplog.records if r.name == "ragen_workers_ray")
        assert pool.worker_pids() == {0: pids[0]}


def test_envs_per_actor_sets_how_many_actors_a_reset_uses():
    with RayEnvPool(TOY, workers=2, envs_per_actor=4) as pool:
        pool.reset([ResetRequest(i, 1, i) for i in range(3)])
        assert list(pool.worker_pids()) == [0]  # 3 episodes fit in one actor
        pool.reset([ResetRequest(i, 1, i) for i in range(6)])
        assert sorted(pool.worker_pids()) == [0, 1]  # 6 need two; never more than workers


def test_unreachable_address_is_one_line_before_any_actor():
    with socket.socket() as s:  # a port nothing listens on: bound, then closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(ConfigError, match=rf"^ray pool: no Ray cluster answers at address '127.0.0.1:{port}' \(") as info:
        RayEnvPool(TOY, address=f"127.0.0.1:{port}", connect_timeout_s=2)
    assert time.monotonic() - started < 2.5  # refused at once, or given up at connect_timeout_s (0.5 s of slack for a busy machine)
    assert str(info.value).splitlines()[1].startswith("hint: start the cluster's head there")


def test_an_address_from_ray_address_is_named_as_such(monkeypatch):
    """RAY_ADDRESS=127.0.0.1:1: the hint said to fix rollout.pool_config.address, which was not set (helper-72's walk)."""
    from ragen_workers_ray.address import check_available
    from ragen_workers_ray.config import RayPoolConfig

    monkeypatch.setenv("RAY_ADDRESS", "my-cluster")
    with pytest.raises(ConfigError) as info:
        check_available(RayPoolConfig())
    assert str(info.value).splitlines() == ["ray pool: address 'my-cluster' (from the RAY_ADDRESS environment variable) is not host:port",
                                            "hint: fix RAY_ADDRESS, or unset it; example: 10.0.0.5:6379 (the port 'ray start --head' prints)"]
    with pytest.raises(ConfigError, match=r"^ray pool: address 'other' is not host:port\nhint: fix rollout.pool_config.address, or unset it"):
        check_available(RayPoolConfig(address="other"))


def test_malformed_address_is_refused():
    with pytest.raises(ConfigError, match=r"address 'my-cluster' is not host:port"):
        RayEnvPool(TOY, address="my-cluster")


def test_actor_that_cannot_be_placed_fails_the_reset_after_start_timeout():
    pool = RayEnvPool(TOY, workers=1, start_timeout_s=1)
    pool.resources = EnvResources(cpus=64)  # more than the module's Ray has
    with pool, pytest.raises(EnvError, match=r"ray pool actor 0 did not start within start_timeout_s=1 \(it asks for \{'num_cpus': 64"):
        pool.reset([ResetRequest(0, 1)])
    assert pool.worker_pids() == {}


def test_a_ray_without_a_live_node_fails_the_actor_start_at_once(monkeypatch):
    """A local Ray whose raylet died made the next actor start wait start_timeout_s (120 s), then
    blame resources ("lower workers")."""
    import time

    from ragen_workers_ray import pool as pool_mod

    monkeypatch.setattr(pool_mod, "LIVENESS_EVERY_S", 0.5)
    monkeypatch.setattr(pool_mod, "_live_nodes", lambda: 0)  # what ray.nodes() reports once the only raylet is gone
    pool = RayEnvPool(TOY, workers=1, start_timeout_s=60)
    pool.resources = EnvResources(cpus=64)  # never placed: the wait goes on until the liveness check
    started = time.monotonic()
    with pool, pytest.raises(EnvError, match=r"^ray pool: the Ray cluster has no live node left \(its raylet stopped or died\)") as info:
        pool.reset([ResetRequest(0, 1)])
    assert time.monotonic() - started < 30  # not start_timeout_s (60 s); well above the 0.5 s check on a slow machine
    assert "ragen run --resume RUN_DIR" in info.value.hints[0]
    assert pool.worker_pids() == {}


def test_actor_options_come_from_the_env_spec_resources():
    pool = RayEnvPool(TOY, workers=1, envs_per_actor=3)
    assert pool._actor_options() == {"num_cpus": 1.0, "num_gpus": 0.0}  # the GPU-less default
    pool.resources = EnvResources(cpus=0.5, memory_gb=0.25, gpus=0.5)
    assert pool._actor_options() == {"num_cpus": 0.5, "num_gpus": 0.5, "memory": 3 * 2**28}  # memory_gb per env * envs_per_actor
    pool.close()


def test_env_the_actor_cannot_build_is_an_env_error():
    broken = EnvRef(name="broken", factory="ragen_core.testing.toy_env:NoSuchEnv")
    with RayEnvPool(broken, workers=1) as pool, pytest.raises(EnvError, match=r"actor \(pid \d+\) could not build env 'broken': .*NoSuchEnv"):
        pool.reset([ResetRequest(0, 1)])


def test_a_warning_logged_in_an_actor_names_the_actor():
    """It went to the actor's stderr, which Ray prints in the driver glued to the progress bar."""
    from ragen_core.testing.pool_checks import check_env_warnings_reach_this_process

    assert check_env_warnings_reach_this_process(ray_pool).startswith("ray pool actor ")


def test_env_registered_in_this_process_only_is_refused():
    name = register_toy_env()
    with pytest.raises(ConfigError, match=f"env '{name}' is registered in this process only"):
        RayEnvPool(EnvRef(name=name), workers=1)


def test_installed_env_by_name_matches_the_local_pool():
    env = next((EnvRef(name=n) for n in ("sokoban", "bandit") if n in registry.names("env")), None)
    if env is None:
        pytest.skip("neither ragen-env-sokoban nor ragen-env-bandit is installed")
    requests = [ResetRequest(0, 5, 0, "train"), ResetRequest(1, 5, 1, "val")]
    with RayEnvPool(env, workers=2) as remote, LocalEnvPool(env) as here:
        starts = remote.reset(requests)
        assert starts == here.reset(requests)
        action = starts[0].facts.action_names[0]
        steps = [StepRequest(0, (action,)), StepRequest(1, ())]
        assert remote.step(steps) == here.step(steps)


def test_replacing_an_actor_names_only_the_episodes_it_was_still_running(caplog):
    requests = [ResetRequest(i, 60 + i, 0) for i in range(2)]
    with RayEnvPool(TOY, workers=1) as pool:  # one actor holds both episodes
        starts = pool.reset(requests)
        board = starts[0].observation.strip().splitlines()[-1]
        walk = ["Right" if board.index("G") > board.index("P") else "Left"] * abs(board.index("G") - board.index("P"))
        (finished,) = pool.step([StepRequest(0, tuple(walk))])
        assert finished.done and finished.end_reason == ""
        (pid,) = pool.worker_pids().values()
        killer = threading.Timer(0.5, os.kill, (pid, signal.SIGKILL))
        killer.start()
        (lost,) = pool.step([StepRequest(1, ("Wait",))])
        killer.join()
        assert lost.end_reason == "failed"
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "ragen_workers_ray" and "replaced" in r.getMessage()]
    assert warning.endswith("; episodes [1] failed"), warning  # episode 0 had finished: nothing of it was lost


def test_a_local_ray_the_pool_started_caps_workers_to_what_it_holds(monkeypatch, caplog):
    from ragen_workers_ray import pool as pool_module

    pool = RayEnvPool(TOY, workers=1)
    pool.config = pool.config.model_copy(update={"workers": 8})
    # the module's Ray was started by the test (a joined Ray may grow: taken as given) ...
    assert pool._fitting_size({"CPU": 2.0}) == 8
    # ... while a Ray this module started on this machine never holds more than its CPUs allow
    monkeypatch.setattr(pool_module._OWNED, "started", True)
    assert pool._fitting_size({"CPU": 2.0}) == 2
    assert any("workers=8, but the local Ray this pool started holds 2 actors" in r.getMessage() for r in caplog.records)
    pool.resources = EnvResources(cpus=1.0, gpus=1.0)
    with pytest.raises(ConfigError, match=r"the local Ray this pool started has 2 CPU, 0 GPU, and one actor of env .* needs 1 CPU, 1 GPU"):
        pool._fitting_size({"CPU": 2.0})
    monkeypatch.setattr(pool_module._OWNED, "started", False)
    pool.close()


def test_an_actor_that_dies_keeps_the_warning_it_logged_first(caplog):
    """Warnings rode with the actor's next reply: one that died before it lost them (its replacement
    was said without its last words). The process pool already sent each at once."""
    from ragen_core.testing.toy_env import DYING_TOY_FACTORY

    with RayEnvPool(EnvRef(name="dying", factory=DYING_TOY_FACTORY, config={"length": 5}), workers=1) as pool:
        pool.reset([ResetRequest(0, 3, 0)])
        pid = pool.worker_pids()[0]
        with caplog.at_level("WARNING"):
            (outcome,) = pool.step([StepRequest(0, ("Die",))])
    assert outcome.end_reason == "failed"
    said = [r.getMessage() for r in caplog.records if "about to die" in r.getMessage()]
    assert said == [f"ray pool actor 0 (pid {pid}): about to die (pid {pid})"]
    messages = [r.getMessage() for r in caplog.records]
    assert messages.index(said[0]) < next(i for i, m in enumerate(messages) if "replaced ray pool actor 0" in m)


def test_runtime_env_reaches_the_actors_of_a_ray_already_running():
    """runtime_env went only to ray.init, which the pool skips when Ray is running (as here): ignored in silence."""
    from ragen_core.testing.toy_env import MARKED_TOY_FACTORY, TOY_MARK_VARIABLE

    marked = EnvRef(name="marked", factory=MARKED_TOY_FACTORY)
    with RayEnvPool(marked, workers=1, runtime_env={"env_vars": {TOY_MARK_VARIABLE: "from-runtime-env"}}) as pool:
        assert pool.reset([ResetRequest(0, 3)])[0].instruction.endswith("Mark: from-runtime-env")


def test_workers_is_named_as_in_the_process_pool_and_the_older_name_still_reads():
    """``rollout.pool_config.workers`` means the same in the process and Ray pools, so switching
    ``rollout.pool`` keeps a config valid; a config written with ``num_workers`` still loads."""
    from ragen_workers_ray.config import RayPoolConfig

    from ragen_core.rollout.process_pool import ProcessPoolConfig

    assert RayPoolConfig.model_validate({"workers": 3}).workers == ProcessPoolConfig.model_validate({"workers": 3}).workers == 3
    assert RayPoolConfig.model_validate({"num_workers": 5}).workers == 5
    assert RayEnvPool(TOY, num_workers=1).config.workers == 1
    with pytest.raises(Exception, match="greater than or equal to 0"):
        RayPoolConfig.model_validate({"workers": -1})
    with pytest.raises(Exception, match="workers and num_workers are one setting"):  # not "num_workers: unknown key"
        RayPoolConfig.model_validate({"workers": 2, "num_workers": 3})
