"""Hostile programs: each is contained, scored as a failed test, and leaves the host as it was.

Every program answers a one-test problem (``3 4`` -> ``7``) and prints the right answer only if
its attack worked (or prints it and then crashes), so a pass would mean a breach. The programs
run through the env at the strongest isolation level available; attacks on the filesystem are
contained only by bubblewrap and are skipped below it. After the module (fixture teardown):
no process of the sandbox is left, no file carrying this run's marker exists in the project,
the home directory or the shared temp dirs, the files the programs tried to change are
byte-identical, and the listening socket received no connection.
"""

from __future__ import annotations

import hashlib
import os
import socket
import uuid
from pathlib import Path

import pytest
from ragen_env_deepcoder import sandbox as sb
from ragen_env_deepcoder.config import SandboxConfig
from ragen_env_deepcoder.env import DeepCoderEnv
from ragen_env_deepcoder.problems import Problem, TestCase

PROJECT = Path(__file__).resolve().parents[3]
PLUGIN = Path(__file__).resolve().parents[1]
HOME = Path.home()
MARKER = f"ragen-hostile-{uuid.uuid4().hex[:12]}"
#: Files the programs try to append to or delete (all in this package, so no other work is touched).
GUARDED = [PLUGIN / "pyproject.toml", PLUGIN / "README.md", Path(__file__).resolve()]
SHARED_TMP = [Path("/tmp"), Path("/var/tmp"), Path("/dev/shm")]

LEVEL = next((lv for lv, why in sb.available_levels().items() if why is None and lv != "limits"), None)
pytestmark = pytest.mark.skipif(LEVEL is None, reason="no namespaced isolation on this machine (install bubblewrap)")
needs_bwrap = pytest.mark.skipif(LEVEL != "bwrap", reason=f"the host filesystem is hidden only under bubblewrap (level here: {LEVEL})")

PROBLEM = Problem("Read two integers and print their sum.", (TestCase("stdin", "3 4\n", "7\n"),))


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _home_file() -> Path | None:
    files = sorted(p for p in HOME.iterdir() if p.is_file() and os.access(p, os.R_OK)) if HOME.is_dir() else []
    return files[0] if files else None


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _sandbox_processes() -> list[str]:
    """Processes a sandbox of this test process left: any process running as the program uid of
    one of this process's worker slots, or any descendant of this process (bwrap, a harness, a
    program). Other test processes' sandboxes (pytest-xdist) are not ours to judge."""
    first = sb.UID_BASE + (os.getpid() % 100_000) * sb.MAX_SLOTS
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            uid = os.stat(f"/proc/{entry}").st_uid
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        pid, hops = int(entry), 0
        while pid > 1 and pid != os.getpid() and hops < 64:
            pid, hops = _parent(pid), hops + 1
        if first <= uid < first + sb.MAX_SLOTS or pid == os.getpid():
            found.append(f"{entry} uid={uid} {cmdline[:80]}")
    return found


def _uid_of(line: str) -> int:
    """The uid in a :func:`_sandbox_processes` line (``"<pid> uid=<uid> <cmdline>"``)."""
    return int(line.split()[1].removeprefix("uid="))


def _marked_files() -> list[str]:
    hits = []
    for root in [PROJECT, HOME, *SHARED_TMP]:
        if not root.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in (".git", ".venv", "node_modules", ".pyenv", ".cache")]
            hits += [os.path.join(dirpath, n) for n in filenames + dirnames if MARKER in n]
            if root != PROJECT and dirpath.count(os.sep) - str(root).count(os.sep) >= 1:
                dirnames[:] = []  # home and temp dirs: the programs aim at their top level only
    return hits


@pytest.fixture(scope="module")
def listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    yield server
    try:
        conn, _ = server.accept()
        conn.close()
        accepted = True
    except BlockingIOError:
        accepted = False
    server.close()
    assert not accepted, "a sandboxed program reached a socket on the host's loopback"


@pytest.fixture(scope="module")
def env(listener):
    """The env, with small limits; on teardown, the host checks of the module docstring."""
    before = {p: _digest(p) for p in GUARDED}
    # children that earlier tests of this worker left running (e.g. a W&B logger's service
    # process) are not sandbox leftovers; nothing may run as a sandbox uid yet
    preexisting = set(_sandbox_processes())
    assert not [line for line in preexisting if _uid_of(line) >= sb.UID_BASE]
    config = SandboxConfig(isolation=LEVEL, time_limit_s=0.5, wall_factor=2.0, memory_mb=256, max_processes=8,
                           max_output_bytes=100_000, max_file_bytes=1_000_000, tmp_size_mb=8)
    env = DeepCoderEnv(sandbox=config)
    yield env
    env.close()
    assert [line for line in _sandbox_processes() if line not in preexisting] == []
    assert _marked_files() == []
    assert {p: _digest(p) for p in GUARDED} == before


def grade(env: DeepCoderEnv, program: str) -> dict:
    env.reset(0)
    env._problem = PROBLEM
    reward, info = env.grade(program)
    assert reward == 0.0 and info["success"] is False and info["passed_tests"] == 0, info
    return info


def test_control_a_correct_program_passes(env):
    env.reset(0)
    env._problem = PROBLEM
    assert env.grade("a, b = map(int, input().split())\nprint(a + b)")[0] == 1.0


def test_infinite_loop(env):
    info = grade(env, "while True:\n    pass\nprint(7)")
    assert "cpu_limit" in info["detail"] or "timeout" in info["detail"]


def test_fork_bomb(env):
    info = grade(env, "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\nprint(7)")
    assert "timeout" in info["detail"] or "cpu_limit" in info["detail"]


def test_memory_bomb(env):
    info = grade(env, "chunks = []\nwhile True:\n    chunks.append(bytearray(64 * 2 ** 20))\nprint(7)")
    assert "MemoryError" in info["detail"] or "timeout" in info["detail"]  # timeout: a very loaded machine


def test_a_gigabyte_of_output(env):
    info = grade(env, "import sys\nprint(7)\nchunk = 'x' * 2 ** 20\nfor _ in range(1024):\n    sys.stdout.write(chunk)")
    assert "output_limit" in info["detail"]


@needs_bwrap
def test_writing_outside_its_temp_dir(env):
    targets = [PROJECT / MARKER, PLUGIN / MARKER, HOME / MARKER, *[d / MARKER for d in SHARED_TMP]]
    program = f"""
import os, shutil
hit = False
for path in {[str(t) for t in targets]!r}:
    try:
        with open(path, 'w') as f:
            f.write('pwned')
        hit = hit or not path.startswith(('/tmp', '/dev/shm'))  # those are the sandbox's own
    except OSError:
        pass
for path in {[str(p) for p in GUARDED]!r}:
    for attack in (lambda p: open(p, 'a').write('pwned'), os.remove, lambda p: shutil.rmtree(os.path.dirname(p))):
        try:
            attack(path)
            hit = True
        except OSError:
            pass
if hit:
    print(7)
"""
    grade(env, program)


@needs_bwrap
def test_reading_the_projects_files_and_the_users_home(env):
    paths = [PROJECT / "pyproject.toml", Path(__file__).resolve(), PROJECT / ".git" / "HEAD"]
    home_file = _home_file()
    if home_file is not None:
        paths.append(home_file)
    program = f"""
import os
seen = []
for path in {[str(p) for p in paths]!r}:
    try:
        seen.append(open(path).read(10))
    except OSError:
        pass
try:
    seen += [n for n in os.listdir({str(HOME)!r}) if not n.startswith('.pyenv')]
except OSError:
    pass
try:
    seen += os.listdir({str(PROJECT)!r})
except OSError:
    pass
if seen:
    print(7)
"""
    grade(env, program)


def test_opening_a_socket_to_loopback(env, listener):
    port = listener.getsockname()[1]
    program = f"""
import socket
s = socket.socket()
s.settimeout(0.3)
if s.connect_ex(('127.0.0.1', {port})) == 0:
    s.sendall(b'{MARKER}')
    print(7)
"""
    grade(env, program)


@needs_bwrap
def test_spawning_a_shell(env):
    program = f"""
import subprocess
out = subprocess.run(['/bin/sh', '-c', 'echo pwned > {PROJECT / MARKER}; cat {PROJECT / "pyproject.toml"}; ls {HOME}'],
                     capture_output=True, text=True).stdout
if '[project]' in out or 'pwned' in open('{PROJECT / MARKER}').read():
    print(7)
"""
    info = grade(env, program)
    assert info["runnable"] is True


def test_sleeping_past_the_timeout(env):
    assert "timeout" in grade(env, "import time\ntime.sleep(30)\nprint(7)")["detail"]


def test_a_daemon_that_escapes_its_process_group(env):
    """A double-forked, session-leading sleeper is killed with its test (checked at teardown)."""
    grade(env, "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(60)\n    os._exit(0)\nprint(8)")


def test_killing_its_parent(env):
    program = """
import os, signal
killed = False
for target in (os.getppid(), 1, -1):
    try:
        os.kill(target, signal.SIGKILL)
        killed = killed or target != -1
    except OSError:
        pass
if killed:
    print(7)
"""
    grade(env, program)
    test_control_a_correct_program_passes(env)  # the sandbox still works


def test_closing_stdout_early(env):
    grade(env, "import os, sys, time\nos.close(1)\nos.close(2)\ntime.sleep(0.1)\nprint(7)")
    grade(env, "import sys\nsys.stdout.close()\nprint(7)")


def test_a_c_extension_segfault_after_printing_the_answer(env):
    info = grade(env, "import ctypes\nprint(7, flush=True)\nctypes.string_at(0)")
    assert "SIGSEGV" in info["detail"]


def test_printing_the_expected_output_then_crashing(env):
    assert "exit 1" in grade(env, "print(7, flush=True)\nraise RuntimeError('after the answer')")["detail"]
    assert "SIGABRT" in grade(env, "import os\nprint(7, flush=True)\nos.abort()")["detail"]
    assert "exit 2" in grade(env, "import sys\nprint(7)\nsys.exit(2)")["detail"]
