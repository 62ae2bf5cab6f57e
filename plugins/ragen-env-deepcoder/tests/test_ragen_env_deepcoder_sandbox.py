"""The sandbox: isolation levels, per-test limits, test styles, and programs running in parallel.

Limits are set small so each case finishes in about a second. Timing assertions compare against
what running one program at a time would need at the very least (a bound that holds however
loaded the machine is), with the margin stated where it is used.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from ragen_env_deepcoder import sandbox as sb
from ragen_env_deepcoder.config import SandboxConfig
from ragen_env_deepcoder.env import DeepCoderEnv

from ragen_core.errors import EnvError
from ragen_core.interfaces.env_pool import EnvRef, ResetRequest, StepRequest
from ragen_core.rollout.env_pool import LocalEnvPool

SYSTEM_PYTHON = "/usr/bin/python3"


def level_config(level: str, **limits) -> SandboxConfig:
    """A config that runs at ``level`` on this machine, or skip the test.

    As root without bubblewrap, programs run as an unprivileged uid; when this interpreter lives
    where that uid cannot read (``/root/.pyenv``), the system interpreter is used instead.
    """
    for python in (None, SYSTEM_PYTHON):
        if python is not None and not os.access(python, os.X_OK):
            continue
        if sb.probe(level, python) is None:
            return SandboxConfig(isolation=level, allow_unisolated=True, python=python, **limits)
    pytest.skip(f"isolation level {level!r} is not available here: {sb.probe(level)}")


def stdin_test(text: str = "") -> dict:
    return {"kind": "stdin", "input": text, "fn_name": None}


def run(code: str, tests=None, level: str = "bwrap", **limits):
    config = level_config(level, **{"time_limit_s": 1.0, **limits})
    return sb.run_program(level, config, code, tests if tests is not None else [stdin_test()])


def statuses(result) -> list[str]:
    return [t.status for t in result.tests]


# ------------------------------------------------------------------------------ levels
def test_auto_picks_the_strongest_level_and_reports_it_once(capsys, monkeypatch):
    available = [lv for lv, why in sb.available_levels().items() if why is None]
    if not available or available == ["limits"]:
        pytest.skip("no namespaced isolation here")
    monkeypatch.setattr(sb, "_reported", set())
    assert sb.choose_level(SandboxConfig()) == available[0]
    assert sb.choose_level(SandboxConfig()) == available[0]
    err = capsys.readouterr().err
    assert err.count("sandbox isolation") == 1 and f"'{available[0]}'" in err


def test_a_level_a_parent_process_reported_is_not_reported_again(capsys, monkeypatch):
    monkeypatch.setattr(sb, "_probe", lambda level, python: None)
    monkeypatch.setattr(sb, "_reported", set())
    monkeypatch.setenv(sb.REPORTED_ENV, f"bwrap:{os.getppid()}")  # as a pool worker inherits it from the trainer
    assert sb.choose_level(SandboxConfig(isolation="bwrap")) == "bwrap"
    assert capsys.readouterr().err == ""
    assert sb.choose_level(SandboxConfig(isolation="unshare")) == "unshare"  # another level than the one said: said
    assert "sandbox isolation 'unshare'" in capsys.readouterr().err
    assert os.environ[sb.REPORTED_ENV] == f"unshare:{os.getpid()}"  # for the processes this one starts


def test_the_said_level_is_among_the_run_variables_pools_pass_to_remote_workers(capsys, monkeypatch):
    """Ray actors on other machines do not inherit the trainer's environment: each printed the line
    once more. Pools set the trainer's run variables where the envs run (the pool conformance
    check "run-variables-reach-the-envs")."""
    from ragen_core.interfaces.env_pool import run_variables

    monkeypatch.setattr(sb, "_probe", lambda level, python: None)
    monkeypatch.setattr(sb, "_reported", set())
    monkeypatch.delenv(sb.REPORTED_ENV, raising=False)
    monkeypatch.delenv("RANK", raising=False)
    assert sb.choose_level(SandboxConfig(isolation="bwrap")) == "bwrap"
    assert "sandbox isolation 'bwrap'" in capsys.readouterr().err
    assert run_variables()[sb.REPORTED_ENV] == f"bwrap:{os.getpid()}"


def test_under_torchrun_only_rank_0_says_the_isolation_line(capsys, monkeypatch):
    """Every rank checks the sandbox before it trains: each printed the line (helper-83's review)."""
    monkeypatch.setattr(sb, "_probe", lambda level, python: None)
    monkeypatch.delenv(sb.REPORTED_ENV, raising=False)
    for rank, says in (("1", False), ("0", True)):
        monkeypatch.setattr(sb, "_reported", set())
        monkeypatch.setenv("RANK", rank)
        assert sb.choose_level(SandboxConfig(isolation="bwrap")) == "bwrap"
        assert ("sandbox isolation 'bwrap'" in capsys.readouterr().err) is says


def test_a_run_with_worker_processes_prints_the_isolation_line_once():
    """Each process pool worker printed it (helper-69's walk): the availability check says it before they start."""
    config = next(({"sandbox": {"isolation": lv, "allow_unisolated": True, "python": py}} for lv in sb.LEVELS
                   for py in (None, SYSTEM_PYTHON) if (py is None or os.access(py, os.X_OK)) and sb.probe(lv, py) is None), None)
    if config is None:
        pytest.skip("no sandbox level runs programs here")
    script = (
        "import json, sys\n"
        "from ragen_core import registry\n"
        "from ragen_core.interfaces.env_pool import EnvRef, ResetRequest\n"
        "from ragen_core.rollout.process_pool import ProcessEnvPool\n"
        "if __name__ == '__main__':\n"
        "    config = json.loads(sys.argv[1])\n"
        "    registry.get_spec('env', 'deepcoder').check_available(registry.make_config('env', 'deepcoder', config))\n"
        "    with ProcessEnvPool(EnvRef(name='deepcoder', config=config), workers=2) as pool:\n"
        "        pool.reset([ResetRequest(episode_id=i, seed=i) for i in range(2)])\n"
        "        print(sorted(pool.worker_pids()))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != sb.REPORTED_ENV}
    done = subprocess.run([sys.executable, "-c", script, json.dumps(config)], capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[0, 1]"  # two workers built their envs
    assert done.stderr.count("sandbox isolation") == 1, done.stderr


def test_without_network_isolation_the_sandbox_refuses_unless_allowed(monkeypatch):
    monkeypatch.setattr(sb, "_probe", lambda level, python: None if level == "limits" else f"{level} is not installed")
    with pytest.raises(EnvError, match="refusing to run model-written code without network isolation") as err:
        sb.choose_level(SandboxConfig())
    assert "allow_unisolated" in str(err.value) and "bwrap is not installed" in str(err.value)
    assert err.value.hints[0].startswith("install bubblewrap")
    with pytest.raises(EnvError, match="refusing"):
        DeepCoderEnv()  # the env refuses at construction, before any episode
    monkeypatch.setattr(sb, "_reported", set())
    assert sb.choose_level(SandboxConfig(allow_unisolated=True)) == "limits"


def test_a_requested_level_that_is_missing_is_an_error(monkeypatch):
    monkeypatch.setattr(sb, "_probe", lambda level, python: "bwrap is not installed" if level == "bwrap" else None)
    with pytest.raises(EnvError, match="isolation 'bwrap' is not available here: bwrap is not installed"):
        sb.choose_level(SandboxConfig(isolation="bwrap"))


def test_a_named_missing_level_hints_at_its_tool_only_when_the_tool_is_what_is_missing(monkeypatch):
    monkeypatch.setattr(sb, "_probe", lambda level, python: None if level == "unshare" else f"{level} is not installed")
    with pytest.raises(EnvError) as err:
        sb.choose_level(SandboxConfig(isolation="bwrap"))
    assert err.value.hints == ["install bubblewrap (apt-get install bubblewrap)",
                               "or use sandbox.isolation=auto, which picks 'unshare' (it works here)"]


def test_named_limits_asks_for_allow_unisolated_not_for_bubblewrap_it_has(monkeypatch):
    """bwrap works and the user chose 'limits': the one missing setting is allow_unisolated."""
    monkeypatch.setattr(sb, "_probe", lambda level, python: None)
    with pytest.raises(EnvError, match="isolation 'limits' .* needs sandbox.allow_unisolated=true") as err:
        sb.choose_level(SandboxConfig(isolation="limits"))
    assert not any("install bubblewrap" in h for h in err.value.hints)
    assert err.value.hints[0].startswith("set sandbox.allow_unisolated=true") and "picks 'bwrap'" in err.value.hints[1]
    monkeypatch.setattr(sb, "_reported", set())
    assert sb.choose_level(SandboxConfig(isolation="limits", allow_unisolated=True)) == "limits"

    unreadable = "probe program failed (...); the Python at /x is not readable by ...: set sandbox.python to an interpreter all users can read"
    monkeypatch.setattr(sb, "_probe", lambda level, python: unreadable if level == "limits" else None)
    with pytest.raises(EnvError, match="'limits' is not available here: .*set sandbox.python") as err:
        sb.choose_level(SandboxConfig(isolation="limits"))
    assert not any("install bubblewrap" in h for h in err.value.hints)
    assert "also needs sandbox.allow_unisolated=true" in err.value.hints[0] and "picks 'bwrap'" in err.value.hints[1]


def test_probe_explains_an_interpreter_the_program_uid_cannot_read():
    if os.geteuid() != 0 or os.access(sb.sandbox_python()[0], os.R_OK) and sb.probe("limits") is None:
        pytest.skip("needs root and an interpreter other users cannot read")
    assert "set sandbox.python" in sb.probe("limits")


@pytest.mark.parametrize("level", sb.LEVELS)
def test_every_available_level_runs_programs(level):
    result = run("import fractions\nprint(sum(map(int, input().split())))", [stdin_test("2 3\n"), stdin_test("4 4\n")], level=level)
    assert statuses(result) == ["ok", "ok"] and [t.stdout for t in result.tests] == ["5\n", "8\n"]


@pytest.mark.parametrize(("level", "isolated"), [("bwrap", True), ("unshare", True), ("limits", False)])
def test_network_is_cut_off_at_namespaced_levels(level, isolated):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        code = f"import socket\ns = socket.socket()\ns.settimeout(2)\nprint(s.connect_ex(('127.0.0.1', {port})) == 0)"
        result = run(code, level=level)
        assert result.tests[0].stdout == ("False\n" if isolated else "True\n")
    finally:
        server.close()


@pytest.mark.parametrize(("level", "private"), [("bwrap", True), ("unshare", False)])
def test_only_bwrap_hides_the_host_filesystem(level, private):
    here = os.path.abspath(__file__)
    result = run(f"import os\nprint(os.path.exists({here!r}), os.getcwd() == os.environ['HOME'])", level=level)
    assert result.tests[0].stdout == f"{not private} True\n"


def test_program_runs_without_capabilities_and_not_as_root():
    result = run("import os\nstatus = open('/proc/self/status').read()\nprint(os.getuid() != 0, status.split('CapEff:')[1].split()[0], "
                 "status.split('NoNewPrivs:')[1].split()[0])")
    assert result.tests[0].stdout == "True 0000000000000000 1\n"


# ------------------------------------------------------------------------------ per-test limits
BURN = "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end:\n    pass\nprint('done')"


def test_each_test_gets_its_own_cpu_budget():
    """3 tests of 0.3 CPU-seconds each pass under a 0.5 s limit per test (0.9 s in all)."""
    result = run(BURN.format(s=0.3), [stdin_test()] * 3, time_limit_s=0.5, wall_factor=10)
    assert statuses(result) == ["ok"] * 3
    assert all(0.3 <= t.cpu_s < 0.5 for t in result.tests)


def test_a_test_over_its_cpu_limit_fails_even_if_it_finishes():
    result = run(BURN.format(s=0.7), time_limit_s=0.5, wall_factor=20)
    assert statuses(result) == ["cpu_limit"] and result.tests[0].stdout == "done\n"


def test_an_endless_loop_is_stopped_by_the_cpu_limit():
    result = run("while True:\n    pass", time_limit_s=0.5, wall_factor=20)
    assert statuses(result) == ["cpu_limit"] and result.tests[0].cpu_s < 2.5


def test_a_sleeper_is_stopped_by_the_wall_clock():
    result = run("import time\ntime.sleep(60)", time_limit_s=0.2, wall_factor=2)
    # wall limit 0.4 s; the 2 s bound leaves room for a loaded machine's scheduling delays
    assert statuses(result) == ["timeout"] and result.tests[0].wall_s < 2.0


def test_a_sleeper_is_not_waited_for_again_in_its_later_tests():
    """Each test of a sleeping program waited out its own wall-clock limit (17-18 s a program with
    three tests); a program that waits without computing does not get a second wait."""
    result = run("import time\ntime.sleep(60)", tests=[stdin_test()] * 3, time_limit_s=0.2, wall_factor=2)
    assert statuses(result) == ["timeout", "skipped", "skipped"]
    assert result.tests[1].stderr.startswith("not run: an earlier test waited out its wall-clock limit")
    slow = run("import sys\nn = int(input())\nwhile n: n -= 1\nprint('done')",
               tests=[stdin_test("10000000000"), stdin_test("1")], time_limit_s=0.2, wall_factor=2)
    assert statuses(slow)[1] == "ok"  # a program that computes until its limit: its next test still runs


def test_output_memory_file_and_process_caps():
    assert statuses(run("print('x' * 20000)", max_output_bytes=10_000)) == ["output_limit"]
    memory = run("x = bytearray(200 * 1024 * 1024)\nprint('allocated')", memory_mb=64)
    assert statuses(memory) == ["exit 1"] and "MemoryError" in memory.tests[0].stderr
    big_file = run("with open('f', 'w') as f:\n    f.write('x' * 2000)", max_file_bytes=1000)
    assert statuses(big_file) == ["exit 1"] and "File too large" in big_file.tests[0].stderr
    threads = "import threading, time\nts = [threading.Thread(target=time.sleep, args=(0.3,)) for _ in range({n})]\n" \
              "[t.start() for t in ts]\nprint('started')"
    assert statuses(run(threads.format(n=2), max_processes=3)) == ["ok"]
    over = run(threads.format(n=3), max_processes=3)
    assert statuses(over) == ["exit 1"] and "can't start new thread" in over.tests[0].stderr


def test_the_temp_dir_is_emptied_between_tests_and_is_the_only_writable_place():
    code = ("import os\nprint(sorted(os.listdir('.')))\nopen('mine.txt', 'w').write('x')\n"
            "try:\n    open('/usr/x', 'w')\nexcept OSError:\n    print('ro')")
    result = run(code, [stdin_test(), stdin_test()])
    assert [t.stdout for t in result.tests] == ["[]\nro\n", "[]\nro\n"]


def test_a_folder_the_program_locked_is_still_emptied_before_the_next_test():
    """The harness keeps no CAP_DAC_OVERRIDE: a folder the program made unreadable survived the
    clean-up, and the next test read what the last one left there (or failed on it)."""
    code = ("import os\nprint(sorted(os.listdir('.')))\n"
            "os.makedirs('d/e')\nopen('d/e/f', 'w').write('secret')\nos.chmod('d/e', 0o700)\nos.chmod('d', 0)\nprint('locked')")
    result = run(code, [stdin_test(), stdin_test()])
    assert [t.stdout for t in result.tests] == ["[]\nlocked\n", "[]\nlocked\n"], [t.stderr for t in result.tests]


def test_emptying_the_temp_dir_after_a_program_that_left_nothing_imports_nothing():
    """The clean-up runs after every test of every program: when there is nothing to remove it
    imports no ``shutil`` (~7 ms a test, 1.15x -> 1.40x on a 50 ms program) and forks no child.
    The next test's program sees the harness's modules, since it is forked from it."""
    code = "import sys\nprint('shutil' in sys.modules)"
    result = run(code, [stdin_test(), stdin_test(), stdin_test()])
    assert [t.stdout for t in result.tests] == ["False\n"] * 3, [t.stderr for t in result.tests]


def test_a_program_that_catches_the_cpu_limit_signal_still_fails():
    """RLIMIT_CPU's soft limit sends SIGXCPU, which Python can catch: a program that printed its
    answer, caught it and exited 0 just under the limit passed."""
    code = ("import os, signal\nprint('answer', flush=True)\n"
            "signal.signal(signal.SIGXCPU, lambda *a: (os.write(1, b'caught\\n'), os._exit(0)))\nwhile True:\n    pass")
    result = run(code, time_limit_s=1.0, wall_factor=20)
    # killed at the limit: the handler never runs (whether the old exit read as over the limit
    # depended on rusage's accounting, 1.91 s of a 2 s limit on a loaded machine)
    assert statuses(result) == ["cpu_limit"] and result.tests[0].stdout == "answer\n"


def test_a_harness_run_by_hand_never_empties_a_shared_directory(tmp_path):
    """Outside a sandbox (not pid 1 of a namespace) the harness empties only a directory whose
    name marks it as made for the run; ``/tmp`` or any other folder is left alone."""
    import marshal
    import subprocess
    import sys

    limits = {"cpu_s": 2, "wall_s": 6, "total_s": 30, "memory_mb": 512, "processes": 4, "output_bytes": 10_000, "file_bytes": 10_000}
    for name, emptied in (("shared", False), (sb.WORKDIR_PREFIX + "run", True)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "keep.txt").write_text("precious")
        payload = {"code": "open('new.txt', 'w').close()", "tests": [stdin_test(), stdin_test()], "limits": limits, "uid": None,
                   "nproc_extra": "scan", "workdir": str(folder)}
        done = subprocess.run([sys.executable, "-I", "-S", "-c", sb.HARNESS_SOURCE], input=marshal.dumps(payload, 2), capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert sorted(p.name for p in folder.iterdir()) == ([] if emptied else ["keep.txt", "new.txt"])


@pytest.mark.skipif(os.geteuid() != 0, reason="programs get their own uid only when running as root")
def test_leftovers_of_a_dead_harness_are_killed_by_uid():
    import subprocess

    uid = sb._slot_uid(sb.MAX_SLOTS - 1)
    sleeper = subprocess.Popen(["sleep", "30"], user=uid, group=uid, extra_groups=[], start_new_session=True)
    time.sleep(0.1)
    sb._kill_uid(uid)
    assert sleeper.wait(timeout=10) == -9


def test_large_stdin_and_exit_codes():
    big = "7\n" * 1_000_000
    assert run("import sys\nprint(len(sys.stdin.read()))", [stdin_test(big)]).tests[0].stdout == "2000000\n"
    assert statuses(run("import sys\nprint(1)\nsys.exit(0)")) == ["ok"]
    assert statuses(run("import os\nprint(1, flush=True)\nos._exit(0)")) == ["ok"]
    assert statuses(run("import sys\nsys.exit(3)")) == ["exit 3"]
    assert statuses(run("import sys\nsys.exit('bad')")) == ["exit 1"]
    assert statuses(run("raise ValueError('no')")) == ["exit 1"]


def test_a_normal_exit_waits_for_threads_and_runs_atexit():
    """``threading.Thread(target=main).start()`` (for a deeper stack) must not lose its output."""
    deep = ("import sys, threading\ndef main():\n    print(sum(map(int, input().split())))\n"
            "threading.stack_size(1 << 26)\nthreading.Thread(target=main).start()")
    assert run(deep, [stdin_test("2 5\n")]).tests[0].stdout == "7\n"
    assert run("import atexit\natexit.register(print, 'bye')\nprint('hi')").tests[0].stdout == "hi\nbye\n"


def test_a_syntax_error_runs_nothing():
    result = run("def (:\n")
    assert result.compile_error.startswith("SyntaxError") and result.tests == []


def test_function_call_tests():
    call = {"kind": "call", "input": "[1, 2]\n3", "fn_name": "f"}
    method = run("class Solution:\n    def f(self, xs, k):\n        return tuple(x * k for x in xs)", [call])
    assert method.tests[0].result == {"str": "(3, 6)", "json": [3, 6]}
    top = run("def f(xs, k):\n    return {x for x in xs}", [{**call, "input": [[1], 2]}])
    assert top.tests[0].result == {"str": "{1}"}  # a set has no JSON form: only str() is kept
    missing = run("def g():\n    pass", [call])
    assert statuses(missing) == ["exit 1"] and "no function 'f'" in missing.tests[0].stderr
    prints = run("def f(xs, k):\n    print('noise')\n    return None", [call])
    assert prints.tests[0].result == {"str": "None", "json": None}


def test_expected_outputs_never_enter_the_sandbox():
    """A program that searches its own memory for the answer finds nothing to copy."""
    env = DeepCoderEnv(sandbox=level_config("bwrap"))
    env.reset(0)
    from ragen_env_deepcoder.problems import Problem, TestCase

    env._problem = Problem("print the secret", (TestCase("stdin", "", "SECRET-7731\n"),))
    snoop = ("import gc, sys\nfound = set()\nfor obj in gc.get_objects():\n"
             "    for v in (obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()):\n"
             "        if isinstance(v, str) and 'SECRET-' in v:\n            found.add(v)\nprint(*sorted(found))")
    reward, info = env.grade(snoop)
    assert reward == 0.0 and info["runnable"] is True
    assert set(env.problem.tests[0].payload()) == {"kind", "input", "fn_name"}


# ------------------------------------------------------------------------------ parallel runs
SLEEP = "import time\ntime.sleep({s})\nprint('woke')"


def _run_threads(sandbox: sb.Sandbox, n: int, seconds: float) -> float:
    results = []

    def one() -> None:
        results.append(sandbox.run(SLEEP.format(s=seconds), [stdin_test()]))

    threads = [threading.Thread(target=one) for _ in range(n)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [statuses(r) for r in results] == [["ok"]] * n
    return time.monotonic() - start


def test_the_worker_pool_runs_programs_at_once():
    config = level_config("bwrap", workers=4, time_limit_s=1.0)
    elapsed = _run_threads(sb.Sandbox(config), 4, 1.5)
    # one at a time needs >= 6 s; together ~1.5 s plus start-ups (a 3 s margin for a loaded machine)
    assert elapsed < 4.5


def test_the_worker_pool_bounds_how_many_run_at_once():
    config = level_config("bwrap", workers=2, time_limit_s=1.0)
    elapsed = _run_threads(sb.Sandbox(config), 4, 0.5)
    assert elapsed >= 1.0  # two slots, four 0.5 s sleepers: at least two rounds


def test_the_rollout_env_pool_steps_deepcoder_episodes_concurrently():
    """8 episodes each submit a program that sleeps 1 s: the env pool's threads and the sandbox
    pool run them together (one at a time would need >= 8 s)."""
    config = {"max_tests": 1, "sandbox": {"workers": 8, "time_limit_s": 2.0}}
    pool = LocalEnvPool(EnvRef(name="deepcoder", config=config))
    try:
        assert pool.threads >= 8  # the spec's async_step flag
        pool.reset([ResetRequest(i, seed=i) for i in range(8)])
        start = time.monotonic()
        outcomes = pool.step([StepRequest(i, (SLEEP.format(s=1.0),)) for i in range(8)])
        elapsed = time.monotonic() - start
    finally:
        pool.close()
    assert all(o.done and o.info["runnable"] for o in outcomes)
    assert elapsed < 5.0  # ~1 s plus start-ups; a 4 s margin for a loaded machine
