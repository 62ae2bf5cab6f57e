"""Exact equivalence with sympy, in a worker process that can be killed on a deadline.

The checker's parser (``checker._Parser``) evaluates an answer numerically *and* records it as a
small expression tree of whitelisted nodes (nested tuples, never text). When the numbers say
"equal", this module asks sympy whether the two trees are the same expression exactly:

* ``x(x-a)(x-b)(x-c) + x`` equals ``x`` at the three sample points ``a, b, c`` of ``x``, and
  ``1 + 10^{-12}`` equals ``1`` within the numeric tolerance; sympy tells both apart.
* ``\\sqrt{8}`` and ``2\\sqrt{2}``, ``(x+1)^2`` and ``x^2+2x+1``: sympy confirms them.

Decision, in order: the trees build to the same sympy object, or ``simplify(a - b)`` is 0:
equal. ``(a - b).equals(0)`` is False: not equal (sympy found a point where they differ, or
proved it). Otherwise (undecided, timed out, worker unavailable) the numeric verdict stands.
Symbols are real, as the numeric points are.

Why a process: sympy builds trees eagerly (it may factor integers under ``\\sqrt`` and expand
powers) and ``simplify`` has no time bound. A thread cannot be stopped; a process can. The worker
is started once per process on first use (importing sympy takes about a second, outside the
check's time limit), answers one question per JSON line, and is killed and restarted when a
question outlives ``time_limit_s`` (the replacement starts at once, so its import overlaps the
caller's next steps; the pair is remembered as undecided, so a group repeating it does not pay
again). The trees come from our parser only: the worker never parses or ``eval``-s text. It caps
its own address space (1 GiB) and exits when the process that started it is gone.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from typing import Any

#: One tree node: ("n", p, q) a rational, ("pi",), ("s", name), (op, child...) for
#: "+", "-", "*", "/", "^", "neg", "abs", ("root", n, child), ("f", name, child), ("logb", value, base).
Tree = tuple[Any, ...]

#: Seconds to wait for a (re)started worker to import sympy; not charged to any one check.
STARTUP_TIMEOUT_S = 60.0
#: Address-space cap of the worker, bytes.
WORKER_MEMORY_BYTES = 1 << 30
#: Verdicts remembered per process (a group's episodes share labels and often answers), including
#: "undecided in time": a hostile pair repeated by a group costs one time limit, not one each.
CACHE_SIZE = 4096
#: Seconds between the worker's checks that the process that started it is still there.
PARENT_CHECK_S = 0.5


def is_plain_number(tree: Tree) -> bool:
    """A rational literal, possibly negated: nothing for sympy to add."""
    while tree[0] == "neg":
        tree = tree[1]
    return bool(tree[0] == "n")


class SympyWorker:
    """The client side: one worker process, one question at a time (a lock serialises threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._ready = False
        self._pid = os.getpid()
        self._cache: dict[tuple[Tree, Tree], bool | None] = {}
        self.unavailable: str | None = None
        self.timeouts = 0

    def equal(self, a: Tree, b: Tree, time_limit_s: float) -> bool | None:
        """sympy's verdict on ``a == b``: True, False, or None (undecided, timed out, no worker)."""
        key = (a, b)
        if key in self._cache:
            return self._cache[key]
        with self._lock:
            if self.unavailable is not None:
                return None
            if self._pid != os.getpid():  # a forked child must not share its parent's pipes
                self._proc, self._ready, self._pid = None, False, os.getpid()
            proc = self._ensure()
            if proc is None:
                return None
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(json.dumps([a, b]).encode() + b"\n")
                proc.stdin.flush()
                line = _read_line(proc, time_limit_s)
            except OSError:
                line = None
            if line is None:  # out of time, or the worker died (memory cap)
                self.timeouts += 1
                self._stop()
                self._spawn()  # the replacement imports sympy while the caller goes on
                verdict = None
            else:
                verdict = json.loads(line)
            if len(self._cache) >= CACHE_SIZE:
                self._cache.clear()
            self._cache[key] = None if verdict is None else bool(verdict)
        return self._cache[key]

    def _ensure(self) -> subprocess.Popen[bytes] | None:
        """The running worker; starts one (or waits for the replacement already starting)."""
        if self._proc is None or self._proc.poll() is not None:
            self._spawn()
        proc = self._proc
        if proc is None:
            return None
        if not self._ready:
            if _read_line(proc, STARTUP_TIMEOUT_S) != b"ready\n":
                self._stop()
                self.unavailable = "the sympy worker did not start (is sympy installed?)"
                return None
            self._ready = True
        return proc

    def _spawn(self) -> None:
        self._ready = False
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "ragen_env_metamathqa.symbolic", str(os.getpid())],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            self._proc = None
            self.unavailable = f"cannot start the sympy worker: {exc}"

    def _stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None
        self._ready = False

    def close(self) -> None:
        with self._lock:
            self._stop()


def _read_line(proc: subprocess.Popen[bytes], timeout_s: float) -> bytes | None:
    """One line from the worker, or None when it does not come within ``timeout_s``."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout_s
    chunks = b""
    while not chunks.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return None
        chunks += chunk
    return chunks


_worker: SympyWorker | None = None
_worker_lock = threading.Lock()


def worker() -> SympyWorker:
    """This process's worker (created on first use; its process starts on the first question)."""
    global _worker
    with _worker_lock:
        if _worker is None:
            _worker = SympyWorker()
        return _worker


# ------------------------------------------------------------------ the worker process
def _build(tree: Any, sp: Any, symbols: dict[str, Any]) -> Any:
    op = tree[0]
    if op == "n":
        return sp.Rational(int(tree[1]), int(tree[2]))
    if op == "pi":
        return sp.pi
    if op == "s":
        if tree[1] not in symbols:
            symbols[tree[1]] = sp.Symbol(tree[1], real=True)
        return symbols[tree[1]]
    if op == "root":
        inner = _build(tree[2], sp, symbols)
        return sp.real_root(inner, tree[1]) if tree[1] % 2 else sp.root(inner, tree[1])
    if op == "f":
        return getattr(sp, {"ln": "log"}.get(tree[1], tree[1]))(_build(tree[2], sp, symbols))
    args = [_build(t, sp, symbols) for t in tree[1:]]
    if op == "+":
        return args[0] + args[1]
    if op == "-":
        return args[0] - args[1]
    if op == "*":
        return args[0] * args[1]
    if op == "/":
        return args[0] / args[1]
    if op == "^":
        return args[0] ** args[1]
    if op == "neg":
        return -args[0]
    if op == "abs":
        return sp.Abs(args[0])
    if op == "logb":
        return args[0] / sp.log(args[1])
    raise ValueError(f"unknown node {op!r}")


def _decide(a: Any, b: Any, sp: Any) -> bool | None:
    symbols: dict[str, Any] = {}
    left, right = _build(a, sp, symbols), _build(b, sp, symbols)
    if left == right:
        return True
    diff = left - right
    if diff == 0 or sp.simplify(diff) == 0:
        return True
    verdict = diff.equals(0)
    return None if verdict is None else bool(verdict)


def _die_with(parent: int, every_s: float = PARENT_CHECK_S) -> threading.Thread:
    """Exit this process once ``parent`` is gone, also in the middle of a long sympy call (stdin's
    end covers a parent that exits while the worker waits for a question)."""
    from ragen_core.services import die_with_parent

    return die_with_parent(parent, every_s)


def _serve() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    _die_with(int(sys.argv[1]) if len(sys.argv) > 1 else os.getppid())  # the pid it was started by (it may be gone already)
    import sympy

    out = sys.stdout.buffer
    out.write(b"ready\n")
    out.flush()
    for line in sys.stdin.buffer:
        try:
            a, b = json.loads(line)
            verdict = _decide(a, b, sympy)
        except Exception:  # noqa: BLE001 - any failure of sympy on one question is "undecided"
            verdict = None
        out.write(json.dumps(verdict).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    _serve()
