"""Hangs: a run-level watchdog, and a line on stderr when the env pool gives up on episodes.

An env whose ``step`` never returns used to hang training forever with no output. Two layers
now stop that:

* the env pool's per-step timeout (``rollout.pool_config.step_timeout_s``, 600 s by default in
  run configs): an episode whose env does not answer in time ends with ``end_reason="timeout"``
  and the run goes on. :func:`report_pool_failures` says so on stderr for every step where it
  happened, and the ``train/env_timeouts`` / ``train/env_failures`` metrics count the episodes;
* :class:`Watchdog`, for everything else that can hang (a model call, an env with
  ``step_timeout_s: null``, a service): when no progress is made for ``watchdog_s`` seconds it
  writes the stacks of all threads (:mod:`faulthandler`) to stderr and to
  ``RUN_DIR/watchdog-stacks.txt``, prints one line saying what it last saw, and ends the process
  with exit code :data:`EXIT_STALLED`. Progress is a completed training step, checkpoint or
  validation, and every completed reset or turn of a rollout (the runners call :meth:`Watchdog.beat`).

The watchdog is a daemon thread: it can act while the main thread waits in a sleep, on a lock,
a pipe or a socket, or inside most C code (which releases the GIL). For code that hangs while
holding the GIL (a catastrophic regular expression, some C extensions) no Python thread can run,
so the thread keeps :func:`faulthandler.dump_traceback_later` armed as a backstop: a C-level timer
``BACKSTOP_S`` later than the watchdog's own deadline dumps the stacks to stderr and exits (code 1).

Exiting with :func:`os._exit` skips ``finally`` blocks on purpose: the main thread is stuck and
cannot run them. Before it exits, the watchdog calls its :attr:`Watchdog.rescue` (the trainer
checkpoints the last finished step from this thread when the weights are not part-way through an
update; a backstop timer bounds the save), so the steps finished since the last checkpoint are
not lost. Checkpoints are written atomically and ``--resume`` truncates ``metrics.jsonl`` to the
newest checkpoint; the closing hint says whether there is one to resume from.

:data:`RESCUE_S` bounds the rescue save.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from ragen_core.errors import shell_word

#: Exit code of a run the watchdog ended (2 is a user error, 130 an interrupt).
EXIT_STALLED = 3

#: Name of the stack dump in the run directory.
STACKS_FILE = "watchdog-stacks.txt"

#: Extra seconds the GIL-independent faulthandler backstop waits beyond the watchdog's deadline.
BACKSTOP_S = 30.0

#: Seconds the rescue save may take before the backstop ends the process anyway.
RESCUE_S = 300.0


class Watchdog:
    """Ends the process when :meth:`beat` is not called for ``timeout_s`` seconds (module docstring).

    Use as a context manager around the training loop; ``timeout_s=None`` makes it do nothing.

    Args:
        timeout_s: Longest time without progress (``watchdog_s``), or None.
        run_dir: Where the stack dump is written.
    """

    def __init__(self, timeout_s: float | None, run_dir: str | Path) -> None:
        self.timeout_s = timeout_s
        self.run_dir = Path(run_dir)
        self._last = time.monotonic()
        self._what = "the start of training"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rescue: Callable[[], Path | None] | None = None
        """Called from the watchdog's thread before it ends the process: saves what can be saved
        (the trainer's last finished step) and returns the checkpoint written, if any."""

    def beat(self, what: str) -> None:
        """Record progress (``what`` names it in the message if the run stalls later). Cheap; any thread."""
        self._last = time.monotonic()
        self._what = what

    def start(self) -> None:
        """Start watching (nothing happens when ``timeout_s`` is None)."""
        if self.timeout_s is None or self._thread is not None:
            return
        self._stop.clear()
        self.beat("the start of training")
        self._arm_backstop(self.timeout_s + BACKSTOP_S)
        self._thread = threading.Thread(target=self._watch, name="ragen-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            faulthandler.cancel_dump_traceback_later()

    def __enter__(self) -> Watchdog:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ the thread
    def _watch(self) -> None:
        assert self.timeout_s is not None
        interval = min(1.0, self.timeout_s / 4)
        while not self._stop.wait(interval):
            idle = time.monotonic() - self._last
            if idle >= self.timeout_s:
                self._fire(idle)
            # re-armed every interval, so it fires only once this thread can no longer run
            self._arm_backstop(self.timeout_s - idle + BACKSTOP_S)

    @staticmethod
    def _arm_backstop(seconds: float) -> None:
        try:
            faulthandler.dump_traceback_later(seconds, exit=True, file=_stderr_fd())
        except (ValueError, OSError, RuntimeError):
            pass  # no usable stderr descriptor: the Python thread still works

    def _fire(self, idle: float) -> None:
        faulthandler.cancel_dump_traceback_later()
        path = self.run_dir / STACKS_FILE
        # whole seconds, rounded down: the run made no progress for at least this long
        said = f"no progress for {int(idle)} s (watchdog_s={self.timeout_s:g}); last progress: {self._what}"
        header = f"ragen watchdog: {said}\n"
        err = sys.stderr
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            with path.open("w", encoding="utf-8") as fh:
                fh.write(header)
                fh.flush()
                faulthandler.dump_traceback(file=fh, all_threads=True)
            where = f"; the stacks of all threads are in {path}"
        except OSError as exc:
            where = f" (could not write {path}: {exc.strerror or exc})"
        _dump_to(err, header)
        print(f"TrainingError: {said}{where}", file=err)
        if self.rescue is not None:
            self._arm_backstop(RESCUE_S)  # the save may hang too: then the C-level timer still ends the process
            try:
                self.rescue()
            except Exception as exc:  # noqa: BLE001 - the stall is what to report
                print(f"(could not save the last finished step: {type(exc).__name__}: {exc})", file=err)
            faulthandler.cancel_dump_traceback_later()
        resumable = any((self.run_dir / "checkpoints").glob("step_*"))
        then = f"continue with 'ragen run --resume {shell_word(self.run_dir)}'" if resumable else \
            "no checkpoint was written yet (save_freq sets how often), so start the run again"
        print("hint: something hangs (see the stacks above): a slow env step can be ended by rollout.pool_config.step_timeout_s; "
              f"raise watchdog_s if steps legitimately take longer; {then}", file=err)
        err.flush()
        sys.stdout.flush()
        os._exit(EXIT_STALLED)


def _stderr_fd() -> TextIO | int:
    """A file descriptor faulthandler can write to: stderr, or the original one when stderr is captured."""
    try:
        sys.stderr.fileno()
        return sys.stderr
    except (AttributeError, ValueError, OSError):
        return sys.__stderr__.fileno() if sys.__stderr__ is not None else 2


def _dump_to(stream: Any, header: str) -> None:
    """The stacks of all threads on ``stream`` (faulthandler when it has a descriptor, else the traceback module)."""
    stream.write(header)
    stream.flush()
    try:
        stream.fileno()
        faulthandler.dump_traceback(file=stream, all_threads=True)
        return
    except (AttributeError, ValueError, OSError):
        pass
    import traceback

    names = {t.ident: t.name for t in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        stream.write(f"Thread {names.get(ident, ident)} (most recent call last):\n")
        stream.write("".join(traceback.format_stack(frame)))
    stream.flush()


def report_pool_failures(step: int, trajectories: Sequence[Any], mode: str = "train") -> None:
    """One line on stderr when the env pool ended episodes of this rollout (timeout or a failed worker)."""
    from ragen_core.interfaces.env_pool import LOST_END_REASONS

    ended = [t for t in trajectories if t.end_reason in LOST_END_REASONS]
    if not ended:
        return
    from ragen_core.trainer.divergence import report

    timeouts = sum(t.end_reason == "timeout" for t in ended)
    first = next((turn.info.get("pool_error") for t in ended for turn in t.turns if turn.info.get("pool_error")), "")
    kinds = ", ".join(part for part in (f"{timeouts} timed out" if timeouts else "", f"{len(ended) - timeouts} failed"
                                        if len(ended) > timeouts else "") if part)
    trained = ", their groups left out of the update" if mode == "train" else ""
    report(f"step {step}: {len(ended)} of {len(trajectories)} {mode} episodes ended by the env pool ({kinds}), counted as "
           f"unsuccessful{trained}" + (f"; first: {first}" if first else ""))
