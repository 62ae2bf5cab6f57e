"""Issue 13 item 8: an env whose ``step`` never returns no longer hangs training forever.

End to end in real ``ragen run`` processes (the slow corridor's ``Wait`` action blocks; the
scripted engine makes every reply ``Wait``, so ``step`` is really called): with a step timeout
the episodes fail with ``end_reason="timeout"``, the run says so and finishes; without one, the
run-level watchdog dumps every thread's stack to stderr and the run folder and exits with code 3.
The watchdog's own behaviour (beats keep it quiet, its faulthandler backstop catches code that
holds the GIL) is checked in small child processes, since it ends the process it runs in.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time

import pytest
import yaml

from ragen_core.cli.main import main
from ragen_core.testing.run_helpers import CHILD_MAIN, SCRIPTED_ENGINE_NAME, SLOW_TOY_ENV_NAME, register_run_helpers
from ragen_core.trainer.loggers import read_metrics
from ragen_core.trainer.watchdog import EXIT_STALLED, STACKS_FILE

HANG = [
    "--env", SLOW_TOY_ENV_NAME, "--engine", SCRIPTED_ENGINE_NAME, "--no-progress", "--steps", "2",
    'engine_config.replies=["<think>wait</think><answer>Wait</answer>"]',  # every reply reaches the blocking step()
    "env_config.length=3", "env_config.max_turns=1", "env_config.max_actions_per_turn=1",
    "rollout.env_groups=1", "rollout.group_size=2", "rollout.max_model_len=512", "sampling.train.max_new_tokens=32",
    "optim.mini_batch_size=2", "optim.micro_batch_size=2", "test_freq=0", "save_freq=-1", "warm_start.enabled=false",
]


def _child_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def _ragen_run(*args: str, timeout: float = 300) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", CHILD_MAIN, "run", *args], capture_output=True, text=True, env=_child_env(), timeout=timeout)
    return proc, time.monotonic() - t0


def test_a_hanging_env_step_times_out_and_the_run_goes_on(tmp_path):
    run_dir = tmp_path / "run"
    proc, _ = _ragen_run("--run-dir", str(run_dir), *HANG, "env_config.sleep_s=120", "rollout.pool_config.step_timeout_s=1",
                         "watchdog_s=60")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for step in (1, 2):
        assert (f"step {step}: 2 of 2 train episodes ended by the env pool (2 timed out), counted as unsuccessful, their groups left "
                f"out of the update; first: env '{SLOW_TOY_ENV_NAME}' (seed") in proc.stderr, proc.stderr[-3000:]
        assert f"step {step}: nothing left to train after the filter and the env pool (which lost 1 group(s)): no update" in proc.stderr
    assert "did not finish its step within step_timeout_s=1.0" in proc.stderr
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert [r["train/env_timeouts"] for r in rows] == [2.0, 2.0] and [r["train/env_failures"] for r in rows] == [0.0, 0.0]
    assert [r["train/success"] for r in rows] == [0.0, 0.0]
    # a cut-off episode's score is not the policy's: it trained with a positive advantage (it stopped collecting penalties)
    assert [(r["rollout/env_lost_groups"], r["rollout/empty_after_filter"]) for r in rows] == [(1.0, 1.0), (1.0, 1.0)]
    assert not any("actor/pg_loss" in r for r in rows)
    assert not (run_dir / STACKS_FILE).exists()


def test_the_watchdog_dumps_every_stack_and_exits_when_nothing_progresses(tmp_path):
    run_dir = tmp_path / "run"
    proc, took = _ragen_run("--run-dir", str(run_dir), *HANG, "env_config.sleep_s=600", "rollout.pool_config.step_timeout_s=null",
                            "watchdog_s=3")
    err = proc.stderr
    assert proc.returncode == EXIT_STALLED, err[-3000:]
    assert took < 120  # the env would block for 600 s
    last, hint = err.strip().splitlines()[-2:]
    # The stalled time is measured, not the setting: the watchdog never fires before watchdog_s, and it checks
    # every 0.75 s from a thread that a loaded 2-core machine may wake late (a CI run printed 4 s), so any
    # whole number from 3 up to well below the env's 600 s block is right; the rest of the line is exact.
    said = re.fullmatch(r"TrainingError: no progress for (\d+) s (.*)", last)
    assert said is not None, err[-3000:]
    stalled = int(said.group(1))
    assert 3 <= stalled < 60, last
    assert said.group(2) == (f"(watchdog_s=3); last progress: the reset of a train rollout; "
                             f"the stacks of all threads are in {run_dir / STACKS_FILE}"), err[-3000:]
    assert hint.startswith("hint: something hangs") and "rollout.pool_config.step_timeout_s" in hint
    stacks = (run_dir / STACKS_FILE).read_text(encoding="utf-8")
    for text in (err, stacks):  # faulthandler's dump: the main thread sits in the env's step()
        assert 'File "' in text and "toy_env.py" in text and " in step" in text
    assert stacks.startswith(f"ragen watchdog: no progress for {stalled} s (watchdog_s=3); last progress: the reset of a train rollout")


@pytest.mark.parametrize("threads", [1, 2])
def test_call_all_returns_when_the_last_calls_time_out(threads):
    """The ``ragen run`` above found it: when the last running call timed out, ``call_all`` waited
    for a notification no thread would send, and the 'timed out' run hung anyway."""
    import threading

    from ragen_core.rollout.env_pool import TIMED_OUT, call_all

    release = threading.Event()
    calls = [lambda: 1] + [release.wait] * 3  # three calls that block until the test ends
    out: list = []
    runner = threading.Thread(target=lambda: out.append(call_all(calls, threads, 0.2)), daemon=True)
    runner.start()
    runner.join(timeout=20)  # 3 x 0.2 s of timeouts; generous for a loaded machine
    release.set()
    assert not runner.is_alive(), "call_all never returned"
    assert out == [[1, TIMED_OUT, TIMED_OUT, TIMED_OUT]]


def test_run_configs_default_to_step_and_reset_timeouts_that_can_be_turned_off(capsys):
    register_run_helpers()

    def pool_config(*overrides: str) -> dict:
        assert main(["run", "--env", SLOW_TOY_ENV_NAME, "--print-config", *overrides]) == 0
        return yaml.safe_load(capsys.readouterr().out)["rollout"]["pool_config"]

    # --print-config shows the pool's resolved settings (every field of its config)
    # a reset had no limit in runs: one that hung waited for the watchdog (30 min), which names no env or seed
    assert pool_config() == {"step_timeout_s": 600.0, "reset_timeout_s": 600.0, "threads": None}
    assert pool_config("rollout.pool_config.threads=2") == {"threads": 2, "step_timeout_s": 600.0, "reset_timeout_s": 600.0}
    for key in ("step_timeout_s", "reset_timeout_s"):
        assert pool_config(f"rollout.pool_config.{key}=null")[key] is None
        assert pool_config(f"rollout.pool_config.{key}=5")[key] == 5


def _child(code: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout)
    return proc, time.monotonic() - t0


def test_beats_keep_the_watchdog_quiet_and_leaving_it_stops_it(tmp_path):
    proc, _ = _child(f"""
        import time
        from ragen_core.trainer.watchdog import Watchdog
        # a 2 s limit against beats 0.2 s apart: only a 10x late wake on a loaded machine could fire it
        with Watchdog(2.0, {str(tmp_path)!r}) as dog:
            for i in range(15):  # 3 s of work, a beat every 0.2 s
                time.sleep(0.2)
                dog.beat(f"turn {{i}}")
        time.sleep(3.0)  # after the block nothing watches any more (a watching thread would fire after 2 s)
        print("finished")
    """)
    assert proc.returncode == 0 and proc.stdout.strip() == "finished", proc.stderr
    assert not (tmp_path / STACKS_FILE).exists()


def test_the_faulthandler_backstop_catches_a_hang_that_holds_the_gil(tmp_path):
    # a catastrophic regular expression: the re engine never releases the GIL, so no Python
    # thread (the watchdog's included) runs again; faulthandler's C timer still fires
    proc, took = _child(f"""
        import re
        from ragen_core.trainer import watchdog
        watchdog.BACKSTOP_S = 1.0
        with watchdog.Watchdog(1.0, {str(tmp_path)!r}) as dog:
            dog.beat("before the regex")
            re.match(r"(a+)+$", "a" * 64 + "b")
    """)
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    assert took < 30
    assert "Timeout" in proc.stderr and "<string>" in proc.stderr  # faulthandler's dump of the stuck main thread


# step 1 answers Right (the corridor moves on), step 2's reply is Wait: its env step blocks
SECOND_STEP_HANGS = [a for a in HANG if not a.startswith("engine_config.replies=")] + [
    'engine_config.replies=["<think>go</think><answer>Right</answer>", "<think>wait</think><answer>Wait</answer>"]',
    "env_config.sleep_s=600", "rollout.pool_config.step_timeout_s=null",
]


def test_a_stall_after_finished_steps_checkpoints_the_last_one_before_exiting(tmp_path):
    run_dir = tmp_path / "run"
    # watchdog_s=20: step 1 (rollout, update) beats well within it even on a loaded machine; step 2 then blocks for 600 s
    proc, _ = _ragen_run("--run-dir", str(run_dir), *SECOND_STEP_HANGS, "watchdog_s=20")
    err = proc.stderr
    assert proc.returncode == EXIT_STALLED, err[-3000:]
    assert ("step 2 stalled: saved checkpoints/step_1, the last finished step; once the cause is fixed, "
            f"continue with 'ragen run --resume {run_dir}'") in err
    assert (run_dir / "checkpoints" / "step_1").is_dir()
    assert err.strip().splitlines()[-1].endswith(f"continue with 'ragen run --resume {run_dir}'")


@pytest.mark.parametrize("rollout", [[], ["rollout.async_rollout=true"]], ids=["sync", "async"])
def test_a_second_sigterm_during_a_hung_step_keeps_the_finished_steps(tmp_path, rollout):
    """Async (the hung step is the rollout prefetched in the background): nothing was saved, and
    closing waited forever for that rollout, so the second SIGTERM did not end the run. That rollout
    is left behind (a daemon thread: the process still exits), and the run says where it is stuck."""
    import signal

    run_dir = tmp_path / "run"
    child = subprocess.Popen([sys.executable, "-c", CHILD_MAIN, "run", "--run-dir", str(run_dir), *SECOND_STEP_HANGS, "watchdog_s=null",
                              *rollout],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_child_env())
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not (run_dir / "metrics.jsonl").is_file() and child.poll() is None:  # step 1 logged
            time.sleep(0.2)
        time.sleep(2.0)  # into step 2's blocking env step
        child.send_signal(signal.SIGTERM)  # finish the step (it never will) ...
        time.sleep(1.0)
        child.send_signal(signal.SIGTERM)  # ... then abort it
        _, err = child.communicate(timeout=120)
    finally:
        child.kill()
    assert child.returncode != 0, err[-3000:]
    assert "step 2 aborted: saved checkpoints/step_1, the last finished step; continue with 'ragen run --resume" in err, err[-3000:]
    assert (run_dir / "checkpoints" / "step_1").is_dir()
    left = ("the async rollout the aborted step waited for did not end: left behind, stuck in the step of env "
            f"'{SLOW_TOY_ENV_NAME}' (turn 1 of a train rollout)")
    assert (left in err) is bool(rollout), err[-3000:]
    stuck = f"step 2 was aborted in the step of env '{SLOW_TOY_ENV_NAME}' (turn 1 of a train rollout)"  # where a sync step hung
    assert (stuck in err) is not bool(rollout), err[-3000:]


def test_call_all_stops_starting_calls_once_one_raises():
    import threading

    from ragen_core.rollout.env_pool import TIMED_OUT, call_all

    started: list[int] = []
    lock = threading.Lock()

    def call(i: int):
        def run():
            with lock:
                started.append(i)
            if i == 0:
                raise ConnectionError("server gone")
            time.sleep(0.05)
            return i
        return run

    out = call_all([call(i) for i in range(20)], 2, None, stop_on_error=True)
    assert isinstance(out[0], ConnectionError)
    # call 0 fails at once; the other thread's 50 ms calls could only reach the tenth if the failing
    # thread were starved for ~0.5 s, far beyond scheduling noise: the bound says "not all twenty"
    assert len(started) < 10 and out[-1] is TIMED_OUT
    assert call_all([call(i) for i in range(1, 6)], 2, None, stop_on_error=True) == [1, 2, 3, 4, 5]
