"""Tests of ragen_core.services with real child processes (tests/service_child.py), no mocks.

Timing: nothing asserts how fast a start is. Waits poll with generous deadlines, so the tests
pass on a slow, busy machine and still fail when the behaviour is wrong (a deadline is only
reached when something that should happen never does).
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from ragen_core import services
from ragen_core.errors import ConfigError, PluginConfigError, RagenError
from ragen_core.services import HOST, ServiceConfig, ServiceError, ServiceSpec, acquire

CHILD = str(Path(__file__).with_name("service_child.py"))
DEADLINE_S = 20.0  # only reached when a test is failing


def child_spec(*flags: str, name: str = "child", **kw) -> ServiceSpec:
    return ServiceSpec(name=name, command=(sys.executable, CHILD, "--port", "{port}", *flags), **kw)


def fast(**kw) -> ServiceConfig:
    """Small back-off and grace periods; a ready timeout far above a healthy start."""
    values = {"ready_timeout_s": DEADLINE_S, "backoff_s": 0.05, "stop_timeout_s": 3.0} | kw
    return ServiceConfig(**values)


def get(url: str, path: str) -> tuple[int, str]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def pid_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (a zombie no longer runs anything)."""
    stat = Path(f"/proc/{pid}/stat")
    if Path("/proc/self/stat").exists():
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except (FileNotFoundError, ProcessLookupError):
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_until(cond, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        time.sleep(0.05)


def port_open(port: int) -> bool:
    try:
        socket.create_connection((HOST, port), timeout=2).close()
    except OSError:
        return False
    return True


@pytest.fixture(autouse=True)
def _stop_leftovers(tmp_path, monkeypatch):
    # Logs of failed starts are kept on purpose (the error names them): keep them out of /tmp.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    yield
    services.stop_all()  # a failing test must not leave children for the next one


# -- start, readiness, sharing ---------------------------------------------------------------


def test_acquire_waits_for_readiness_not_just_liveness():
    # The child listens at once but answers 503 for 0.5 s: acquire must not return before 200.
    handle = acquire(child_spec("--ready-after", "0.5"), fast())
    assert get(handle.url, "/health") == (200, "ok")
    assert get(handle.url, "/pid") == (200, str(handle.pid))
    assert handle.url == f"http://{HOST}:{handle.port}"
    assert handle.alive and handle.refcount == 1
    pid, port = handle.pid, handle.port
    handle.release()
    assert not pid_alive(pid)
    assert not port_open(port)


def test_host_and_port_reach_command_and_env():
    spec = child_spec("--host", "{host}", env={"GREETING": "hi {host}:{port}"})
    with acquire(spec, fast()) as handle:
        assert get(handle.url, "/env/GREETING") == (200, f"hi {HOST}:{handle.port}")


def test_tcp_readiness_when_no_health_path():
    with acquire(child_spec(health_path=None), fast()) as handle:
        assert get(handle.url, "/pid") == (200, str(handle.pid))


def test_two_acquires_share_one_child_and_the_last_release_stops_it():
    spec, config = child_spec(), fast()
    a = acquire(spec, config)
    b = acquire(spec, fast())  # an equal config, not the same object
    assert (b.pid, b.url) == (a.pid, a.url)
    assert a.refcount == b.refcount == 2
    pid, port = a.pid, a.port
    a.release()
    a.release()  # a second release of the same handle does nothing
    assert b.refcount == 1 and pid_alive(pid)
    assert get(b.url, "/health") == (200, "ok")
    with pytest.raises(ServiceError, match="released"):
        a.ensure_ready()
    b.release()
    assert not pid_alive(pid)
    assert not port_open(port)


def test_a_different_config_gets_its_own_child():
    spec = child_spec()
    with acquire(spec, fast()) as a, acquire(spec, fast(stop_timeout_s=2.0)) as b:
        assert a.pid != b.pid and a.refcount == b.refcount == 1


def test_concurrent_acquires_start_one_child():
    spec, handles, errors = child_spec("--ready-after", "0.3"), [], []

    def worker():
        try:
            handles.append(acquire(spec, fast()))
        except Exception as e:  # noqa: BLE001 - reported below, not lost in the thread
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len({h.pid for h in handles}) == 1
    assert handles[0].refcount == 6
    pid = handles[0].pid
    for h in handles:
        h.release()
    assert not pid_alive(pid)


def test_child_started_from_a_short_lived_thread_outlives_it():
    # The parent-death signal is tied to the forking thread; the rollout runner's step threads
    # exit after every turn, and the child must survive that.
    spec, handles = child_spec(), []
    t = threading.Thread(target=lambda: handles.append(acquire(spec, fast())))
    t.start()
    t.join()
    time.sleep(0.3)  # were the child tied to the thread, it would be dead well before this
    (handle,) = handles
    assert handle.alive and get(handle.url, "/health") == (200, "ok")
    handle.release()


# -- restarts --------------------------------------------------------------------------------


def test_stopping_kills_the_childs_whole_process_group(tmp_path):
    helper_file = tmp_path / "helper"
    with acquire(child_spec("--helper-pid-file", str(helper_file)), fast()):
        helper = int(helper_file.read_text())
        assert pid_alive(helper)
    # Only the child itself is waited for; its helper dies of the group's signal a moment later.
    wait_until(lambda: not pid_alive(helper), "the child's helper to die")


def test_helpers_of_a_dead_child_are_killed_before_the_restart(tmp_path):
    helper_file = tmp_path / "helper"
    with acquire(child_spec("--helper-pid-file", str(helper_file)), fast()) as handle:
        helper = int(helper_file.read_text())
        os.kill(handle.pid, signal.SIGKILL)  # the helper survives its parent's death...
        wait_until(lambda: not handle.alive, "the killed child to be seen dead")
        wait_until(lambda: not pid_alive(helper), "the dead child's helper to be killed")  # ...until we see it
        handle.ensure_ready()
        assert int(helper_file.read_text()) != helper  # the new child started its own


def test_ensure_ready_restarts_a_killed_child():
    with acquire(child_spec(), fast()) as handle:
        old = handle.pid
        assert handle.ensure_ready() == handle.url  # alive: nothing to do
        assert handle.pid == old
        os.kill(old, signal.SIGKILL)
        wait_until(lambda: not handle.alive, "the killed child to be seen dead")
        url = handle.ensure_ready()
        assert handle.pid != old and handle.alive
        assert get(url, "/pid") == (200, str(handle.pid))
        assert not pid_alive(old)


def test_a_restart_is_logged_naming_the_service_the_signal_and_the_log(caplog):
    """A server killed mid-run used to come back without a word: the restart is one warning line."""
    with acquire(child_spec(name="shop"), fast(max_restarts=2)) as handle:
        old = handle.pid
        os.kill(old, signal.SIGKILL)
        wait_until(lambda: not handle.alive, "the killed child to be seen dead")
        with caplog.at_level("WARNING", logger="ragen_core.services"):
            handle.ensure_ready()
    (line,) = [r.getMessage() for r in caplog.records if r.name == "ragen_core.services"]
    assert line.startswith(f"service 'shop' (pid {old}) died (killed by SIGKILL); restarting it in ")
    assert "(restart 1 of max_restarts=2 within " in line and f"(log: {handle.log_path})" in line and "\n" not in line


def test_a_child_that_answers_500_while_starting_fails_at_once_with_its_output():
    """SearchQA's server with a bad corpus answered /ready 503 "index failed to load" and the env
    waited the whole ready_timeout_s (600 s) in silence; 500 now says it will never be ready."""
    started = time.monotonic()
    with pytest.raises(ServiceError) as info:
        acquire(child_spec("--failed-load", name="retriever"), fast(ready_timeout_s=60))
    assert time.monotonic() - started < 30  # far below the 60 s wait it used to run to
    msg = str(info.value)
    assert msg.startswith("service 'retriever' (") and "failed while starting (last probe: GET /health answered HTTP 500)" in msg
    assert "could not load the index: corpus.jsonl:1: bad line" in msg and "raise ready_timeout_s" not in msg


def test_a_silent_child_that_answers_500_gets_a_hint_that_does_not_point_at_its_output():
    with pytest.raises(ServiceError) as info:
        acquire(child_spec("--failed-load", "--quiet", name="calc"), fast())
    assert "last output: (none)" in info.value.message
    assert info.value.hints == ["it wrote nothing: run its command by hand to see why /health answers 500"]


def test_a_long_argument_of_the_child_is_cut_in_its_error(tmp_path):
    """WebShop's server gets its settings as one JSON argument: the one-line error quoted all of it."""
    long_file = str(tmp_path / ("x" * 150))
    with pytest.raises(ServiceError) as info:
        acquire(child_spec("--exit-code", "3", "--pid-file", long_file), fast())
    msg = str(info.value)
    assert "exited with status 3 before it was ready" in msg
    assert long_file not in msg.split("; last output")[0] and f"--pid-file {long_file[:60]}..." in msg


def test_the_log_a_restart_warning_names_outlives_the_service():
    """The warning says "(log: /tmp/ragen-service-...)"; the clean stop at the run's end deleted that file."""
    with acquire(child_spec(name="shop"), fast()) as handle:
        os.kill(handle.pid, signal.SIGKILL)
        wait_until(lambda: not handle.alive, "the killed child to be seen dead")
        handle.ensure_ready()
        log = handle.log_path
    try:
        assert log is not None and os.path.isfile(log)
    finally:
        if log is not None and os.path.exists(log):
            os.unlink(log)


def test_a_service_that_never_died_leaves_no_temporary_log():
    with acquire(child_spec(name="shop"), fast()) as handle:
        log = handle.log_path
    assert log is not None and not os.path.exists(log)


def test_logs_a_killed_owner_left_are_removed_by_a_later_start_once_stale(tmp_path):
    """A run killed with SIGKILL cannot remove its service's temporary log: each left one in /tmp
    for good. A later start removes those whose owner is gone, once a day old (a failed start's
    log, which its error names, is kept that long)."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"ragen-service-shop-p{dead.pid}-abcd1234.log"  # the fixture makes tmp_path the temporary folder
    fresh = tmp_path / f"ragen-service-shop-p{dead.pid}-efgh5678.log"
    alive = tmp_path / f"ragen-service-shop-p{os.getppid()}-ijkl9012.log"  # its owner runs
    other = tmp_path / "ragen-service-notes.log"  # not a name a service log has
    for path in (stale, fresh, alive, other):
        path.write_text("old output\n")
    old = time.time() - services.STALE_LOG_S - 60
    for path in (stale, alive, other):
        os.utime(path, (old, old))
    with acquire(child_spec(name="shop"), fast()) as handle:
        assert handle.log_path is not None and f"-p{os.getpid()}-" in handle.log_path
    assert not stale.exists() and fresh.exists() and alive.exists() and other.exists()


def test_a_log_dir_that_cannot_be_a_folder_is_one_line_naming_it(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ServiceError, match=r"^service 'shop': cannot write its log in log_dir .*/afile/logs \(Not a directory\)\nhint: ") as info:
        acquire(child_spec(name="shop"), fast(log_dir=str(tmp_path / "afile" / "logs")))
    assert "env_config.server.log_dir" in info.value.hints[0]


def test_restart_limit_gives_a_clear_error():
    with acquire(child_spec(name="sandbox"), fast(max_restarts=1)) as handle:
        get(handle.url, "/exit")  # the child can be told to exit
        wait_until(lambda: not handle.alive, "the child to exit")
        handle.ensure_ready()  # restart 1 of 1
        os.kill(handle.pid, signal.SIGKILL)
        wait_until(lambda: not handle.alive, "the killed child to be seen dead")
        with pytest.raises(ServiceError) as info:
            handle.ensure_ready()
        msg = info.value.message
        assert "'sandbox'" in msg and "max_restarts=1" in msg and "giving up" in msg
        assert "service_child.py" in msg  # the command
        assert "\n" not in msg


def test_a_restart_that_dies_before_it_is_ready_is_restarted_again(tmp_path, caplog):
    """A server killed mid-run whose restart died before it was ready failed the run at once,
    after one of its max_restarts=3: that death counts as one more, and the next restart serves."""
    crash = tmp_path / "crash"
    with acquire(child_spec("--exit-if-file", str(crash), "--once"), fast(max_restarts=3)) as handle:
        crash.touch()  # the next start fails once
        os.kill(handle.pid, signal.SIGKILL)
        wait_until(lambda: not handle.alive, "the killed child to be seen dead")
        with caplog.at_level("WARNING", logger="ragen_core.services"):
            url = handle.ensure_ready()
        assert get(url, "/pid") == (200, str(handle.pid))
    lines = [r.getMessage() for r in caplog.records if r.name == "ragen_core.services"]
    assert len(lines) == 2 and "(restart 1 of max_restarts=3" in lines[0]
    assert "died (exit status 5)" in lines[1] and "(restart 2 of max_restarts=3" in lines[1]


def test_restarts_that_keep_dying_before_they_are_ready_give_up_after_max_restarts(tmp_path):
    crash = tmp_path / "crash"
    with acquire(child_spec("--exit-if-file", str(crash), name="sandbox"), fast(max_restarts=2)) as handle:
        crash.touch()  # every later start fails
        os.kill(handle.pid, signal.SIGKILL)
        wait_until(lambda: not handle.alive, "the killed child to be seen dead")
        with pytest.raises(ServiceError) as info:
            handle.ensure_ready()
    msg = info.value.message
    assert "died (exit status 5) after 2 restart(s)" in msg and "giving up" in msg
    assert "failing on purpose with status 5" in msg and "\n" not in msg


def test_restarts_older_than_the_window_are_forgotten():
    with acquire(child_spec(), fast(max_restarts=1, restart_window_s=0.5)) as handle:
        for _ in range(3):  # three deaths, but never two within 0.5 s of each other
            os.kill(handle.pid, signal.SIGKILL)
            wait_until(lambda: not handle.alive, "the killed child to be seen dead")
            handle.ensure_ready()
            time.sleep(0.6)  # a slow machine only makes the last restart older still
        assert get(handle.url, "/health") == (200, "ok")


# -- failures --------------------------------------------------------------------------------


def test_child_exiting_at_once_reports_its_stderr():
    with pytest.raises(ServiceError) as info:
        acquire(child_spec("--exit-code", "3", name="shop"), fast())
    msg = info.value.message
    assert "'shop'" in msg and "exited with status 3 before it was ready" in msg
    assert "failing on purpose with status 3" in msg  # the child's stderr
    assert "service_child.py --port" in msg and "\n" not in msg
    assert isinstance(info.value, RagenError)
    assert services._services == {}  # the failed start holds no share


def test_a_child_killed_before_it_is_ready_names_the_signal_not_a_negative_status(tmp_path):
    pid_file = tmp_path / "pid"

    def kill_it() -> None:
        wait_until(lambda: pid_file.exists() and pid_file.read_text(), "the child to write its pid")
        os.kill(int(pid_file.read_text()), signal.SIGKILL)

    killer = threading.Thread(target=kill_it)
    killer.start()
    with pytest.raises(ServiceError) as info:
        acquire(child_spec("--never-ready", "--pid-file", str(pid_file), name="shop"), fast())
    killer.join()
    assert "'shop'" in info.value.message and "was killed by SIGKILL before it was ready" in info.value.message
    assert "status -9" not in info.value.message


def test_silent_child_shows_no_output_rather_than_the_log_header():
    spec = ServiceSpec(name="quiet", command=(sys.executable, "-c", "import sys; sys.exit(4)", "{port}"))
    with pytest.raises(ServiceError, match=r"exited with status 4 before it was ready; last output: \(none\) \(log: "):
        acquire(spec, fast())


def test_never_ready_child_times_out_is_killed_and_its_output_shown(tmp_path):
    pid_file = tmp_path / "pid"
    start = time.monotonic()
    with pytest.raises(ServiceError) as info:
        acquire(child_spec("--never-ready", "--pid-file", str(pid_file)), fast(ready_timeout_s=1.0))
    # Not a speed test: only that the 1 s timeout, not something far longer, ended the wait.
    assert time.monotonic() - start < DEADLINE_S
    msg = info.value.message
    assert "was not ready after 1 s" in msg and "HTTP 503" in msg
    assert "loading index (this never finishes)" in msg
    assert "ready_timeout_s" in str(info.value)  # the hint
    assert not pid_alive(int(pid_file.read_text()))


def test_missing_program_is_a_clear_error():
    spec = ServiceSpec(name="lean", command=("/nonexistent/lean-server", "--port", "{port}"))
    with pytest.raises(ServiceError, match="No such file or directory"):
        acquire(spec, fast())


def test_lost_port_race_is_retried_on_another_port(monkeypatch):
    with socket.socket() as holder:  # bound, not listening: the child's bind fails, connects are refused
        holder.bind((HOST, 0))
        held = holder.getsockname()[1]
        real_free_port, ports = services.free_port, iter([held])
        monkeypatch.setattr(services, "free_port", lambda host=HOST: next(ports, None) or real_free_port())
        with acquire(child_spec(), fast()) as handle:
            assert handle.port != held
            assert get(handle.url, "/health") == (200, "ok")
            with open(handle.log_path) as f:
                assert "Address already in use" in f.read()  # the first child really lost the race


DAEMON = """
import os, socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
if os.fork():  # the parent exits 0 once its daemon holds the port
    sys.exit(0)
os.setsid()  # out of the child's process group: nothing RAGEN kills reaches it
with open(sys.argv[2], "a") as f:
    f.write(f"{os.getpid()}\\n")
time.sleep(30)
"""


def test_a_command_that_daemonises_is_named_not_taken_for_a_lost_port(tmp_path):
    """It was "could not bind port: another process took it (3 port(s) tried)", and each of the
    three tries left a daemon serving under init."""
    pid_file = tmp_path / "daemon.pid"
    spec = ServiceSpec(name="daemon", command=(sys.executable, "-c", DAEMON, "{port}", str(pid_file)))
    try:
        with pytest.raises(ServiceError, match=r"exited with status 0 before it was ready, and a process it left listens on port "
                                               r"\d+: a command that puts itself in the background cannot be watched") as info:
            acquire(spec, fast())
        assert "run the server in the foreground" in str(info.value)
        wait_until(lambda: pid_file.exists() and pid_file.read_text().endswith("\n"), "the daemon's pid")
        time.sleep(0.5)  # a second try's daemon would have written its pid by now
        assert len(pid_file.read_text().split()) == 1  # one try: one daemon, not one per port tried
    finally:
        for pid in pid_file.read_text().split() if pid_file.exists() else []:
            os.kill(int(pid), signal.SIGKILL)


def test_lost_port_race_gives_up_after_port_attempts(monkeypatch):
    with socket.socket() as holder:
        holder.bind((HOST, 0))
        held = holder.getsockname()[1]
        monkeypatch.setattr(services, "free_port", lambda host=HOST: held)
        with pytest.raises(ServiceError, match=r"could not bind port \d+: another process took it \(2 port"):
            acquire(child_spec(), fast(port_attempts=2))


def test_configured_port_in_use_is_refused_before_starting(tmp_path):
    pid_file = tmp_path / "pid"
    with socket.socket() as holder:
        holder.bind((HOST, 0))
        held = holder.getsockname()[1]
        with pytest.raises(ServiceError, match=f"port {held} on {HOST} is already in use"):
            acquire(child_spec("--pid-file", str(pid_file)), fast(port=held))
    assert not pid_file.exists()  # no child was started
    with acquire(child_spec(), fast(port=held)) as handle:  # free again: the fixed port is used
        assert handle.port == held


def test_log_is_kept_in_log_dir_and_removed_from_temp_on_clean_stop(tmp_path):
    with acquire(child_spec(), fast(log_dir=str(tmp_path / "logs"))) as handle:
        kept = Path(handle.log_path)
    assert kept.parent == tmp_path / "logs" and "listening on" in kept.read_text()
    with acquire(child_spec(), fast()) as handle:
        temp = Path(handle.log_path)
        assert temp.exists()
    assert not temp.exists()


# -- stop at exit / signals (a separate Python process owns the service) --------------------

OWNER = textwrap.dedent(
    """
    import signal, sys, time
    # As for a trainer run from a terminal, even when the tests run with these signals ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    from ragen_core import services
    from ragen_core.services import ServiceConfig, ServiceSpec, acquire
    services._DIE_WITH_PARENT = sys.argv[2] == "deathsig"  # else only atexit/SIGTERM can stop it
    spec = ServiceSpec(name="child", command=(sys.executable, {child!r}, "--port", "{{port}}"))
    handle = acquire(spec, ServiceConfig(ready_timeout_s=20))
    print(handle.pid, flush=True)
    if sys.argv[1] == "sleep":
        time.sleep(60)
    """
)


@pytest.fixture
def run_owner(tmp_path):
    """Start a Python process that acquires a service; returns it and the child's pid.

    ``deathsig`` keeps PR_SET_PDEATHSIG on. Teardown kills whatever a failing test left behind.
    """
    started: list[tuple[subprocess.Popen[str], int]] = []

    def run(mode: str, deathsig: bool = False) -> tuple[subprocess.Popen[str], int]:
        argv = [sys.executable, "-c", OWNER.format(child=CHILD), mode, "deathsig" if deathsig else "plain"]
        env = {**os.environ, "TMPDIR": str(tmp_path)}  # where the owner keeps the child's log
        owner = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
        line = owner.stdout.readline()
        assert line.strip().isdigit(), f"the owner script failed (status {owner.wait()})"
        started.append((owner, int(line)))
        return owner, int(line)

    yield run
    for owner, pid in started:
        if owner.poll() is None:
            owner.kill()
        owner.wait()
        owner.stdout.close()
        if pid_alive(pid):
            os.killpg(pid, signal.SIGKILL)


def test_child_stops_when_the_owner_exits_without_releasing(run_owner):
    owner, pid = run_owner("exit")
    assert owner.wait(DEADLINE_S) == 0
    assert not pid_alive(pid)  # atexit stopped (and reaped) it before the owner was gone


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_child_stops_when_the_owner_gets_sigterm_or_ctrl_c(run_owner, sig):
    owner, pid = run_owner("sleep")
    assert pid_alive(pid)
    owner.send_signal(sig)
    status = owner.wait(DEADLINE_S)
    assert status == -sig  # the owner still dies by its signal, as it would without services
    assert not pid_alive(pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_child_dies_with_an_owner_killed_by_sigkill(run_owner):
    owner, pid = run_owner("sleep", deathsig=True)
    owner.kill()
    owner.wait(DEADLINE_S)
    wait_until(lambda: not pid_alive(pid), "the orphaned child to die")


def test_a_sigterm_handler_of_the_trainer_is_left_alone():
    def trainer_handler(signum, frame):
        pass

    previous = signal.signal(signal.SIGTERM, trainer_handler)
    try:
        with acquire(child_spec(), fast()):
            assert signal.getsignal(signal.SIGTERM) is trainer_handler
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_stop_all_stops_children_and_later_ensure_ready_says_so():
    handle = acquire(child_spec(), fast())
    pid = handle.pid
    services.stop_all()
    assert not pid_alive(pid)
    with pytest.raises(ServiceError, match="was stopped"):
        handle.ensure_ready()
    handle.release()  # still allowed


# -- URL mode --------------------------------------------------------------------------------


def test_url_mode_connects_without_starting_and_release_leaves_the_server(tmp_path):
    port = services.free_port()
    server = subprocess.Popen([sys.executable, CHILD, "--port", str(port)], stdout=subprocess.DEVNULL)
    try:
        url = f"http://{HOST}:{port}"
        config = fast(url=url + "/")  # a trailing slash is dropped
        pid_file = tmp_path / "pid"
        with acquire(child_spec("--pid-file", str(pid_file)), config) as handle:  # polls until it is up
            assert (handle.url, handle.port, handle.pid, handle.log_path) == (url, port, None, None)
            assert handle.ensure_ready() == url
        assert not pid_file.exists()  # the spec's command never ran
        assert server.poll() is None and get(url, "/health") == (200, "ok")
    finally:
        server.kill()
        server.wait()


def test_url_mode_server_gone_mid_run_fails_later_acquires_at_once():
    """The first acquire may wait ready_timeout_s (a server still loading); once a process has
    asked for a URL, a later acquire (an env rebuilt after a failure) probes once."""
    import time

    port = services.free_port()
    server = subprocess.Popen([sys.executable, CHILD, "--port", str(port)], stdout=subprocess.DEVNULL)
    url = f"http://{HOST}:{port}"
    try:
        with acquire(child_spec(), fast(url=url)) as handle:  # the first ask: polls until it is up
            assert handle.ensure_ready() == url
        with acquire(child_spec(), fast(url=url)):  # asked again while it answers: fine
            pass
    finally:
        server.kill()
        server.wait()
    started = time.monotonic()
    with pytest.raises(ServiceError, match=f"^service 'child' at {url} no longer answers \\("):
        acquire(child_spec(), fast(url=url))  # ready_timeout_s is DEADLINE_S: waiting for it would take that long
    assert time.monotonic() - started < DEADLINE_S / 2


def test_url_mode_a_server_that_is_not_the_service_is_refused_at_once():
    """Something listens, but its health path answers 404: not a server still loading."""
    import http.server
    import threading
    import time

    other = http.server.ThreadingHTTPServer((HOST, 0), http.server.SimpleHTTPRequestHandler)  # /health: 404
    threading.Thread(target=other.serve_forever, daemon=True).start()
    url = f"http://{HOST}:{other.server_address[1]}"
    started = time.monotonic()
    try:
        with pytest.raises(ServiceError, match=rf"^service 'child' at {url}: something answers, but GET /health answered HTTP 404: "
                                               "it is not a child server"):
            acquire(child_spec(health_path="/health"), fast(url=url))  # ready_timeout_s is DEADLINE_S
    finally:
        other.shutdown()
    assert time.monotonic() - started < DEADLINE_S / 2


def test_url_mode_unreachable_server_is_a_clear_error():
    url = f"http://{HOST}:{services.free_port()}"
    with pytest.raises(ServiceError, match=f"service 'child' at {url} was not ready after 0.5 s"):
        acquire(child_spec(), fast(url=url, ready_timeout_s=0.5))


# -- config and spec validation --------------------------------------------------------------


def test_config_and_spec_reject_bad_values():
    with pytest.raises(PluginConfigError, match="^ServiceConfig: invalid config: url: url must look like"):
        ServiceConfig(url="localhost:8000")
    with pytest.raises(PluginConfigError, match=r"^ServiceConfig: invalid config: ready_timeout: unknown key \(did you mean 'ready_timeout_s'\?\)"):
        ServiceConfig(ready_timeout=3)  # misspelt key
    with pytest.raises(ConfigError, match="^ServiceSpec: invalid config: the child cannot learn its port"):
        ServiceSpec(name="x", command=("server", "--port", "8000"))
    with pytest.raises(ConfigError, match="^ServiceSpec: invalid config: health_path: health_path must start with '/'"):
        ServiceSpec(name="x", command=("server", "{port}"), health_path="health")
    assert ServiceSpec(name="x", command=("server",), env={"PORT": "{port}"}).env == {"PORT": "{port}"}


_SWEPT_ROOT = """
import os, subprocess, sys, time
from ragen_core.services import sweep_orphans_of
sweeper = sweep_orphans_of(os.getpid(), every_s=0.1)
# what a library's daemon does: a grandchild in a session of its own, whose parent exits (it then lives under init)
# (its parent lives a moment, as Ray's raylet lives while the trainer runs: the sweeper samples the tree every 0.1 s)
mid = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; p = subprocess.Popen(['sleep', '300'], start_new_session=True); "
                        "print(p.pid, flush=True); time.sleep(0.5)"], stdout=subprocess.PIPE, text=True)
orphan = int(mid.stdout.readline())
mid.wait()
time.sleep(0.5)  # the sweeper has seen it
if sys.argv[1] == "stop":  # the trainer shut its children down itself: the sweeper must touch nothing
    sweeper.stop()
print(orphan, sweeper.proc.pid, flush=True)
time.sleep(300)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sweeper reads /proc")
@pytest.mark.parametrize("how", ["killed", "group SIGTERM", "group SIGHUP", "stop"])
def test_orphans_of_a_killed_process_are_swept_and_a_stopped_sweeper_sweeps_nothing(how):
    """A local Ray's dashboard and runtime-env agents outlived a trainer killed with SIGKILL (helper-72's walk). A signal to
    the trainer's whole process group (a closed terminal, a scheduler's SIGTERM before SIGKILL) must not end the sweeper
    with it (helper-74's review)."""
    root = subprocess.Popen([sys.executable, "-c", _SWEPT_ROOT, how], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        orphan, sweeper = map(int, root.stdout.readline().split())
        if how.startswith("group"):
            os.killpg(root.pid, signal.SIGTERM if how.endswith("SIGTERM") else signal.SIGHUP)
        root.kill()
        root.wait()
        how = "killed" if how.startswith("group") else how
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(orphan) and how == "killed":
            time.sleep(0.05)
        if how == "killed":
            assert not _alive(orphan)  # swept within a few of its 0.1 s samples
            while time.monotonic() < deadline and _alive(sweeper):
                time.sleep(0.05)
            assert not _alive(sweeper)  # and the sweeper itself is gone
        else:
            time.sleep(0.5)
            assert _alive(orphan)
    finally:
        root.kill()
        with contextlib.suppress(NameError, ProcessLookupError):
            os.kill(orphan, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except FileNotFoundError:
        return False
