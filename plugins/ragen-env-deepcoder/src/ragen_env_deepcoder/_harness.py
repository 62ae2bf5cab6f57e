# ragen-env-deepcoder sandbox harness (run with -c, this line marks its processes in ps)
"""The program runner that executes *inside* the sandbox (standard library only).

The host starts this file's source as ``python -I -S -B -c <source>`` inside whatever isolation
it chose (see :mod:`ragen_env_deepcoder.sandbox`) and writes one ``marshal`` payload (plain
dicts, lists and strings, from the trusted host) to its stdin::

    {"code": str, "tests": [{"kind": "stdin" | "call", "input": str | list of arguments,
     "fn_name": str | None}], "limits": {...}, "uid": int | None, "nproc_extra": int | "scan",
     "workdir": str}

It compiles the program once, then runs every test in its own forked child and writes one JSON
line per test to stdout (``{"i", "status", "stdout" | "result", "stderr", "cpu_s", "wall_s"}``;
``result`` is the child's JSON text, parsed by the host), then ``{"done": true}``. It never sees
the expected outputs: the host compares, so a program that inspects its own process (frames,
``gc``) finds nothing to copy. Start-up cost matters (it is paid per program), so the harness
imports no ``json``/``re``/``traceback``/``shutil``: JSON is written by the small encoder below
and the rest is imported only where needed.

Each child, before running the program:

* becomes the leader of a new session (one process group to kill);
* gets the test input on stdin from a memory file, its stdout/stderr on pipes the harness reads
  up to a cap, and (function-call tests) fd 3 for the serialised return value; every other
  descriptor is closed;
* gets resource limits: CPU seconds, address space, file size, core size 0, open files and
  process count (``RLIMIT_NPROC``);
* when the harness runs as root, drops to an unprivileged uid/gid of its own (``uid``). Root is
  exempt from ``RLIMIT_NPROC``; an ordinary uid is not, and it cannot signal the harness.

The harness marks itself a child subreaper, so every orphaned descendant of a test is re-parented
to it; after each test it kills the test's process group and then every remaining child until it
has none, so no process outlives its test. The working directory is emptied between tests.
"""

import _signal as signal  # the C module: ``signal`` itself imports enum (several ms per program)
import io
import marshal
import math
import os
import resource
import select
import sys
import time
import types

try:
    from _json import encode_basestring_ascii as _json_str
except ImportError:  # interpreters without the C accelerator
    from json.encoder import py_encode_basestring_ascii as _json_str

_SIGNAL_NAMES = {}
for _name in sorted(dir(signal)):  # alphabetical: SIGABRT wins over its alias SIGIOT
    if _name.startswith("SIG") and not _name.startswith("SIG_") and isinstance(getattr(signal, _name), int):
        _SIGNAL_NAMES.setdefault(getattr(signal, _name), _name)
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
#: Bytes of a child's stderr kept for the diagnostic ``detail``.
STDERR_KEEP = 2000
#: A test that timed out having used less than this share of its wall-clock time on the CPU was
#: waiting, not computing: the program's remaining tests are not run (reported ``skipped``).
WAITED_CPU_SHARE = 0.1
WAITED_NOTE = "not run: an earlier test waited out its wall-clock limit without computing (sleeping or blocked)"
#: A program killed by SIGKILL with at least cpu_s minus this much CPU time was killed by its CPU
#: limit (rusage's tick accounting can read a little under the kernel's limit check).
CPU_SLACK_S = 0.25


def _prctl(option, value):
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError, ImportError):  # not Linux: the host refuses such machines
        pass


def _dumps(value):
    """JSON text of plain data (None, bool, int, finite float, str, list/tuple, str-keyed dict)."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return float.__repr__(value)
    if isinstance(value, str):
        return _json_str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_dumps(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(_json_str(k) + ":" + _dumps(v) for k, v in value.items()) + "}"
    raise TypeError(type(value).__name__)


# ---------------------------------------------------------------------------- inside the child
def _plain(value, depth=0):
    """JSON-ready copy of a return value (tuples become lists); raises TypeError if impossible."""
    if depth > 100:
        raise TypeError("nested too deeply")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        int.__repr__(value)  # ValueError past the int-to-text digit limit, as print() would
        return int(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError("non-finite float")
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth + 1) for v in value]
    if isinstance(value, dict) and all(type(k) is str for k in value):
        return {k: _plain(v, depth + 1) for k, v in value.items()}
    raise TypeError(type(value).__name__)


def _write_all(fd, data):
    while data:
        n = os.write(fd, data)
        data = data[n:]


def _set_limits(limits, nproc):
    cpu = int(math.ceil(limits["cpu_s"]))
    # soft = hard: the kernel kills at the limit (SIGKILL cannot be caught; a program that caught the
    # soft limit's SIGXCPU exited 0 just under cpu_s and passed)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    memory = int(limits["memory_mb"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(limits["file_bytes"]),) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


def _finish(main):
    """What a normal interpreter exit does before the child's ``os._exit``: wait for non-daemon
    threads (``threading.Thread(target=main).start()`` is a common way to get a deep stack), run
    ``atexit`` handlers, and close the files its globals held so their buffers reach disk."""
    threading = sys.modules.get("threading")
    if threading is not None and hasattr(threading, "_shutdown"):
        threading._shutdown()
    atexit = sys.modules.get("atexit")
    if atexit is not None:
        atexit._run_exitfuncs()
    main.__dict__.clear()  # reference counting closes the files only the program's globals held


def _print_exception(exc, limit):
    """The traceback on stderr; its last line alone when ``traceback`` cannot be imported (the
    program's uid may be unable to read the standard library)."""
    try:
        import traceback

        traceback.print_exception(type(exc), exc, exc.__traceback__, limit=limit)
    except BaseException:  # noqa: BLE001 - no traceback module (unreadable stdlib): one line instead
        try:
            sys.stderr.write(f"{type(exc).__name__}: {exc}\n")
        except BaseException:  # noqa: BLE001 - the program closed stderr: nothing left to report to
            pass


def _child(code_obj, test, fds, limits, uid, nproc):
    """Runs in the forked child; never returns."""
    status = 1
    try:
        os.setsid()
        # Move our ends above 10 first so the dup2 calls below cannot clobber each other.
        high = [os.dup(fd) if fd < 10 else fd for fd in fds]
        for target, fd in enumerate(high):
            os.dup2(fd, target)
        os.closerange(4, 1 << 16)
        _set_limits(limits, nproc)
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r")), encoding="utf-8", errors="replace")
        sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w"), 1 << 16), encoding="utf-8", errors="replace")
        sys.stderr = sys.__stderr__ = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w")), encoding="utf-8", errors="replace", write_through=True)
        sys.argv = ["solution.py"]
        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = __builtins__
        sys.modules["__main__"] = main
        try:
            exec(code_obj, main.__dict__)  # noqa: S102 - the untrusted program, in the sandboxed, limited child
            if test["kind"] == "call":
                name = test.get("fn_name") or ""
                target = main.__dict__.get("Solution")
                fn = getattr(target(), name) if isinstance(target, type) and hasattr(target, name) else main.__dict__.get(name)
                if not callable(fn):
                    raise NameError(f"the program defines no function {name!r} (nor Solution.{name})")
                result = fn(*test["input"])
                text = '{"str":' + _json_str(str(result)[: int(limits["output_bytes"])])
                try:
                    text += ',"json":' + _dumps(_plain(result))
                except (TypeError, ValueError, RecursionError):
                    pass
                _write_all(3, (text + "}").encode("utf-8", "replace"))
            _finish(main)
            status = 0
        except SystemExit as exc:
            status = 0 if exc.code in (None, 0) else exc.code if isinstance(exc.code, int) else 1
            if not isinstance(exc.code, (int, type(None))):
                print(exc.code, file=sys.stderr)
        except BaseException as exc:  # noqa: BLE001 - the program's own error: report it, fail the test
            _print_exception(exc, -3)
            status = 1
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001 - the program closed or broke the stream; what it wrote is kept
                pass
    except BaseException as exc:  # noqa: BLE001 - setup failed (should not happen): a failed test, never a hang
        _print_exception(exc, None)
        status = 125
    os._exit(status if isinstance(status, int) and 0 <= status < 256 else 1)


# ---------------------------------------------------------------------------- in the harness
def _children():
    pid = os.getpid()
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(p) for p in handle.read().split()]
    except OSError:
        kids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as handle:
                        stat = handle.read()
                except OSError:
                    continue
                if int(stat.rpartition(")")[2].split()[1]) == pid:
                    kids.append(int(entry))
        return kids


def _kill_all_children(patience_s=5.0):
    """SIGKILL every descendant (they are re-parented to us as their parents die) and reap them.

    Returns when we have no child left, or after ``patience_s`` (a process the kernel cannot
    kill in that time is stuck in the kernel; the host's namespace teardown takes it).
    """
    give_up = time.monotonic() + patience_s
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            return
        kids = _children()
        for kid in kids:
            for kill in (os.killpg, os.kill):
                try:
                    kill(kid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        if time.monotonic() > give_up:
            return
        time.sleep(0 if kids else 0.001)


def _read_some(fd, chunks, cap, size):
    try:
        data = os.read(fd, 1 << 16)
    except BlockingIOError:
        return True, size
    if not data:
        return False, size
    if size < cap:
        chunks.append(data[: cap - size])
    return True, size + len(data)


#: Prefix of the host temporary directories the sandbox module creates for one program run.
WORKDIR_PREFIX = "ragen-deepcoder-"


def _private(path):
    """Whether ``path`` is a directory this run may empty: a host temp dir made for it (its name
    says so), or ``/tmp`` when we are pid 1 of a new namespace (bwrap's private tmpfs). A harness
    started by hand, outside a sandbox, never empties a shared directory."""
    if os.path.basename(os.path.normpath(path)).startswith(WORKDIR_PREFIX):
        return True
    return os.path.normpath(path) == "/tmp" and os.getpid() == 1 and os.path.ismount("/tmp")


def _empty_dir(path, uid=None):
    """Remove everything the program left in ``path``. As the program's ``uid`` (a forked child):
    the harness keeps no CAP_DAC_OVERRIDE or CAP_FOWNER, so a folder the program made unreadable
    (``chmod 0``) could be neither listed nor removed by it, and the next test found it (with what
    the last test wrote inside); the owner may open it up again first. A program that left
    nothing costs one listing: no fork, no ``shutil`` (it is paid per test)."""
    try:
        if not os.listdir(path):
            return
    except OSError:
        pass  # the program locked ``path`` itself: its own uid opens it up below
    if uid is None or os.getuid() == uid:
        _remove_entries(path)
        return
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            _remove_entries(path)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    _remove_entries(path)  # whatever the harness itself owns


def _remove_entries(path):
    for entry in os.listdir(path):
        full = os.path.join(path, entry)
        try:
            if os.path.isdir(full) and not os.path.islink(full):
                import shutil  # only for a folder: importing it costs ~7 ms

                _open_up(full)
                shutil.rmtree(full, ignore_errors=True)
            else:
                os.unlink(full)
        except OSError:
            pass


def _open_up(folder, depth=0):
    """Give the owner rwx on ``folder`` and the folders under it, so it can list and remove them."""
    try:
        os.chmod(folder, 0o700)
        entries = os.listdir(folder)
    except OSError:
        return
    for entry in entries:
        full = os.path.join(folder, entry)
        if depth < 64 and os.path.isdir(full) and not os.path.islink(full):
            _open_up(full, depth + 1)


def _run_test(code_obj, test, limits, uid, nproc):
    stdin_fd = os.memfd_create("stdin")
    if test["kind"] == "stdin":
        _write_all(stdin_fd, str(test["input"]).encode("utf-8", "replace"))
        os.lseek(stdin_fd, 0, os.SEEK_SET)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    res_r, res_w = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(code_obj, test, [stdin_fd, out_w, err_w, res_w], limits, uid, nproc)
    for fd in (stdin_fd, out_w, err_w, res_w):
        os.close(fd)
    cap = int(limits["output_bytes"])
    streams = {out_r: ([], 0, cap), err_r: ([], 0, 1 << 16), res_r: ([], 0, cap * 2 + 64)}
    for fd in streams:
        os.set_blocking(fd, False)
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    for fd in (*streams, pidfd):
        poller.register(fd, select.POLLIN)
    deadline = start + float(limits["wall_s"])
    verdict = None
    exited = False
    while not exited and verdict is None:
        left = deadline - time.monotonic()
        if left <= 0:
            verdict = "timeout"
            break
        for fd, _ in poller.poll(int(left * 1000) + 1):
            if fd == pidfd:
                exited = True
                continue
            chunks, size, limit = streams[fd]
            more, size = _read_some(fd, chunks, limit, size)
            streams[fd] = (chunks, size, limit)
            if not more:
                poller.unregister(fd)
            elif size > limit and fd != err_r:
                verdict = "output_limit"
    if not exited:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    _, wait_status, usage = os.wait4(pid, 0)
    wall = time.monotonic() - start
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    _kill_all_children()
    os.close(pidfd)
    for fd in streams:  # every writer is dead now: read to end of file
        os.set_blocking(fd, True)
        chunks, size, limit = streams[fd]
        more = True
        while more:
            more, size = _read_some(fd, chunks, limit, size)
        streams[fd] = (chunks, size, limit)
        os.close(fd)
    cpu = usage.ru_utime + usage.ru_stime
    if verdict is None:
        if streams[out_r][1] > cap or streams[res_r][1] > streams[res_r][2]:
            verdict = "output_limit"
        elif os.WIFSIGNALED(wait_status):
            sig = os.WTERMSIG(wait_status)
            verdict = {signal.SIGXCPU: "cpu_limit", signal.SIGXFSZ: "file_limit"}.get(sig, f"signal {_SIGNAL_NAMES.get(sig, sig)}")
            if sig == signal.SIGKILL and cpu >= float(limits["cpu_s"]) - CPU_SLACK_S:  # RLIMIT_CPU's kill (else the OOM killer's)
                verdict = "cpu_limit"
        elif os.WEXITSTATUS(wait_status) != 0:
            verdict = f"exit {os.WEXITSTATUS(wait_status)}"
        elif cpu > float(limits["cpu_s"]):
            verdict = "cpu_limit"
        else:
            verdict = "ok"
    stderr = b"".join(streams[err_r][0]).decode("utf-8", "replace")[-STDERR_KEEP:]
    line = {"status": verdict, "stderr": stderr, "cpu_s": round(cpu, 4), "wall_s": round(wall, 4)}
    if test["kind"] == "stdin":
        line["stdout"] = b"".join(streams[out_r][0]).decode("utf-8", "replace")
    else:
        line["result"] = b"".join(streams[res_r][0]).decode("utf-8", "replace")
    return line


def _count_own_tasks():
    """Tasks (threads) of our uid on this host: the base RLIMIT_NPROC counts against."""
    me, total = os.getuid(), 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == me:
                    total += len(os.listdir(f"/proc/{entry}/task"))
            except OSError:
                continue
    return total


def main():
    payload = marshal.loads(sys.stdin.buffer.read())  # noqa: S302 - written by the trusted host (sandbox.py)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    if os.getpid() != 1:  # pid 1 of a namespace (bwrap, unshare) reaps orphans already, and
        _prctl(PR_SET_CHILD_SUBREAPER, 1)  # bwrap sets no_new_privs; the limits level needs both
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    workdir = payload["workdir"]
    os.chdir(workdir)
    clean = _private(workdir)
    limits, uid, tests = payload["limits"], payload.get("uid"), payload["tests"]
    extra = payload.get("nproc_extra", 0)
    nproc = int(limits["processes"]) + (_count_own_tasks() if extra == "scan" else int(extra))
    out = sys.stdout

    def emit(obj):
        out.write(_dumps(obj) + "\n")
        out.flush()

    try:
        code_obj = compile(payload["code"], "solution.py", "exec")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        emit({"compile_error": f"{type(exc).__name__}: {exc}"[:STDERR_KEEP]})
        emit({"done": True})
        return
    budget_end = time.monotonic() + float(limits["total_s"])
    waited = False
    for i, test in enumerate(tests):
        if waited or time.monotonic() >= budget_end:
            emit({"i": i, "status": "skipped", "stderr": WAITED_NOTE if waited else "", "cpu_s": 0.0, "wall_s": 0.0})
            continue
        line = _run_test(code_obj, test, limits, uid, nproc)
        line["i"] = i
        emit(line)
        # it waited out its wall-clock limit without computing (a sleep, a deadlock): the next tests
        # would each wait theirs too (a sleeper cost every test's limit: 17-18 s a program)
        waited = line["status"] == "timeout" and line["cpu_s"] < WAITED_CPU_SHARE * line["wall_s"]
        if clean:
            _empty_dir(workdir, uid)
    emit({"done": True})


if __name__ == "__main__":
    main()
    os._exit(0)  # nothing left to clean up: skip the interpreter's shutdown
