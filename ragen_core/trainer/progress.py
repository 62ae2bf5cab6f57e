"""The training loop's progress display: tqdm's bar on a terminal, plain lines anywhere else.

The trainer redraws its bar at every rollout turn, update and validation (the phase it is in). tqdm
redraws with a carriage return: on a terminal that is one line that moves; in a file or a CI log
(``ragen run ... 2>&1 | tee run.log``) it is one line holding every redraw, which log viewers show
as a line each -- thousands in a long run. Where stderr is not a terminal (nor a notebook, whose
tqdm draws a widget), :class:`LineProgress` prints plain lines instead: one per finished step, at
most one every :data:`LINE_EVERY_S` seconds (the first and the last step always), and, in a step
running longer than that, the phase it is in, so a slow step is not silence. The warm start's bars
(an SFT round's steps, a valid-rate check's turns) are drawn only where :func:`bars_drawn`: its
round lines say the same in a log.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

#: The least time between two of :class:`LineProgress`'s lines (the first and last step excepted).
LINE_EVERY_S = 30.0


def stderr_is_terminal() -> bool:
    """Whether stderr is a terminal (a closed or replaced stream without ``isatty`` is not)."""
    try:
        return bool(sys.stderr.isatty())
    except (AttributeError, ValueError):
        return False


def bars_drawn() -> bool:
    """Whether a tqdm bar draws in place here: on a terminal, or as a notebook's widget."""
    from tqdm import autonotebook, std

    return autonotebook.tqdm is not std.tqdm or stderr_is_terminal()


def step_progress(total: int, initial: int, desc: str) -> Any:
    """The display of a run's steps: a tqdm bar where :func:`bars_drawn`, else :class:`LineProgress`.

    Both take ``update(n)``, ``set_postfix_str(text)`` and ``close()``."""
    if bars_drawn():
        from tqdm.auto import tqdm

        return tqdm(total=total, initial=initial, desc=desc, unit="step")
    return LineProgress(total, initial, desc)


class LineProgress:
    """A progress display in plain lines on stderr, no carriage returns (see the module docstring).

    The trainer calls ``update(1)`` when a step ends, then ``set_postfix_str`` with the step's
    reward and success; during a step, ``set_postfix_str`` with the phase. A line looks like
    ``ragen bandit/grpo: 2/3 steps [00:02, 1.09 s/step] reward=0.125, success=0.25``.
    """

    def __init__(self, total: int, initial: int, desc: str, *, every_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.initial, self.n, self.desc = total, initial, initial, desc
        self.every_s = LINE_EVERY_S if every_s is None else every_s  # (read when made: a test may set it)
        self._clock = clock
        self._start = self._last = clock()
        self._postfix = ""
        self._step_ended = False  # update() was called since the last set_postfix_str
        self._said = initial  # the step count of the last line printed
        self._print(f"{desc}: steps {initial + 1} to {total} (a line at the first and the last step, and at most one every "
                    f"{self.every_s:g} s)")

    def update(self, n: int = 1) -> None:
        self.n += n
        self._step_ended = True

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self._postfix = s
        ended, self._step_ended = self._step_ended, False
        first_or_last = ended and (self.n == self.initial + 1 or self.n >= self.total)
        if first_or_last or self._clock() - self._last >= self.every_s:
            self._line()

    def close(self) -> None:
        """The last step's line, where throttling left it unsaid (a run stopped early, an interrupt)."""
        if self.n != self._said:
            self._line()

    def _line(self) -> None:
        from tqdm.std import tqdm

        now = self._clock()
        elapsed = now - self._start
        done = self.n - self.initial
        rate = f", {elapsed / done:.2f} s/step" if done > 0 else ""
        self._print(f"{self.desc}: {self.n}/{self.total} steps [{tqdm.format_interval(elapsed)}{rate}] {self._postfix}".rstrip())
        self._last, self._said = now, self.n

    @staticmethod
    def _print(line: str) -> None:
        print(line, file=sys.stderr, flush=True)
