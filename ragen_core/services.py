"""Service helper: start, share, restart and stop the child process an env depends on.

Some envs need a server next to them: a code sandbox, a retrieval server, a web shop, a Lean
checker. This module does the process work for them, so each env package only describes *how*
to launch its server (a :class:`ServiceSpec`, written in code) and lets the user set the knobs
(a :class:`ServiceConfig`, embedded in the env's pydantic config).

Lifecycle:
    1. ``acquire(spec, config)`` picks a free loopback port (bind port 0, read it, close it),
       substitutes ``{port}`` and ``{host}`` in the command and in the env values, and starts
       the child in its own session with its stdout and stderr appended to a log file (a pipe
       nobody reads would fill up and block the child).
    2. It waits until the child is *ready*, not merely alive: a ``GET`` on ``spec.health_path``
       answers 2xx, or, when the spec has no health path, a TCP connect succeeds. A server that
       is still loading its index is alive but not ready (503). If the child exits first, answers
       500 (it cannot get ready: a corpus that does not load), or ``ready_timeout_s`` passes, the
       child's process group is killed and a
       :class:`ServiceError` names the service, the command, the reason and the last lines of
       the child's output. If the child died because another process took the port between our
       pick and its bind, a new port is tried (``port_attempts`` in all).
    3. The service is shared: every ``acquire`` with an equal spec and an equal config in this
       process returns a handle on the same child and adds one to its reference count (a
       different config, say another ``ready_timeout_s``, gets its own child). Each env calls
       ``handle.release()`` (or uses the handle as a context manager) when it closes; the last
       release stops the child. All of this is thread-safe; concurrent acquires wait for the
       one start.
    4. Before talking to the server, an env calls ``handle.ensure_ready()``, which returns the
       URL. It is cheap when the child is alive (no request is made). When the child has died,
       it is restarted after an exponential back-off (``backoff_s`` doubling up to
       ``backoff_max_s``), at most ``max_restarts`` times within ``restart_window_s`` (a restart
       that dies before it is ready is one more death); past that, ``ensure_ready`` raises.
       Other threads calling it meanwhile wait for the restart. The port is kept when it is
       still free, so URLs mostly stay valid, but read the URL from ``ensure_ready()`` rather
       than caching it.
    5. Children are stopped on the last release, by ``stop_all()``, at interpreter exit
       (atexit, which also covers Ctrl-C: Python turns SIGINT into KeyboardInterrupt and exits
       normally; the child, in its own session, does not get the terminal's Ctrl-C itself) and
       on SIGTERM. SIGINT is never touched, and SIGTERM only while nobody else
       handles it: then the default action would kill the process without running atexit, so
       a handler (set from the main thread) stops the children and dies by the signal as
       before. A trainer's own SIGTERM handler is left alone; atexit covers its exit.
       Stopping sends SIGTERM to the child's process group, waits ``stop_timeout_s``, then
       sends SIGKILL. On Linux the child is also told to die with its parent
       (``PR_SET_PDEATHSIG``), so even ``kill -9`` of the trainer does not leak it.

URL mode: when the user sets ``config.url`` no child is started. The server at that URL is
checked for readiness once (polling up to ``ready_timeout_s`` the first time a process asks for
it, one probe of at most 3 s any later time, so a server that went away mid-run fails each new
env at once), ``ensure_ready()`` returns the URL without further checks, and releasing the
handle does nothing to the remote server.

Example (an env package; the conformance kit's ``picklable`` check passes: a handle holds a lock
and belongs to its process, so a pickled copy drops it and acquires its own share)::

    import sys
    from typing import Any
    from pydantic import Field
    from ragen_core import Env, EnvConfig, EnvSpec
    from ragen_core.services import ServiceConfig, ServiceHandle, ServiceSpec, acquire

    RETRIEVER = ServiceSpec(
        name="retriever",
        command=(sys.executable, "-m", "my_env.server", "--host", "{host}", "--port", "{port}"),
        health_path="/health",
    )

    class SearchConfig(EnvConfig):
        retriever: ServiceConfig = Field(default_factory=lambda: ServiceConfig(ready_timeout_s=600))

    class SearchEnv(Env):
        config_class = SearchConfig

        def __init__(self, config: SearchConfig | None = None, **overrides: Any) -> None:
            super().__init__(config, **overrides)
            self._retriever: ServiceHandle | None = acquire(RETRIEVER, self.config.retriever)

        def _url(self) -> str:
            if self._retriever is None:  # a pickled copy, say in a worker process
                self._retriever = acquire(RETRIEVER, self.config.retriever)
            return self._retriever.ensure_ready()

        def step(self, action):
            url = self._url()
            ...  # POST {url}/retrieve, with a timeout of its own

        def __getstate__(self) -> dict[str, Any]:
            return {**self.__dict__, "_retriever": None}

        def close(self) -> None:
            if self._retriever is not None:
                self._retriever.release()
                self._retriever = None

    # plugin.py: step waits on the server, so the local pool may step episodes in threads
    SPEC = EnvSpec(name="search", summary="...", config_model=SearchConfig, factory="my_env.env:SearchEnv",
                   async_step=True)

Limits: ``ensure_ready`` checks liveness only, so a child that is alive but hung is left to the
env's own request timeout. The readiness probe connects directly (no HTTP proxy).
``PR_SET_PDEATHSIG`` reaches only the direct child, so a launcher script should ``exec`` its
server rather than fork it (its other group members are still stopped by every other path).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import http.client
import logging
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from pydantic import ConfigDict, Field, field_validator, model_validator

from ragen_core.errors import RagenError
from ragen_core.specs import CheckedModel, PluginConfig

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
"""Children listen on loopback only: they serve this process, not the network."""

_TAIL_LINES = 5
_LOG_HEADER = "--- ragen: starting "
_LOG_NAME = re.compile(r"^ragen-service-.*-p(\d+)-[^-]*\.log$")
STALE_LOG_S = 24 * 3600.0
"""A temporary log whose owner process is gone is removed by a later start once it is this old (a
killed run cannot remove its own; a failed start's log is kept this long for its error to point to)."""
_POLL_MAX_S = 0.25


def _remove_stale_logs(folder: str) -> None:
    """Remove temporary service logs in ``folder`` whose owner (the pid in the name) is gone and
    that are older than :data:`STALE_LOG_S`."""
    now = time.time()
    with os.scandir(folder) as entries:
        for entry in entries:
            match = _LOG_NAME.match(entry.name)
            if match is None or int(match.group(1)) == os.getpid():
                continue
            try:
                if now - entry.stat().st_mtime < STALE_LOG_S:
                    continue
                os.kill(int(match.group(1)), 0)  # its owner still runs (or the pid is reused): keep it
            except ProcessLookupError:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
            except OSError:  # gone meanwhile, or a process of another user (alive)
                continue


def _exit_text(code: int) -> str:
    """``exit status 3`` or, for a child a signal ended, ``killed by SIGKILL``."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


class ServiceError(RagenError):
    """A service could not be started, did not become ready, or died too often."""


class _DiedStarting(ServiceError):
    """The child exited on its own before it was ready (not killed by us for a 500 or a timeout)."""


class ServiceSpec(CheckedModel):
    """How an env package launches its server; written in code, not set by users."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    """Short name used in errors and log file names (``retriever``, ``sandbox``)."""
    command: tuple[str, ...] = Field(min_length=1)
    """argv of the child; ``{port}`` and ``{host}`` are replaced by the chosen port and host."""
    health_path: str | None = "/health"
    """Path answering 2xx once the server is ready; None: ready when a TCP connect succeeds."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables added to this process's environment for the child (``{port}``/``{host}`` too)."""
    cwd: str | None = None
    """Working directory of the child (default: this process's)."""

    @field_validator("health_path")
    @classmethod
    def _path_starts_with_slash(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"health_path must start with '/', got {value!r}")
        return value

    @model_validator(mode="after")
    def _port_is_passed(self) -> ServiceSpec:
        if not any("{port}" in s for s in (*self.command, *self.env.values())):
            raise ValueError("the child cannot learn its port: put '{port}' in command or in an env value")
        return self


class ServiceConfig(PluginConfig):
    """User-facing settings of one service; env packages embed it in their own config."""

    url: str | None = None
    """Connect to this running server (``http://host:port``) instead of starting a child."""
    port: int | None = Field(default=None, ge=1, le=65535)
    """Fixed loopback port for the child; None picks a free one (and retries on a race)."""
    ready_timeout_s: float = Field(default=120.0, gt=0)
    """How long a start (or the URL-mode check) may take before it counts as failed."""
    max_restarts: int = Field(default=3, ge=0)
    """Restarts allowed within ``restart_window_s``; one more death raises ServiceError."""
    restart_window_s: float = Field(default=600.0, gt=0)
    """Sliding window, in seconds, over which restarts are counted."""
    backoff_s: float = Field(default=0.5, ge=0)
    """Delay before the first restart in the window; doubles with each further restart."""
    backoff_max_s: float = Field(default=8.0, ge=0)
    """Cap of the restart delay."""
    stop_timeout_s: float = Field(default=5.0, gt=0)
    """Grace period between SIGTERM and SIGKILL when stopping the child."""
    port_attempts: int = Field(default=3, ge=1)
    """Ports tried when the child loses its freshly picked port to another process."""
    log_dir: str | None = None
    """Where the child's output log is kept; None: a temporary file, removed on a clean stop unless the
    child died and was restarted (the restart warning names the log)."""

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and (urlsplit(value).scheme not in ("http", "https") or not urlsplit(value).hostname):
            raise ValueError(f"url must look like http://host:port, got {value!r}")
        return value.rstrip("/") if value else value


def free_port(host: str = HOST) -> int:
    """A port that was free a moment ago (the OS picks it for a bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _port_busy(host: str, port: int) -> bool:
    # SO_REUSEADDR so a closed connection lingering in TIME_WAIT does not count as busy.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


_FAILED_STATUS = 500
"""What a started child's readiness path answers when it cannot get ready (a corpus that does not
load): the wait stops at once instead of running to ``ready_timeout_s``. 503 means "still loading"."""


class Probe(NamedTuple):
    """What one :func:`probe` found: ``why`` not reachable (None: it is), and the HTTP status of the
    health path when one answered (None without a health path or an answer)."""

    why: str | None
    status: int | None = None


def why_unreachable(url: str, health_path: str | None = None, timeout: float = 3.0, *, any_status: bool = False) -> str | None:
    """None when something answers at ``url``, else why not, in a few words for an error message
    (:func:`probe`'s ``why``)."""
    return probe(url, health_path, timeout, any_status=any_status).why


def probe(url: str, health_path: str | None = None, timeout: float = 3.0, *, any_status: bool = False) -> Probe:
    """Whether something answers at ``url``, and the health path's HTTP status.

    The one reachability rule of the project (services, env servers given by URL, a Lean server, a
    Ray cluster, the Hugging Face hub): without ``health_path`` a TCP connection to the URL's host
    and port is enough (``tcp://host:port`` works too); with it, ``GET`` of the URL's path plus
    ``health_path`` must answer 2xx, or, with ``any_status``, any HTTP status but a proxy's 502 or
    504 (a server is there; what it is, the caller learns otherwise).
    """
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname or HOST
    if health_path is None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
        except TimeoutError:
            return Probe(f"no answer within {timeout:.3g} s")
        except OSError as e:
            return Probe(f"TCP connect failed ({e.strerror or e})")
        return Probe(None)
    path = parts.path.rstrip("/") + health_path
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(host, port, timeout=timeout)
    try:
        conn.request("GET", path)
        status = conn.getresponse().status
    except TimeoutError:
        return Probe(f"no answer within {timeout:.3g} s")
    except (OSError, http.client.HTTPException) as e:
        return Probe(f"GET {path} failed ({getattr(e, 'strerror', None) or e!r})")
    finally:
        conn.close()
    if any_status:
        return Probe(f"HTTP {status} from a proxy in front of it" if status in (502, 504) else None, status)
    return Probe(None if 200 <= status < 300 else f"GET {path} answered HTTP {status}", status)


def check_url_answers(url: str | None, setting: str, timeout: float = 3.0) -> None:
    """An env's availability check for a server it is given by URL (instead of starting one): the
    URL must accept a TCP connection within ``timeout``. Said in one line naming ``setting`` before a
    run starts, where waiting for it (``ready_timeout_s`` per episode) would take minutes.

    Raises:
        ConfigError: nothing answers at ``url``.
    """
    if url is None:
        return
    why = why_unreachable(url, None, timeout)
    if why is not None:
        from ragen_core.errors import ConfigError

        raise ConfigError(f"{setting}: nothing answers at {url} ({why})",
                          [f"start the server there, fix {setting}, or unset it to let RAGEN start the server itself"])


# The child runs this shim before exec'ing the real command: the kernel then kills it when its
# parent dies, even by SIGKILL. A shim rather than ``preexec_fn`` because preexec_fn is unsafe
# with threads and stops CPython from using vfork (slow for a trainer with a large address space).
_DEATHSIG_SHIM = """\
import ctypes, os, signal, sys
ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[1]):
    sys.exit(1)  # the parent died before prctl took effect
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as e:
    sys.stderr.write(f"cannot run {sys.argv[2]!r}: {e.strerror}\\n")
    sys.exit(127)
"""

#: Wrap children in the shim above. Linux only; tests turn it off to check atexit and SIGTERM alone.
_DIE_WITH_PARENT = sys.platform.startswith("linux")

_registry_lock = threading.Lock()
_services: dict[str, _Service] = {}
_urls_asked: set[tuple[str, str | None]] = set()
"""URL-mode servers (URL, health path) this process has waited for once already."""
#: Seconds a URL-mode server asked for again may take to accept a connection (it answered before).
_URL_RECHECK_S = 3.0
_hooks_installed = False
_shutting_down = False
_spawner: ThreadPoolExecutor | None = None


def spawn_child(argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(argv, **kwargs)`` for a child that must die with this process.

    For envs whose child is not an HTTP service (a REPL on stdin/stdout) and so does not fit
    :func:`acquire`: pass ``start_new_session=True`` to stop it with :func:`stop_process_group`.
    """
    # PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, and the rollout
    # runner steps envs in short-lived thread pools. So children are forked from the main
    # thread or from one long-lived spawner thread, never from a worker that will soon exit.
    global _spawner
    if _DIE_WITH_PARENT and sys.executable:
        argv = [sys.executable, "-I", "-S", "-c", _DEATHSIG_SHIM, str(os.getpid()), *argv]

    def spawn() -> subprocess.Popen[bytes]:
        return subprocess.Popen(argv, **kwargs)

    if threading.current_thread() is threading.main_thread():
        return spawn()
    with _registry_lock:
        if _spawner is None:
            _spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragen-service-spawner")
    return _spawner.submit(spawn).result()


def die_with_parent(parent: int, every_s: float = 0.5) -> threading.Thread:
    """Exit this process (status 0) once ``parent`` is gone, whatever it is doing then: a worker
    whose trainer was killed with SIGKILL kept stepping its env, under init, for as long as the
    step took. Checked every ``every_s`` seconds from a daemon thread.

    Not ``prctl(PR_SET_PDEATHSIG)``: Linux sends that signal when the *thread* that started the
    worker ends, and env pools start workers from short-lived threads."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        os._exit(0)

    thread = threading.Thread(target=watch, name="die-with-parent", daemon=True)
    thread.start()
    return thread


_ORPHAN_SWEEPER = r"""
import os, signal, sys, time
root, root_start, every = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
me = os.getpid()
for sig in (signal.SIGINT, signal.SIGHUP):  # (in a session of its own: a terminal's signals are not for it anyway)
    signal.signal(sig, signal.SIG_IGN)
signal.signal(signal.SIGUSR1, lambda *_: os._exit(0))  # disarmed: the root shut its children down itself

def table():
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                out[int(name)] = (int(fields[1]), fields[19], fields[0])  # parent, start time, state
            except (OSError, IndexError, ValueError):
                pass
    return out

seen = {}  # pid -> start time of the root's descendants still alive at the last sample
while True:
    procs = table()
    if procs.get(root, (0, None, ""))[1] != root_start or procs[root][2] in "ZX":  # gone, reaped, or a reused id
        break
    children = {}
    for pid, (ppid, start, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    below, todo = {}, [root]
    while todo:
        for pid in children.get(todo.pop(), ()):
            if pid != me and pid not in below:
                below[pid] = procs[pid][1]
                todo.append(pid)
    # the descendants now, plus those seen before that still run (orphaned meanwhile: under init now)
    seen = {pid: start for pid, start in seen.items() if procs.get(pid, (0, None, ""))[1] == start}
    seen.update(below)
    time.sleep(every)
procs = table()
for pid, start in seen.items():
    if procs.get(pid, (0, None, ""))[1] == start:  # the same process, not a reused id
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
"""


def _start_time(pid: int) -> str:
    """The start time (clock ticks since boot) of process ``pid``, from /proc."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        return fh.read().rsplit(")", 1)[1].split()[19]


class OrphanSweeper:
    """A small watcher process (:func:`sweep_orphans_of`); :meth:`stop` disarms it."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    def stop(self) -> None:
        """Disarm and end the watcher: the root shut its children down itself. Idempotent."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGUSR1)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def sweep_orphans_of(root: int, every_s: float = 1.0) -> OrphanSweeper | None:
    """Start a small watcher that, once process ``root`` is gone without disarming it
    (:meth:`OrphanSweeper.stop`), SIGKILLs every process it saw descend from ``root`` that is still
    alive (Linux; None elsewhere).

    For children started by a library that does not make them die with their parent: a local Ray
    left its dashboard and runtime-env agents running after the trainer was killed with SIGKILL.
    The watcher runs in a session of its own, so a signal to the trainer's process group (a closed
    terminal's SIGHUP, a scheduler's SIGTERM before its SIGKILL) does not end it with the trainer.
    It samples the tree every ``every_s`` seconds, so a process that lived for less than that
    between samples can escape it; a process that ends is forgotten at the next sample.
    """
    if not sys.platform.startswith("linux") or not os.path.isdir("/proc"):
        return None
    proc = subprocess.Popen([sys.executable, "-c", _ORPHAN_SWEEPER, str(root), _start_time(root), str(every_s)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True,
                            start_new_session=True)
    return OrphanSweeper(proc)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone (or its id belongs to another user now)


def stop_process_group(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM the running child's process group, wait up to ``timeout``, then SIGKILL the rest.

    SIGKILL also reaches helpers the child started in its group and left behind.
    """
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc.pid, signal.SIGKILL)
    try:
        proc.wait(5)  # SIGKILL cannot be refused; the bound only guards against a stuck wait
    except subprocess.TimeoutExpired:
        pass


class _Service:
    """One running (or connected) service and the handles that share it."""

    def __init__(self, key: str, spec: ServiceSpec, config: ServiceConfig) -> None:
        self.key, self.spec, self.config = key, spec, config
        self.lock = threading.Lock()
        self.refcount = 0
        self.owner_pid = os.getpid()
        self.proc: subprocess.Popen[bytes] | None = None
        self.port: int | None = None
        self.url: str | None = config.url
        self.argv: list[str] = list(spec.command)
        self.log_path: str | None = None
        self.restarts: collections.deque[float] = collections.deque()
        self.restarted = False  # restarted at least once: its log, named in the warning, is kept
        self.group_done = False  # the current child's process group was killed
        self.started = False  # the first start (or URL check) succeeded
        self.stopped = False  # stopped for good: by the last release or by stop_all

    def poll(self) -> int | None:
        """Exit status of the child, or None while it runs (and in URL mode).

        The first time its death is seen, whatever it left in its process group is killed. Right
        then, not later: once the group is empty its id may be reused by an unrelated process.
        """
        proc = self.proc
        if proc is None:
            return None
        code = proc.poll()
        if code is not None and not self.group_done:
            self.group_done = True
            _signal_group(proc.pid, signal.SIGKILL)
        return code

    def kill(self, timeout: float) -> None:
        """Stop the child now (SIGTERM, ``timeout``, SIGKILL) unless it is dead already."""
        if self.proc is not None and self.poll() is None:
            stop_process_group(self.proc, timeout)
            self.group_done = True

    def output_tail(self) -> str:
        """The last few non-empty lines the latest child wrote, joined into one line."""
        if not self.log_path or not os.path.exists(self.log_path):
            return "(none)"
        with open(self.log_path, "rb") as f:
            f.seek(max(0, os.path.getsize(self.log_path) - 8192))
            lines = [ln.strip()[:200] for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
        starts = [i for i, ln in enumerate(lines) if ln.startswith(_LOG_HEADER)]
        lines = lines[starts[-1] + 1 :] if starts else lines  # earlier runs' output is in the log
        return " | ".join(lines[-_TAIL_LINES:]) or "(none)"

    def error(self, reason: str, hints: tuple[str, ...] = (), kind: type[ServiceError] = ServiceError) -> ServiceError:
        # a long argument (a child's JSON settings) is cut: the error stays one readable line; the log holds it whole
        where = f"service {self.spec.name!r} ({shlex.join(a if len(a) <= 80 else a[:60] + '...' for a in self.argv)})"
        return kind(f"{where} {reason}; last output: {self.output_tail()} (log: {self.log_path})", hints)

    def start(self) -> None:
        """Start the child and wait until it is ready; retry on a lost port race. Lock held."""
        if self.config.url is not None:
            self._wait_for_url()
            return
        cfg = self.config
        if cfg.port is not None and _port_busy(HOST, cfg.port):
            raise ServiceError(
                f"service {self.spec.name!r}: port {cfg.port} on {HOST} is already in use (config port={cfg.port})",
                ["stop whatever listens there, or leave `port` unset so a free port is picked"],
            )
        if self.log_path is None:
            folder = cfg.log_dir or tempfile.gettempdir()
            try:
                os.makedirs(folder, exist_ok=True)
                if cfg.log_dir is None:
                    _remove_stale_logs(folder)
                safe_name = re.sub(r"[^A-Za-z0-9_.-]", "_", self.spec.name)
                fd, self.log_path = tempfile.mkstemp(prefix=f"ragen-service-{safe_name}-p{os.getpid()}-", suffix=".log", dir=folder)
                os.close(fd)
            except OSError as e:  # a log_dir under a file, or a folder it may not write in
                what = f"log_dir {cfg.log_dir}" if cfg.log_dir is not None else f"the temporary folder {folder}"
                raise ServiceError(f"service {self.spec.name!r}: cannot write its log in {what} ({e.strerror or e})",
                                   ["set log_dir (env_config.server.log_dir for an env's server) to a writable folder"]) from None
        port = cfg.port or (self.port if self.port and not _port_busy(HOST, self.port) else free_port())
        for attempt in range(1, cfg.port_attempts + 1):
            lost_port = self._start_once(port)
            if not lost_port:
                return
            if cfg.port is not None or attempt == cfg.port_attempts:
                raise self.error(f"could not bind port {port}: another process took it ({attempt} port(s) tried)")
            port = free_port()

    def _start_once(self, port: int) -> bool:
        """One start on ``port``. True when the child died because the port was taken."""
        if _shutting_down:
            raise ServiceError(f"service {self.spec.name!r} not started: the interpreter is shutting down")
        spec = self.spec

        def fill(s: str) -> str:
            return s.replace("{port}", str(port)).replace("{host}", HOST)

        self.argv = [fill(a) for a in spec.command]
        env = {**os.environ, **{k: fill(v) for k, v in spec.env.items()}}
        assert self.log_path is not None
        with open(self.log_path, "ab") as log:
            log.write(f"{_LOG_HEADER}{shlex.join(self.argv)}\n".encode())
            log.flush()
            try:
                self.proc = spawn_child(self.argv, cwd=spec.cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
                self.group_done = False
            except OSError as e:  # only without the shim: command missing, bad cwd
                raise self.error(f"could not be started: {e.strerror or e}") from None
        self.port, self.url = port, f"http://{HOST}:{port}"
        deadline = time.monotonic() + self.config.ready_timeout_s
        delay = 0.02
        while True:
            why, status = probe(self.url, spec.health_path, timeout=max(0.1, min(2.0, deadline - time.monotonic())))
            code = self.poll()  # after the probe: a dying child must not pass for ready
            if code is not None:
                busy = _port_busy(HOST, port)
                if code != 0 and (busy or "address already in use" in self.output_tail().lower()):
                    return True  # it lost the port to another process: try another port
                if code == 0 and busy:  # not a lost race (that exits non-zero): its own daemon serves there
                    raise self.error(f"exited with status 0 before it was ready, and a process it left listens on port {port}: "
                                     "a command that puts itself in the background cannot be watched, restarted or stopped",
                                     ("run the server in the foreground (no daemon or fork option), and stop the one it left",))
                ended = f"exited with status {code}" if code >= 0 else f"was {_exit_text(code)}"  # not 'status -9'
                raise self.error(f"{ended} before it was ready", kind=_DiedStarting)
            if why is None:
                return False
            if status == _FAILED_STATUS:  # it says it failed (503 is "still loading"): no use waiting
                self.kill(self.config.stop_timeout_s)
                said = self.output_tail() != "(none)"  # a silent server's hint may not point at its output
                raise self.error(f"failed while starting (last probe: {why}); the child was killed",
                                 ("its last output says why; fix that and start again" if said else
                                  f"it wrote nothing: run its command by hand to see why {spec.health_path} answers {status}",))
            if time.monotonic() >= deadline:
                self.kill(self.config.stop_timeout_s)
                raise self.error(
                    f"was not ready after {self.config.ready_timeout_s:g} s (last probe: {why}); the child was killed",
                    ("if it is just slow to load, raise ready_timeout_s",),
                )
            time.sleep(delay)
            delay = min(delay * 2, _POLL_MAX_S)

    def _wait_for_url(self) -> None:
        """Wait up to ``ready_timeout_s`` for the server at the URL (it may still be loading) the
        first time this process asks; any later time (an env rebuilt after a failure, a pickled
        env's first search), one probe: a server that went away mid-run fails each episode at
        once instead of after ``ready_timeout_s`` each."""
        assert self.url is not None
        key = (self.url, self.spec.health_path)
        with _registry_lock:
            asked_before = key in _urls_asked
            _urls_asked.add(key)
        if asked_before:
            why = why_unreachable(self.url, self.spec.health_path, timeout=_URL_RECHECK_S)
            if why is not None:
                raise ServiceError(f"service {self.spec.name!r} at {self.url} no longer answers ({why}); it was asked for "
                                   "before in this process, so it is not waited for again",
                                   ["restart the server at `url` (then resume the run), or unset `url` to let RAGEN start it"])
            return
        deadline = time.monotonic() + self.config.ready_timeout_s
        while (found := probe(self.url, self.spec.health_path, timeout=max(0.1, min(2.0, deadline - time.monotonic())))).why:
            why, status = found
            if status is not None and 400 <= status < 500 and status not in (408, 425, 429):  # a server that is there and says no
                raise ServiceError(f"service {self.spec.name!r} at {self.url}: something answers, but {why}: it is not a "
                                   f"{self.spec.name} server", ["point `url` at the right server, or unset it to let RAGEN start one"])
            if time.monotonic() >= deadline:
                raise ServiceError(
                    f"service {self.spec.name!r} at {self.url} was not ready after {self.config.ready_timeout_s:g} s ({why})",
                    ["check that the server runs and `url` is right, or unset `url` to let RAGEN start it"],
                )
            time.sleep(_POLL_MAX_S)

    def ensure_ready(self) -> str:
        """The URL, after restarting the child (with back-off, within limits) if it died."""
        with self.lock:
            if self.owner_pid != os.getpid():
                raise ServiceError(f"service {self.spec.name!r} belongs to process {self.owner_pid}; acquire it again here")
            if self.stopped:
                raise ServiceError(f"service {self.spec.name!r} was stopped (stop_all or interpreter exit); acquire it again")
            if self.proc is None:  # URL mode: checked once, at acquire
                assert self.url is not None
                return self.url
            cfg = self.config
            while (code := self.poll()) is not None:
                now = time.monotonic()
                while self.restarts and now - self.restarts[0] > cfg.restart_window_s:
                    self.restarts.popleft()
                if len(self.restarts) >= cfg.max_restarts:
                    raise self.error(
                        f"died ({_exit_text(code)}) after {len(self.restarts)} restart(s) within "
                        f"{cfg.restart_window_s:g} s (max_restarts={cfg.max_restarts}); giving up",
                        ("see the log for why it dies; raise max_restarts if the deaths are expected",),
                    )
                delay = min(cfg.backoff_s * 2 ** len(self.restarts), cfg.backoff_max_s)
                assert self.proc is not None
                log.warning("service %r (pid %d) died (%s); restarting it in %.3g s (restart %d of max_restarts=%d within %g s); "
                            "last output: %s (log: %s)", self.spec.name, self.proc.pid, _exit_text(code), delay, len(self.restarts) + 1,
                            cfg.max_restarts, cfg.restart_window_s, self.output_tail(), self.log_path)
                time.sleep(delay)
                self.restarts.append(time.monotonic())
                self.restarted = True
                try:
                    self.start()
                except _DiedStarting:
                    continue  # a restart that dies before it is ready is one more death, counted like the others
            assert self.url is not None
            return self.url

    def stop(self, keep_log: bool) -> None:
        """Stop the child for good. Takes no lock: the SIGTERM handler and atexit call it too."""
        if self.stopped or self.owner_pid != os.getpid():
            return
        self.stopped = True
        self.kill(self.config.stop_timeout_s)
        if not keep_log and not self.restarted and self.config.log_dir is None and self.log_path:
            try:
                os.unlink(self.log_path)
            except OSError:
                pass


class ServiceHandle:
    """One user's share of a service. Release it exactly once (or use it as a context manager)."""

    def __init__(self, service: _Service) -> None:
        self._service = service
        self._released = False

    @property
    def name(self) -> str:
        return self._service.spec.name

    @property
    def url(self) -> str:
        """Base URL as of the last start; prefer :meth:`ensure_ready`, which also restarts."""
        assert self._service.url is not None
        return self._service.url

    @property
    def port(self) -> int | None:
        if self._service.proc is None:
            return urlsplit(self.url).port
        return self._service.port

    @property
    def pid(self) -> int | None:
        """Process id of the child; None in URL mode."""
        proc = self._service.proc
        return proc.pid if proc is not None else None

    @property
    def alive(self) -> bool:
        """Liveness only (the process exists); readiness was checked when it started."""
        return self._service.poll() is None

    def died_since(self, pid: int | None, grace_s: float = 1.0) -> bool:
        """Whether the child ``pid`` (:attr:`pid` when a request went out) is gone or already
        replaced: a request that failed because of that is worth one more try after
        :meth:`ensure_ready` restarts it. A refused or reset connection comes a few milliseconds
        before a killed child's exit status can be read, so a child that still looks alive is
        watched for ``grace_s``. Always False in URL mode (``pid`` None): nothing restarts there."""
        if pid is None:
            return False
        deadline = time.monotonic() + grace_s
        while True:
            if self.pid != pid or not self.alive:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    @property
    def log_path(self) -> str | None:
        """File holding the child's stdout and stderr; None in URL mode."""
        return self._service.log_path

    @property
    def refcount(self) -> int:
        """Handles currently sharing this service in this process."""
        return self._service.refcount

    def ensure_ready(self) -> str:
        """Return the URL, restarting the child first if it died.

        Raises:
            ServiceError: the handle was released, the restart failed, or the child died more
                than ``max_restarts`` times within ``restart_window_s``.
        """
        if self._released:
            raise ServiceError(f"service {self.name!r}: this handle was released; acquire a new one")
        return self._service.ensure_ready()

    def release(self) -> None:
        """Drop this share; the last release stops the child. A second call does nothing."""
        self._drop(keep_log=False)

    def _drop(self, keep_log: bool) -> None:
        if self._released:
            return
        self._released = True
        svc = self._service
        with _registry_lock:
            svc.refcount -= 1
            last = svc.refcount == 0
            if last and _services.get(svc.key) is svc:
                del _services[svc.key]
        if last:
            with svc.lock:
                svc.stop(keep_log)

    def __enter__(self) -> ServiceHandle:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"ServiceHandle({self.name!r}, url={self._service.url!r}, pid={self.pid}, released={self._released})"


def acquire(spec: ServiceSpec, config: ServiceConfig | None = None) -> ServiceHandle:
    """Return a handle on the service ``spec`` describes, starting it if this process has none.

    Acquires with an equal spec and an equal config share one child (or one URL); the call
    that starts it blocks until the child is ready, and concurrent callers wait for that start.

    Raises:
        ServiceError: the child could not be started or did not become ready (or, in URL mode,
            the server at ``config.url`` did not answer in time).
    """
    config = config if config is not None else ServiceConfig()
    key = spec.model_dump_json() + config.model_dump_json()
    _install_exit_hooks()
    with _registry_lock:
        svc = _services.get(key)
        if svc is None:
            svc = _services[key] = _Service(key, spec, config)
        svc.refcount += 1
    handle = ServiceHandle(svc)
    try:
        with svc.lock:
            if not svc.started:  # first user, or the first start failed for an earlier caller
                svc.start()
                svc.started = True
    except BaseException:
        handle._drop(keep_log=True)  # the error message names the log; Ctrl-C mid-start kills the child
        raise
    return handle


def stop_all() -> None:
    """Stop every child this process started, whoever holds handles on them.

    Called at interpreter exit and when SIGTERM would kill the process. Handles on stopped
    services can still be released; ``ensure_ready`` on them raises ServiceError. Takes no
    lock, so that a signal arriving while the main thread holds one cannot deadlock it.
    """
    services = list(_services.values())
    _services.clear()
    for svc in services:
        svc.stop(keep_log=False)


def _at_exit() -> None:
    global _shutting_down
    _shutting_down = True  # a thread still running must not start a child we would then leak
    stop_all()


def _install_exit_hooks() -> None:
    global _hooks_installed
    if not _hooks_installed:
        _hooks_installed = True
        atexit.register(_at_exit)
        os.register_at_fork(after_in_child=_forget_after_fork)
    # Only when SIGTERM would kill the process outright (no atexit) do we stop children first.
    # A handler someone else installed owns SIGTERM: it is left alone, and atexit (or, on
    # Linux, the parent-death signal) covers its exit. Handlers can only be set from the main
    # thread; an acquire from another thread leaves it to a later one there.
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum: int, frame: Any) -> None:
    _at_exit()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)  # die by the signal, as the process would have without us


def _forget_after_fork() -> None:
    # A forked child owns none of its parent's services (it must neither stop nor reuse them),
    # and the parent's spawner thread does not exist in it.
    global _registry_lock, _spawner
    _registry_lock = threading.Lock()
    _spawner = None
    _services.clear()
