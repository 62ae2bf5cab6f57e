"""The sandbox: runs model-written programs in isolated, resource-limited processes, in parallel.

A program and its test inputs go to :meth:`Sandbox.run`, which starts one sandboxed process (the
*harness*, :mod:`ragen_env_deepcoder._harness`) that forks one child per test case and streams
back each child's output; expected outputs never enter the sandbox (the caller compares).

Isolation levels (strongest first), detected once per process by running a real probe program
(the choice is printed once per run, see :func:`choose_level`):

``bwrap``
    bubblewrap: new network, pid, ipc, uts and mount namespaces. The filesystem is a fresh root
    holding read-only binds of ``/usr``, the ``/lib*`` directories, the loader cache and the
    Python installation, a private size-capped tmpfs ``/tmp`` (the only writable place), a
    minimal ``/dev`` and the namespace's own ``/proc``. The harness is pid 1 of the namespace,
    so a program cannot kill it, and when it ends the kernel kills whatever is left.
``unshare``
    util-linux ``unshare``: new network, pid, ipc and uts namespaces (with ``--kill-child``), a
    private temporary directory as working directory, ``HOME`` and ``TMPDIR``. The host's files
    stay visible (read and write) with the permissions of the uid the program runs as.
``limits``
    resource limits and a private temporary directory only: the network and the host's files
    are reachable. Used only with ``sandbox.allow_unisolated: true``.

On every level each test process gets CPU-time, address-space, file-size, open-file and
process-count limits, a wall-clock timeout that kills its whole process tree, and a cap on the
output kept. ``RLIMIT_NPROC`` does not bind root, so when this process runs as root every
program runs as an unprivileged uid of its own (one per worker slot; no entry in /etc/passwd is
needed): the limit then holds, the program cannot signal the harness, and (bwrap) it can write
nothing but ``/tmp``. For a non-root user, bwrap and unshare run the program in a new user
namespace, where the kernel counts processes per namespace, so the limit is per program too.
Nothing here needs cgroups or seccomp.

Parallelism: a process-wide pool per worker count (a bounded semaphore plus slot ids) lets up to
``workers`` programs run at once; callers are threads (the env pool steps ``async_step`` envs in
threads), each blocking in :meth:`Sandbox.run` on its own sandboxed subprocess.
"""

from __future__ import annotations

import ast
import functools
import json
import marshal
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragen_core.errors import EnvError
from ragen_core.interfaces.env_pool import RUN_VARIABLE_PREFIX
from ragen_env_deepcoder.config import SandboxConfig

LEVELS = ("bwrap", "unshare", "limits")
"""Isolation levels, strongest first."""

HARNESS_SOURCE = (Path(__file__).with_name("_harness.py")).read_text(encoding="utf-8")
#: Command line of the harness when the sandbox runs this very interpreter: it reads the harness
#: compiled here (marshal, one length line first) from stdin, which saves compiling ~400 lines per
#: program. The first line marks the harness's processes (``ps``, the security tests).
BOOTSTRAP = "# ragen-env-deepcoder sandbox harness\nimport marshal, sys\nexec(marshal.loads(sys.stdin.buffer.read(int(sys.stdin.buffer.readline()))))"

#: Name prefix of the host temp dirs programs run in below the bwrap level (the harness checks it
#: before emptying a directory between tests).
WORKDIR_PREFIX = "ragen-deepcoder-"
#: Extra wall-clock seconds the host allows a whole run beyond its test budget (start-up, I/O).
STARTUP_SLACK_S = 10.0
#: First uid of the per-slot program uids used when running as root (below 2**31, far above
#: ordinary users and the usual subordinate-uid ranges).
UID_BASE = 1_500_000_000
MAX_SLOTS = 1024

_DESCRIPTIONS = {
    "bwrap": "bubblewrap: no network, own pid/mount namespaces, read-only Python and system libraries, private /tmp",
    "unshare": "unshare: no network, own pid namespace, private working directory; host files visible",
    "limits": "resource limits and a private working directory only; network and host files reachable",
}


@dataclass
class TestRun:
    """What one test case of a program did (the caller decides whether it passed)."""

    __test__ = False  # not a pytest test class, whatever its name

    status: str
    """``ok``, ``timeout``, ``cpu_limit``, ``output_limit``, ``file_limit``, ``exit N``,
    ``signal NAME``, ``skipped`` (over the total budget) or ``sandbox error``."""
    stdout: str = ""
    result: dict[str, Any] | None = None
    """Function-call tests: ``{"str": str(value), "json": value?}`` as the program returned it."""
    stderr: str = ""
    cpu_s: float = 0.0
    wall_s: float = 0.0


@dataclass
class ProgramRun:
    """All test runs of one program (``compile_error`` set: nothing ran)."""

    tests: list[TestRun] = field(default_factory=list)
    compile_error: str | None = None
    level: str = ""


# ------------------------------------------------------------------------------- the interpreter
@functools.cache
def sandbox_python(python: str | None = None) -> tuple[str, tuple[str, ...]]:
    """The interpreter programs run with and the directories it needs visible in the sandbox.

    Default: this process's base installation (not the virtual environment: programs get the
    standard library only, under ``-S``). Another interpreter is asked for its prefixes.
    """
    if python is None:
        prefixes = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.base_exec_prefix)}
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        candidates = [os.path.realpath(sys.executable)] + [os.path.join(p, "bin", name) for p in sorted(prefixes) for name in (version, "python3")]
        for exe in candidates:
            if os.access(exe, os.X_OK) and any(exe.startswith(p + os.sep) for p in prefixes):
                return exe, tuple(sorted(prefixes))
        exe = os.path.realpath(sys.executable)
        return exe, tuple(sorted(prefixes | {os.path.dirname(exe)}))
    exe = os.path.realpath(shutil.which(python) or python)
    try:
        out = subprocess.run([exe, "-I", "-S", "-c", "import sys; print(sys.base_prefix); print(sys.base_exec_prefix)"],
                             capture_output=True, text=True, timeout=30, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError) as exc:
        raise EnvError(f"deepcoder sandbox: cannot run sandbox.python={python!r}: {exc}") from exc
    return exe, tuple(sorted({os.path.realpath(p) for p in out} | {os.path.dirname(exe)}))


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _bwrap_argv(prefixes: tuple[str, ...], tmp_mb: int, as_root: bool) -> list[str]:
    argv = ["bwrap", "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--as-pid-1"]
    if as_root:
        # No user namespace for root: the harness keeps only what it needs to drop to the
        # program's uid and to kill its processes; the program itself ends with no capability.
        argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_KILL"]
    else:
        argv += ["--unshare-user"]
    argv += ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    # Directories bwrap creates on the way to a bind are 0700; the program's uid must pass them.
    made: set[str] = set()
    for path in ("/etc/ld.so.cache", *prefixes):
        parents = [str(p) for p in reversed(Path(path).parents) if str(p) not in ("/", "/usr") and not str(p).startswith("/usr/")]
        for parent in parents:
            if parent not in made:
                made.add(parent)
                argv += ["--perms", "0755", "--dir", parent]
    for etc in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime"):
        argv += ["--ro-bind-try", etc, etc]
    for prefix in prefixes:
        if not (prefix == "/usr" or prefix.startswith("/usr/")):
            argv += ["--ro-bind", prefix, prefix]
    argv += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(tmp_mb * 1024 * 1024), "--tmpfs", "/tmp",
             "--chdir", "/tmp", "--"]
    return argv


def _unshare_argv(as_root: bool) -> list[str]:
    argv = ["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc", "--ipc", "--uts"]
    return argv + ([] if as_root else ["--map-root-user"]) + ["--"]


def _command(level: str, config: SandboxConfig) -> tuple[list[str], str | None, int | str]:
    """``(argv, workdir inside the sandbox or None for a host temp dir, nproc_extra)``."""
    python, prefixes = sandbox_python(config.python)
    tail = [python, "-I", "-S", "-B", "-c", BOOTSTRAP if config.python is None else HARNESS_SOURCE]
    root = _is_root()
    if level == "bwrap":
        # Non-root: the harness (pid 1) shares the program's uid in the new user namespace.
        return _bwrap_argv(prefixes, config.tmp_size_mb, root) + tail, "/tmp", 0 if root else 1
    if level == "unshare":
        # Non-root: the unshare process and the harness share the program's namespace uid.
        return _unshare_argv(root) + tail, None, 0 if root else 2
    return tail, None, 0 if root else "scan"


# ------------------------------------------------------------------------------ running one program
def call_args(raw: Any) -> list[Any]:
    """Arguments of a function-call test: a list as is, or text with one value per line (JSON,
    else a Python literal, else the line as a string). Parsed here on the host, so the harness
    needs no parser and gets the values through ``marshal``."""
    if isinstance(raw, (list, tuple)):
        return list(raw)
    args: list[Any] = []
    for line in str(raw).split("\n"):
        if not line.strip():
            continue
        try:
            args.append(json.loads(line))
            continue
        except (ValueError, RecursionError):
            pass
        try:
            args.append(ast.literal_eval(line))
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            args.append(line)
    return args


def _result(text: Any) -> dict[str, Any] | None:
    """The child's serialised return value (untrusted text: anything odd is no result)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) and isinstance(value.get("str"), str) else None


def _harness_blob() -> bytes:
    code = marshal.dumps(compile(HARNESS_SOURCE, "ragen_env_deepcoder/_harness.py", "exec"))
    return str(len(code)).encode() + b"\n" + code


_HARNESS_BLOB = _harness_blob()


def _slot_uid(slot: int) -> int:
    return UID_BASE + (os.getpid() % 100_000) * MAX_SLOTS + slot


def _kill_uid(uid: int) -> None:
    """SIGKILL every process of ``uid`` (when a harness died and may have left processes behind):
    ``kill -KILL -1`` run as that uid signals all its processes but itself."""
    kill = shutil.which("kill") or "/bin/kill"
    try:
        subprocess.run([kill, "-KILL", "-1"], user=uid, group=uid, extra_groups=[], check=False, timeout=30,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):  # no kill binary: the processes run out their CPU limit
        pass


def run_program(level: str, config: SandboxConfig, code: str, tests: list[dict[str, Any]], slot: int = 0) -> ProgramRun:
    """Run ``code`` on ``tests`` (``{"kind": "stdin"|"call", "input", "fn_name"}``) at ``level``.

    Never raises for anything the program does; a harness that dies or hangs yields
    ``sandbox error`` (or ``timeout``) runs for the tests it did not report.
    """
    argv, inside_workdir, nproc_extra = _command(level, config)
    uid = _slot_uid(slot) if _is_root() else None
    host_dir = None
    if inside_workdir is None:
        host_dir = tempfile.mkdtemp(prefix=WORKDIR_PREFIX)  # the harness empties only such dirs
        if uid is not None:
            os.chown(host_dir, uid, uid)
    workdir = inside_workdir or host_dir
    limits = {
        "cpu_s": config.time_limit_s,
        "wall_s": config.time_limit_s * config.wall_factor,
        "total_s": config.total_time_limit_s,
        "memory_mb": config.memory_mb,
        "processes": config.max_processes,
        "output_bytes": config.max_output_bytes,
        "file_bytes": config.max_file_bytes,
    }
    sent = [{**t, "input": call_args(t["input"])} if t["kind"] == "call" else t for t in tests]
    payload = marshal.dumps({"code": code, "tests": sent, "limits": limits, "uid": uid, "nproc_extra": nproc_extra, "workdir": workdir}, 2)
    if config.python is None:
        payload = _HARNESS_BLOB + payload
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(workdir), "TMPDIR": str(workdir), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    budget = min(config.total_time_limit_s, max(1, len(tests)) * limits["wall_s"]) + STARTUP_SLACK_S
    out, err, timed_out, clean_exit = b"", b"", False, False
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                cwd=host_dir or "/", start_new_session=True, close_fds=True)
        try:
            out, err = proc.communicate(payload, timeout=budget)
        except subprocess.TimeoutExpired:
            timed_out = True
            _killpg(proc.pid)
            out, err = proc.communicate()
        finally:
            _killpg(proc.pid)
        clean_exit = proc.returncode == 0
    finally:
        if host_dir is not None:
            if uid is not None and level == "limits" and not clean_exit:
                _kill_uid(uid)  # the harness died: its orphans are in no namespace we can tear down
            shutil.rmtree(host_dir, ignore_errors=True)
    return _parse(out, err, len(tests), timed_out, level)


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _parse(out: bytes, err: bytes, n_tests: int, timed_out: bool, level: str) -> ProgramRun:
    run = ProgramRun(level=level)
    by_index: dict[int, TestRun] = {}
    for raw in out.decode("utf-8", "replace").splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if "compile_error" in line:
            run.compile_error = str(line["compile_error"])
        elif "i" in line:
            by_index[int(line["i"])] = TestRun(
                status=str(line.get("status", "sandbox error")),
                stdout=str(line.get("stdout", "")),
                result=_result(line.get("result")),
                stderr=str(line.get("stderr", "")),
                cpu_s=float(line.get("cpu_s", 0.0)),
                wall_s=float(line.get("wall_s", 0.0)),
            )
    if run.compile_error is None:
        why = "timeout" if timed_out else "sandbox error"
        tail = err.decode("utf-8", "replace")[-2000:]
        run.tests = [by_index.get(i) or TestRun(status=why, stderr=tail) for i in range(n_tests)]
    return run


# ------------------------------------------------------------------------------ detection
#: The probe program: reads stdin and imports standard-library modules the harness has not loaded
#: (an interpreter the program's uid cannot read fails here, not in the first real test).
_PROBE_CODE = "import fractions, heapq\nprint(input()[::-1])"


def probe(level: str, python: str | None = None) -> str | None:
    """``None`` when ``level`` works on this machine (a real program ran), else why not."""
    return _probe(level, python)


@functools.cache
def _probe(level: str, python: str | None) -> str | None:
    if not sys.platform.startswith("linux"):
        return f"needs Linux (this is {sys.platform})"
    tool = {"bwrap": "bwrap", "unshare": "unshare"}.get(level)
    if tool and shutil.which(tool) is None:
        return f"{tool} is not installed"
    config = SandboxConfig(time_limit_s=5.0, wall_factor=2.0, python=python)
    try:
        run = run_program(level, config, _PROBE_CODE, [{"kind": "stdin", "input": "ko\n", "fn_name": None}])
    except (OSError, EnvError) as exc:
        return f"{type(exc).__name__}: {exc}"
    test = run.tests[0] if run.tests else None
    if run.compile_error is None and test is not None and test.status == "ok" and test.stdout == "ok\n":
        return None
    lines = (run.compile_error or (f"{test.status}: {test.stderr.strip()}" if test else "no result")).splitlines()
    why = f"probe program failed ({lines[-1] if lines else 'no output'})"
    if _is_root() and test is not None and "ModuleNotFoundError" in test.stderr:
        why += (f"; the Python at {sandbox_python(python)[0]} is not readable by the unprivileged uid programs run as:"
                " set sandbox.python to an interpreter all users can read (e.g. /usr/bin/python3)")
    return why


def available_levels(python: str | None = None) -> dict[str, str | None]:
    """Every level with ``None`` (works here) or the reason it does not."""
    return {level: probe(level, python) for level in LEVELS}


_reported: set[str] = set()
_report_lock = threading.Lock()
#: Set to ``"<level>:<pid>"`` by the process that printed the isolation line. Processes it starts
#: afterwards (the process pool's workers, a local Ray cluster's) inherit it, and the ray pool
#: passes it to actors on other machines (a run variable:
#: :data:`~ragen_core.interfaces.env_pool.RUN_VARIABLE_PREFIX`); they stay quiet about the same
#: level: the line is printed once per run, by the trainer's availability check
#: (:func:`ragen_env_deepcoder.plugin.check_available`), not once per worker.
REPORTED_ENV = RUN_VARIABLE_PREFIX + "DEEPCODER_SANDBOX_REPORTED"


#: How to get a named level's missing tool.
_INSTALL = {"bwrap": "install bubblewrap (apt-get install bubblewrap)", "unshare": "install util-linux (apt-get install util-linux)"}
_ACCEPT_LIMITS = "set sandbox.allow_unisolated=true to accept resource limits and a private temp dir only"


def _stronger_level_hint(python: str | None, first: bool = False) -> list[str]:
    """A hint naming the namespaced level that works here (none: no hint)."""
    working = next((lv for lv in LEVELS[:2] if probe(lv, python) is None), None)
    return [f"{'' if first else 'or '}use sandbox.isolation=auto, which picks '{working}' (it works here)"] if working else []


def choose_level(config: SandboxConfig) -> str:
    """The level programs run at under ``config``; reports the choice once per process tree (see :data:`REPORTED_ENV`).

    Raises:
        EnvError: the requested level is unavailable, or only ``limits`` is and
            ``allow_unisolated`` is off.
    """
    py = config.python
    if config.isolation != "auto":
        why = probe(config.isolation, py)
        if why is not None:
            hints = [] if "set sandbox.python" in why else [_INSTALL[config.isolation]] if why.endswith("is not installed") else []
            if config.isolation == "limits" and not config.allow_unisolated:
                hints.append("isolation 'limits' also needs sandbox.allow_unisolated=true (it accepts resource limits and a private temp dir only)")
            hints += _stronger_level_hint(py, first=not hints)
            raise EnvError(f"deepcoder sandbox: isolation {config.isolation!r} is not available here: {why}", hints=hints)
        level = config.isolation
    else:
        level = next((lv for lv in LEVELS if probe(lv, py) is None), "")
        if not level:
            reasons = "; ".join(f"{lv}: {probe(lv, py)}" for lv in LEVELS)
            raise EnvError(f"deepcoder sandbox: cannot run programs on this machine ({reasons})")
    if level == "limits" and not config.allow_unisolated:
        if config.isolation == "limits":  # named: the user chose it, only the acceptance is missing
            raise EnvError("deepcoder sandbox: isolation 'limits' leaves the host network reachable and host files visible to "
                           "model-written code, so it needs sandbox.allow_unisolated=true",
                           hints=[_ACCEPT_LIMITS, *_stronger_level_hint(py)])
        reasons = "; ".join(f"{lv}: {probe(lv, py)}" for lv in LEVELS[:2])
        missing = str(probe("bwrap", py)).endswith("is not installed")  # not when bwrap is there but fails
        hints = ["install bubblewrap: apt-get install bubblewrap (or run 'make setup' as root)"] if missing else []
        raise EnvError(
            f"deepcoder sandbox: refusing to run model-written code without network isolation ({reasons})",
            hints=[*hints, f"{'or ' if hints else ''}accept resource limits and a private temp dir only: sandbox.allow_unisolated=true"],
        )
    _report(level)
    return level


def _report(level: str) -> None:
    """Print the isolation line for ``level`` unless this process or one that started it did."""
    with _report_lock:
        if level in _reported:
            return
        _reported.add(level)
        said, _, pid = os.environ.get(REPORTED_ENV, "").partition(":")
        if said == level and pid != str(os.getpid()):
            return  # a parent process said it (the trainer, before it started this worker)
        if os.environ.get("RANK", "0") != "0":
            return  # under torchrun every rank checks the sandbox: rank 0 says it
        os.environ[REPORTED_ENV] = f"{level}:{os.getpid()}"
        uid_note = "; programs run as a per-worker unprivileged uid" if _is_root() else ""
        print(f"ragen-env-deepcoder: sandbox isolation '{level}' ({_DESCRIPTIONS[level]}{uid_note})", file=sys.stderr)


# ------------------------------------------------------------------------------ the worker pool
class _Pool:
    """At most ``size`` programs at once; each running program holds one slot id."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._free = list(range(size))
        self._cond = threading.Condition()

    def acquire(self) -> int:
        with self._cond:
            while not self._free:
                self._cond.wait()
            return self._free.pop()

    def release(self, slot: int) -> None:
        with self._cond:
            self._free.append(slot)
            self._cond.notify()


_pools: dict[int, _Pool] = {}
_pools_lock = threading.Lock()


def worker_pool(workers: int) -> _Pool:
    """The process-wide pool of ``workers`` slots (0 = one per CPU)."""
    size = min(MAX_SLOTS, workers or os.cpu_count() or 1)
    with _pools_lock:
        if size not in _pools:
            _pools[size] = _Pool(size)
        return _pools[size]


class Sandbox:
    """Runs programs at the level chosen for ``config``, at most ``workers`` at once per process.

    Raises:
        EnvError: (at construction) no acceptable isolation level, see :func:`choose_level`.
    """

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        self.level = choose_level(config)
        self.pool = worker_pool(config.workers)

    def run(self, code: str, tests: list[dict[str, Any]]) -> ProgramRun:
        """Run ``code`` on ``tests``, blocking until a worker slot is free and the run is over."""
        slot = self.pool.acquire()
        try:
            return run_program(self.level, self.config, code, tests, slot)
        finally:
            self.pool.release(slot)
