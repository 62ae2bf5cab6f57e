"""Metric loggers as pluggy hook implementations (``ragen_on_step_end``).

* :class:`JsonlLogger` — always on: appends ``{"step": N, ...}`` to ``RUN_DIR/metrics.jsonl``
  and flushes after every line, so a killed run keeps every finished step. When the run ends
  (finished, stopped or interrupted) it draws the curves into ``RUN_DIR/plots`` as ``ragen plot``
  does; ``RAGEN_PLOTS=0`` skips that (the test suite sets it: a few seconds per run).
* :class:`TensorBoardLogger` — when ``tensorboard`` is importable.
* :class:`WandbLogger` — W&B in *offline* mode (never contacts a server) when ``wandb`` is importable.

A third-party logger is just another object with ``@hookimpl def ragen_on_step_end(...)``
registered on the trainer's plugin manager.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
from pathlib import Path
from typing import Any

from ragen_core.errors import shell_word
from ragen_core.hookspecs import hookimpl

logger = logging.getLogger(__name__)


def _clean(metrics: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in metrics.items():
        if isinstance(value, bool):
            out[key] = float(value)
        elif isinstance(value, (int, float)):
            out[key] = float(value) if math.isfinite(float(value)) else None
        elif hasattr(value, "item"):
            out[key] = float(value.item())
    return out


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Read a ``metrics.jsonl`` file; lines that are not JSON are skipped with one warning naming
    them, a torn last line (killed writer, or a live run's line being written) said to be cut short.

    Raises:
        ConfigError: A line is JSON but not an object, the file is not UTF-8 text, or it has lines
            but no JSON row (it was not written by a RAGEN logger; ``ragen plot`` says so instead
            of "no metrics" or a crash).
    """
    from ragen_core.errors import ConfigError

    rows: list[dict[str, Any]] = []
    p = Path(path)
    if not p.is_file():
        return rows
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{p} is not a metrics file (not UTF-8 text)", ["metrics.jsonl holds one JSON object per line"]) from None
    except OSError as exc:  # not "cannot write the plots": the reading failed
        raise ConfigError(f"cannot read {p} ({exc.strerror or type(exc).__name__})", ["make the file readable"]) from None
    lines = text.rstrip().splitlines()
    bad: list[int] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            bad.append(number)
            continue
        if not isinstance(row, dict):
            raise ConfigError(f"{p} line {number} is a JSON {type(row).__name__}, not an object: not a RAGEN metrics row",
                              ["metrics.jsonl holds one JSON object per line; restore the file or remove that line"])
        rows.append(row)
    damaged = [n for n in bad if n < len(lines)]  # the last line may be one a live run is still writing: not damage
    if damaged and not rows:
        raise ConfigError(f"{p} holds no JSON row ({len(bad)} line(s) of other text): not a RAGEN metrics file",
                          ["metrics.jsonl holds one JSON object per line, as 'ragen run' writes it"])
    if bad and rows:
        torn = "; the last line is cut short: a run is writing it, or was killed while writing it" if bad[-1] == len(lines) else ""
        logger.warning("%s: %d line(s) not JSON rows, skipped (line %s%s)", p, len(bad), ", ".join(map(str, bad[:5])) +
                       (", ..." if len(bad) > 5 else ""), torn)
    rows, note = one_row_per_step(rows)
    if note:
        logger.warning("%s: %s", p, note)
    return rows


def one_row_per_step(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """The rows with a step, one per step and in step order, then the rows without one; and a note
    saying what changed ("" when the steps already rose one row each, as a run writes them).

    A step with several rows keeps the last written (a concatenated or hand-edited file, a run
    resumed by hand): a curve drawn from them went back and forth, and a resume kept them all.
    """
    from collections import Counter

    steps = [r["step"] for r in rows if is_step(r.get("step"))]
    if all(a < b for a, b in zip(steps, steps[1:])):
        return rows, ""
    last = {r["step"]: r for r in rows if is_step(r.get("step"))}
    repeated = sorted(s for s, n in Counter(steps).items() if n > 1)
    shown = ", ".join(f"{s:g}" for s in repeated[:5]) + (", ..." if len(repeated) > 5 else "")
    parts = ([f"step{'s' if len(repeated) > 1 else ''} {shown} {'have' if len(repeated) > 1 else 'has'} several rows "
              "(the last written is used)"] if repeated else [])
    if any(a > b for a, b in zip(steps, steps[1:])):
        parts.append("rows are out of step order (read in step order)")
    return [last[s] for s in sorted(last)] + [r for r in rows if not is_step(r.get("step"))], "; ".join(parts)


def read_complete_rows(path: str | Path) -> tuple[list[dict[str, Any]], bool]:
    """The rows of ``metrics.jsonl`` before a torn last line, and whether there was one.

    A torn last line (not JSON: a writer killed mid-line) is cut. Used by ``--resume``, which
    recomputes the steps after the last complete row from a checkpoint.

    Raises:
        ConfigError: A complete line is JSON but not an object (not written by a RAGEN logger), or
            a broken line has rows after it (damaged later: cutting there would drop good rows).
    """
    from ragen_core.errors import ConfigError

    p = Path(path)
    if not p.is_file():
        return [], False
    rows: list[dict[str, Any]] = []
    lines = p.read_bytes().split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            if any(later.strip() for later in lines[number:]):  # a killed writer tears only the last line
                raise ConfigError(f"{p} line {number} is not a JSON row, but rows follow it: the file was damaged after it was "
                                  "written, and resuming would drop the rows after it",
                                  ["restore the file, or delete that one line (its step's metrics are lost) and resume again"]) from None
            return rows, True
        if not isinstance(row, dict):
            raise ConfigError(f"{p} line {number} is a JSON {type(row).__name__}, not an object",
                              ["metrics.jsonl holds one JSON object per step, as 'ragen run' writes it"])
        rows.append(row)
    return rows, False


def truncate_metrics(path: str | Path, last_step: int) -> str:
    """Keep only complete rows with ``step <= last_step``, one per step in step order (used when
    resuming from a checkpoint); returns :func:`one_row_per_step`'s note ("" when the rows were in order).

    The file is replaced atomically: a process killed meanwhile leaves the old file, never half of it.
    """
    p = Path(path)
    if not p.is_file():
        return ""
    kept = [r for r in read_complete_rows(p)[0] if is_step(r.get("step")) and r["step"] <= last_step]  # a row without a step is no step's
    rows, note = one_row_per_step(kept)
    from ragen_core.trainer.run_dir import replace_text

    try:
        replace_text(p, "".join(json.dumps(r) + "\n" for r in rows))
    except OSError as exc:  # a read-only run folder: one line, before anything was trained
        from ragen_core.errors import ConfigError

        raise ConfigError(f"cannot write to run directory {p.parent} ({type(exc).__name__}: {exc.strerror or exc})",
                          ["make it writable (a resume appends to metrics.jsonl and writes checkpoints there)"]) from None
    return note


def is_step(value: object) -> bool:
    """A metrics row's ``step`` a reader can use: a number, not a bool, not NaN (hand-edited rows may hold null)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


class JsonlLogger:
    """Append one JSON object per step to ``metrics.jsonl``."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)

    @hookimpl
    def ragen_on_step_end(self, metrics: dict[str, float], step: int) -> None:
        row = {"step": int(step), **_clean(metrics)}
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
            fh.flush()

    @hookimpl
    def ragen_on_train_end(self) -> None:
        """Draw ``RUN_DIR/plots`` from the metrics written so far (skipped with ``RAGEN_PLOTS=0``).

        A failure only warns: the metrics are already on disk and ``ragen plot`` can draw them later.
        """
        if os.environ.get("RAGEN_PLOTS", "1") == "0":
            return
        try:
            rows = read_metrics(self.path)  # read once: its warnings about a damaged file are said once
            if not rows:  # stopped before its first step
                return
            from ragen_core.cli.plot import plot_run

            written = plot_run(self.path.parent, rows=rows)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM once training is over: metrics and checkpoints are on disk
            print(f"plots not drawn (stopped while drawing them; metrics.jsonl and the checkpoints are kept): draw them with "
                  f"'ragen plot {shell_word(self.path.parent)}'", file=sys.stderr)
            raise
        except Exception as exc:  # noqa: BLE001 - plots are a by-product; the run's results are already written
            print(f"warning: plots not drawn ({type(exc).__name__}: {exc}); draw them with 'ragen plot {shell_word(self.path.parent)}'",
                  file=sys.stderr)
            return
        print(f"plots: {self.path.parent / 'plots'} ({len(written)} files)")


class TensorBoardLogger:
    """Scalars to ``RUN_DIR/tensorboard``."""

    def __init__(self, run_dir: str | Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(Path(run_dir) / "tensorboard"))

    @hookimpl
    def ragen_on_step_end(self, metrics: dict[str, float], step: int) -> None:
        for key, value in _clean(metrics).items():
            if value is not None:
                self.writer.add_scalar(key, value, step)
        self.writer.flush()

    @hookimpl
    def ragen_on_train_end(self) -> None:
        self.writer.close()


class WandbLogger:
    """W&B in offline mode; sync later with ``wandb sync RUN_DIR/wandb``."""

    def __init__(self, run_dir: str | Path, config: Any = None) -> None:
        import wandb

        self.wandb = wandb
        cfg = config.model_dump(mode="json") if hasattr(config, "model_dump") else None
        self.run = wandb.init(mode="offline", dir=str(run_dir), config=cfg, project="ragen")

    @hookimpl
    def ragen_on_step_end(self, metrics: dict[str, float], step: int) -> None:
        self.run.log({k: v for k, v in _clean(metrics).items() if v is not None}, step=step)

    @hookimpl
    def ragen_on_train_end(self) -> None:
        self.run.finish()


LOGGERS = {"tensorboard": "tensorboard", "wandb": "wandb"}
"""Optional logger name -> the package it needs."""


def make_loggers(names: list[str], run_dir: str | Path, config: Any = None) -> list[Any]:
    """JSONL always, plus every requested optional logger.

    A logger the user asked for whose package is missing is an error (it would otherwise fail
    silently for a whole run); an unknown name is an error naming the choices.
    """
    from ragen_core.errors import ConfigError

    loggers: list[Any] = [JsonlLogger(run_dir)]
    for name in names:
        if name in ("jsonl", "console"):
            continue
        if name not in LOGGERS:
            raise ConfigError(f"unknown logger {name!r} in loggers", [f"choose from: jsonl, {', '.join(LOGGERS)}"])
        try:
            loggers.append(TensorBoardLogger(run_dir) if name == "tensorboard" else WandbLogger(run_dir, config))
        except ImportError:
            raise ConfigError(f"logger {name!r} needs the {LOGGERS[name]!r} package", [f"pip install 'ragen-core[{name}]'"]) from None
    return loggers
