"""Local backend: a Lean 4 REPL child process speaking the community REPL's JSON protocol.

Protocol (public REPL README): one JSON command per request, requests and replies separated by a
blank line. ``{"cmd": text}`` elaborates ``text`` in a fresh environment (only then may it hold
``import`` lines) and answers ``{"env": n, "messages": [...], "sorries": [...]}``;
``{"cmd": text, "env": n}`` elaborates ``text`` on top of environment ``n``. A request the REPL
cannot serve is answered with ``{"message": "..."}``.

How this backend uses it: the import header of a theorem is sent once per process and its
environment id is kept, so Mathlib is loaded once; each check sends the body (preamble,
statement, tactics) with that ``env``. Message lines are shifted by the header's lines, so they
point into the full proof text.

Process management (kept small on purpose; the REPL is a stdin/stdout child, not an HTTP server,
so :mod:`ragen_core.services` (ports, health URLs) does not apply, but its spawner and its
process-group kill are reused so the child dies with the trainer):

* started lazily on the first check, in its own session, with stderr to a temporary file;
* a reply not complete within ``request_timeout`` (``repl_start_timeout`` while a header is
  being elaborated for the first time) kills the process group: the check is a ``timeout``;
  the next check starts a new process;
* end of output (the child died) or a reply that is not JSON kills it too; the check is retried
  once on a fresh process (the body is self-contained, so nothing is lost), then reported as a
  ``server_error``;
* a JSON reply that is not a REPL response (``cat`` echoing the request, ``{}``) kills it and is
  a ``server_error`` flagged ``not_lean`` at once (no retry: the command is not a Lean REPL);
  :meth:`ReplChecker.probe` sends one tiny check first so the env can refuse at reset;
* after each check the resident memory of the child's process group is read from ``/proc``
  (Linux); above ``repl_memory_mb`` the process is restarted before the next check.

Several envs of one process share the REPL processes of one configuration
(:func:`shared_repl`), ``repl_workers`` of them, each serving one check at a time.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ragen_core.services import spawn_child, stop_process_group
from ragen_env_lean.checker import PROBE_CODE, CheckResult, NotLeanReply, parse_response, transport_failure


class ReplProcess:
    """One REPL child and its cached header environments (not thread-safe: one check at a time)."""

    def __init__(self, command: list[str], cwd: str | None, *, timeout: float, start_timeout: float, memory_mb: int) -> None:
        self.command, self.cwd = list(command), cwd
        self.timeout, self.start_timeout, self.memory_mb = timeout, start_timeout, memory_mb
        self._proc: subprocess.Popen[bytes] | None = None
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._stderr: Any = None
        self._envs: dict[str, int] = {}
        self.starts = 0
        """Processes started so far (tests and logs read it)."""

    # ------------------------------------------------------------------ process
    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def _start(self) -> subprocess.Popen[bytes]:
        self._stderr = tempfile.TemporaryFile()
        proc = spawn_child(self.command, cwd=self.cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                      start_new_session=True)
        lines: queue.Queue[bytes | None] = queue.Queue()

        def pump() -> None:  # one reader thread per process: a blocking readline never blocks a check
            assert proc.stdout is not None
            for line in iter(proc.stdout.readline, b""):
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, name="lean-repl-reader", daemon=True).start()
        self._proc, self._lines, self._envs = proc, lines, {}
        self.starts += 1
        return proc

    def stop(self) -> None:
        """Kill the child's process group (idempotent)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_process_group(proc, timeout=2.0)
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        self._envs = {}

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - 500))
        text: str = self._stderr.read().decode("utf-8", "replace").strip()
        return text.splitlines()[-1] if text else ""

    def memory_mb_used(self) -> float:
        """Resident memory of the child's process group in MiB (0 where /proc is missing)."""
        if self._proc is None:
            return 0.0
        total = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[2]) == self._proc.pid:  # process group (the child leads its own session)
                total += int(fields[21])  # resident pages
        return total * os.sysconf("SC_PAGE_SIZE") / 2**20

    # ------------------------------------------------------------------ protocol
    def request(self, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send one command and return the parsed reply.

        Raises:
            TimeoutError: no complete reply in time (the process is killed).
            ConnectionError: the process ended (its last stderr line in the message).
            ValueError: the reply is not a JSON object (the process is killed).
        """
        try:
            proc = self._proc if self._proc is not None and self._proc.poll() is None else self._start()
        except OSError as exc:  # the program is missing or not executable (without the Linux shim)
            raise ConnectionError(f"Lean REPL could not start {self.command[0]!r}: {exc.strerror or exc}") from None
        assert proc.stdin is not None
        try:
            proc.stdin.write(json.dumps(payload, ensure_ascii=False).encode("utf-8") + b"\n\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            try:  # it died before reading (a wrapper that cannot run the REPL exits 127): its exit code, as when it dies later
                how = f"code {proc.wait(timeout=2)}"
            except subprocess.TimeoutExpired:
                how = type(exc).__name__
            why = self._stderr_tail()
            self.stop()
            raise ConnectionError(f"Lean REPL exited ({how}){': ' + why if why else ''}") from None
        deadline = time.monotonic() + timeout
        chunks: list[bytes] = []
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.stop()
                raise TimeoutError(f"Lean REPL timed out after {timeout:g} s") from None
            if line is None:
                why = self._stderr_tail()
                self.stop()
                raise ConnectionError(f"Lean REPL exited (code {proc.wait()}){': ' + why if why else ''}")
            if line.strip():
                chunks.append(line)
                if line.rstrip().endswith(b"}") and _is_json(b"".join(chunks)):  # whole: no wait for the blank line after it
                    break  # (one that never comes, from a program that is no REPL, ran into the timeout)
            elif chunks:
                break
        text = b"".join(chunks).decode("utf-8", "replace")
        try:
            reply = json.loads(text)
        except json.JSONDecodeError:
            self.stop()
            raise ValueError(f"Lean REPL sent malformed JSON: {text[:120]!r}") from None
        if not isinstance(reply, dict):
            self.stop()
            raise ValueError(f"Lean REPL sent {type(reply).__name__}, not a JSON object")
        return reply

    def header_env(self, header: str) -> tuple[int | None, dict[str, Any] | None]:
        """The environment id of ``header`` (elaborated on first use), or ``(None, reply)`` when the
        REPL refused or the header itself has errors."""
        if header in self._envs:
            return self._envs[header], None
        reply = self.request({"cmd": header}, self.start_timeout)
        parse_response(reply)  # NotLeanReply when the other end is no REPL (an echo, ``{}``)
        if "env" not in reply or any(m.get("severity") == "error" for m in reply.get("messages") or [] if isinstance(m, dict)):
            return None, reply
        self._envs[header] = int(reply["env"])
        return self._envs[header], None

    def check(self, header: str, body: str) -> CheckResult:
        """Check ``header + blank line + body``; retried once on a fresh process after a crash."""
        started = time.monotonic()
        for attempt in range(2):
            if self._proc is not None and self._proc.poll() is not None:
                self.stop()  # died since the last check: its environment ids are gone with it
            try:
                env, failed = self.header_env(header) if header.strip() else (None, None)
                if failed is not None:
                    return parse_response(failed, 0, time.monotonic() - started)
                payload: dict[str, Any] = {"cmd": body} if env is None else {"cmd": body, "env": env}
                offset = header.count("\n") + 2 if env is not None else 0
                reply = self.request(payload, self.timeout)
                result = parse_response(reply, offset, time.monotonic() - started)
                if self.memory_mb_used() > self.memory_mb:
                    self.stop()  # restarted on the next check; this result is complete
                return result
            except TimeoutError as exc:
                return transport_failure(str(exc), time.monotonic() - started)
            except NotLeanReply as exc:  # not a Lean REPL at all: a retry would get the same
                self.stop()
                return transport_failure(str(exc), time.monotonic() - started, not_lean=True)
            except (ConnectionError, ValueError) as exc:
                if attempt == 1:
                    return transport_failure(str(exc), time.monotonic() - started)
        raise AssertionError("unreachable")


def _is_json(data: bytes) -> bool:
    try:
        json.loads(data)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError both are
        return False
    return True


class ReplChecker:
    """``repl_workers`` REPL processes behind the :class:`~ragen_env_lean.checker.Checker` interface."""

    def __init__(self, command: list[str], cwd: str | None, *, timeout: float, start_timeout: float, memory_mb: int,
                 workers: int = 1) -> None:
        self.processes = [ReplProcess(command, cwd, timeout=timeout, start_timeout=start_timeout, memory_mb=memory_mb)
                          for _ in range(workers)]
        self._free: queue.Queue[ReplProcess] = queue.Queue()
        for proc in self.processes:
            self._free.put(proc)
        self._probe_lock = threading.Lock()
        self._probe: CheckResult | None = None

    def probe(self) -> CheckResult:
        """The result of one tiny check (:data:`~ragen_env_lean.checker.PROBE_CODE`, no imports),
        sent on the first call only: the env reads its ``not_lean`` flag at reset."""
        with self._probe_lock:
            if self._probe is None:
                self._probe = self.check("", PROBE_CODE)
            return self._probe

    def check(self, header: str, body: str) -> CheckResult:
        proc = self._free.get()
        try:
            return proc.check(header, body)
        finally:
            self._free.put(proc)

    def check_many(self, items: list[tuple[str, str]]) -> list[CheckResult]:
        return [self.check(h, b) for h, b in items]

    def close(self) -> None:
        for proc in self.processes:
            proc.stop()


_shared: dict[tuple[Any, ...], ReplChecker] = {}
_shared_lock = threading.Lock()


def shared_repl(config: Any) -> ReplChecker:
    """The process-wide REPL checker of ``config``'s REPL settings (started lazily, on first check)."""
    key = (tuple(config.repl_command), config.repl_cwd, config.request_timeout, config.repl_start_timeout,
           config.repl_memory_mb, config.repl_workers)
    with _shared_lock:
        if not _shared:
            atexit.register(close_shared)  # also killed with this process (parent-death signal, Linux)
        if key not in _shared:
            _shared[key] = ReplChecker(list(config.repl_command), config.repl_cwd, timeout=config.request_timeout,
                                       start_timeout=config.repl_start_timeout, memory_mb=config.repl_memory_mb,
                                       workers=config.repl_workers)
        return _shared[key]


def close_shared() -> None:
    """Stop every shared REPL process (tests; the processes also die with this one)."""
    with _shared_lock:
        for checker in _shared.values():
            checker.close()
        _shared.clear()
