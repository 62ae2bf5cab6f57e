"""``ragen plot RUN_DIR``: learning curves of a run as PNG files in ``RUN_DIR/plots``.

A run draws them itself when it ends (the JSONL logger's ``ragen_on_train_end``); ``ragen plot``
draws them again for any run directory, finished or not.

One figure per metric family that the run logged (success and reward of train and validation,
actor losses, the critic's when it has one, filter statistics, timing, the info metrics an env
declares), plus ``summary.png`` with the four most telling (success, reward, valid actions, the
policy loss). Every axis is labelled. Series that repeat another one exactly are drawn once
(a single-env run's ``train/bandit/success`` is ``train/success``), and families whose members
have different units or scales (losses, filter statistics, info metrics) give each member its
own axes. Runs with gradient analysis (``grad_analysis.every > 0``) also get ``grad_norms.png``:
per analysed step, the task / entropy / KL gradient norm of every reward-std bucket. Uses
matplotlib's non-interactive Agg backend (works on headless machines).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragen_core.errors import shell_word


@dataclass(frozen=True)
class Panel:
    """One figure: the metrics matching ``pattern``, on one axes or (``own_scale``) one axes each."""

    name: str
    pattern: str
    ylabel: str
    own_scale: bool = False


PANELS: list[Panel] = [
    Panel("success", r"^(train|val-env)/([^/]+/)?success$", "success rate"),  # not an env's info/success
    Panel("reward", r"^(train|val-env)/reward$|^(train|val-env)/[^/]+/episodic_return$", "reward per episode"),
    Panel("actor_loss", r"^actor/(pg_loss|entropy|kl_loss|ppo_kl|grad_norm)$", "", own_scale=True),
    # logged only when a critic trains (PPO): a GRPO run has no critic panel
    Panel("critic", r"^critic/(vf_loss|values/mean)$", "", own_scale=True),
    Panel("filter", r"^rollout/(filter_kept_ratio|trained_group_ratio|in_group_reward_std|chosen_in_group_reward_std|empty_after_filter)$",
          "", own_scale=True),
    Panel("validity", r"^(train|val-env)/[^/]+/action_is_valid$", "share of valid actions"),
    # the info keys an env declares in info_metrics (WebShop's raw_reward, Bandit's expected_reward): each its own scale
    Panel("env_info", r"^(train|val-env)/[^/]+/info/.+$", "", own_scale=True),
    Panel("timing", r"^timing_s/(step|gen|update_actor|update_critic)$", "seconds per step"),
    # the collapse diagnostic's estimates, not its bookkeeping (counts, flags, errors: 12 of those hid MI)
    Panel("collapse", r"^collapse_(first_turn|trajectory)_sample/(mi_estimate|conditional_entropy_est|reasoning_entropy_est|retrieval_accuracy)$",
          "", own_scale=True),
]

#: y-axis labels of metrics drawn on their own axes (others are labelled with their name)
LABELS = {
    "actor/pg_loss": "policy-gradient loss",
    "actor/entropy": "entropy (nats per token)",
    "actor/kl_loss": "KL loss to the reference",
    "actor/ppo_kl": "KL to the sampling policy",
    "actor/grad_norm": "actor gradient norm (pre-clip)",
    "critic/vf_loss": "value loss",
    "critic/values/mean": "mean value estimate",
    "rollout/filter_kept_ratio": "share of groups the filter kept",
    "rollout/trained_group_ratio": "share of groups trained",
    "rollout/in_group_reward_std": "in-group reward std (all groups)",
    "rollout/chosen_in_group_reward_std": "in-group reward std (kept groups)",
    "rollout/empty_after_filter": "batches emptied by the filter",
    **{f"collapse_{family}_sample/{key}": f"{what} ({where}, {unit})"
       for family, where in (("first_turn", "first turn"), ("trajectory", "trajectory"))
       for key, what, unit in (("mi_estimate", "I(X;Z)", "nats/token"), ("conditional_entropy_est", "H(Z|X)", "nats/token"),
                               ("reasoning_entropy_est", "H(Z)", "nats/token"), ("retrieval_accuracy", "prompt retrieval", "top-1 accuracy"))},
}

MAX_SERIES = 12

#: the panels of summary.png, in this order when the run logged them (then any others)
SUMMARY = ("success", "reward", "validity", "actor_loss")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="run directory containing metrics.jsonl")
    parser.add_argument("--out", help="output folder (default RUN_DIR/plots)")


def series(rows: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    xs: list[int] = []
    ys: list[float] = []
    for row in rows:
        value = row.get(key)
        if isinstance(value, (int, float)):
            xs.append(int(row.get("step", len(xs))))
            ys.append(float(value))
    return xs, ys


def nonfinite_steps(rows: list[dict[str, Any]], key: str) -> list[int]:
    """Steps whose ``key`` is a number that is not finite (NaN, inf): lines leave them out."""
    return [int(row.get("step", i)) for i, row in enumerate(rows)
            if isinstance(row.get(key), float) and not math.isfinite(row[key])]


def same_series_key(steps: Sequence[float], values: Sequence[float]) -> tuple[tuple[float, float], ...]:
    """A series' points with its values to 12 significant digits: two series with equal keys are
    drawn once (``ragen plot``, ``ragen diagnose``): the same quantity summed in another order
    differs in its last bits."""
    return tuple(zip(steps, (float(f"{v:.12g}") for v in values)))


def distinct(rows: list[dict[str, Any]], keys: list[str]) -> list[str]:
    """``keys`` without those whose series equals an earlier one's (aggregates win over per-env
    copies; among equals at one depth, the order of :data:`LABELS`: an all-zero policy loss is drawn,
    not the all-zero KL loss it equals). Values are compared to 12 significant digits: the same
    quantity summed in another order (a single-turn env's first-turn and trajectory collapse
    estimates) differs in its last bits and is still one series."""
    seen: set[tuple[tuple[float, float], ...]] = set()
    kept: set[str] = set()
    order = list(LABELS)
    for key in sorted(keys, key=lambda k: (k.count("/"), order.index(k) if k in order else len(order), k)):
        points = same_series_key(*series(rows, key))
        if points not in seen:
            seen.add(points)
            kept.add(key)
    return [k for k in keys if k in kept]


def plan(rows: list[dict[str, Any]]) -> list[tuple[Panel, list[str]]]:
    """The figures to draw: each panel that matched something, with its distinct series."""
    keys = sorted({k for row in rows for k in row if k != "step"})
    out = []
    for panel in PANELS:
        chosen = distinct(rows, [k for k in keys if re.match(panel.pattern, k) and series(rows, k)[0]])[:MAX_SERIES]
        chosen.sort(key=lambda k: list(LABELS).index(k) if k in LABELS else len(LABELS))  # the main loss first
        if chosen:
            out.append((panel, chosen))
    return out


def setting_changes(run_dir: Path) -> list[tuple[int, str]]:
    """``(from_step, what)`` of every ``--resume`` that changed settings (``config_changes.jsonl``;
    ``what`` names the settings, shortened); unreadable lines are skipped."""
    from ragen_core.trainer.run_dir import CHANGES_FILE

    out: list[tuple[int, str]] = []
    path = run_dir / CHANGES_FILE
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if path.is_file() else []:
        try:
            row = json.loads(line)
            step = int(row["from_step"])
        except (ValueError, KeyError, TypeError):
            continue
        keys = [*row.get("changed", {}), *row.get("added", {}), *row.get("removed", {})] if isinstance(row, dict) else []
        out.append((step, ", ".join(keys[:2]) + (f" +{len(keys) - 2}" if len(keys) > 2 else "")))
    return out


def _draw(ax: Any, rows: list[dict[str, Any]], keys: list[str], ylabel: str, *, legend: bool,
          changes: list[tuple[int, str]] | None = None) -> None:
    from matplotlib.ticker import MaxNLocator

    steps: set[int] = set()
    for key in keys:
        xs, ys = series(rows, key)
        steps.update(xs)
        ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3, label=key)
    for step, what in changes or []:  # a --resume that changed settings: the curve after this line ran under them
        ax.axvline(step - 0.5, color="grey", lw=0.8, ls=":")
        ax.text(step - 0.5, 1.0, f" resumed: {what}", transform=ax.get_xaxis_transform(), rotation=90, va="top", ha="right",
                fontsize=6, color="dimgray")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if len(steps) == 1:  # one step: one tick, not a fractional axis around it
        ax.set_xticks(sorted(steps))
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(fontsize=7)


def _save_png(fig: Any, path: Path) -> Path:
    """Write ``fig`` to ``path`` whole or not at all (a run stopped mid-plot leaves no cut PNG); closes it."""
    import shutil
    import tempfile

    import matplotlib.pyplot as plt

    drawing = Path(tempfile.mkdtemp(prefix=".drawing-", dir=path.parent))
    try:
        fig.savefig(drawing / path.name, dpi=100, format="png")
        os.replace(drawing / path.name, path)
    finally:
        plt.close(fig)
        shutil.rmtree(drawing, ignore_errors=True)
    return path


def plot_run(run_dir: str | Path, out: str | Path | None = None, *, rows: list[dict[str, Any]] | None = None) -> list[Path]:
    """Write the PNG files; returns their paths. ``rows`` are ``run_dir``'s metrics rows when the
    caller has read them already (a second :func:`read_metrics` would repeat its warnings)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with plt.rc_context({"text.parse_math": False}):  # titles name the run: a folder 'tr_$^$' is text, not mathtext
        return _plot_run(run_dir, out, rows)


def _plot_run(run_dir: str | Path, out: str | Path | None, rows: list[dict[str, Any]] | None) -> list[Path]:
    import matplotlib.pyplot as plt

    from ragen_core.errors import ConfigError
    from ragen_core.trainer.loggers import read_metrics

    run_dir = Path(run_dir)
    if run_dir.is_file():
        hint = (f"pass the folder that holds it: ragen plot {shell_word(run_dir.parent)}" if (run_dir.parent / "metrics.jsonl").is_file()
                else "pass the folder a 'ragen run' wrote (it holds metrics.jsonl)")
        raise ConfigError(f"{run_dir} is a file, not a run directory", [hint])
    if not run_dir.is_dir():
        raise ConfigError(f"run directory {run_dir} does not exist", ["pass the folder a 'ragen run' wrote (it holds metrics.jsonl)"])
    if rows is None:
        rows = read_metrics(run_dir / "metrics.jsonl")
    if not rows:
        if run_dir.parent.name == "checkpoints" and (run_dir.parent.parent / "metrics.jsonl").is_file():
            raise ConfigError(f"{run_dir} is a checkpoint; the metrics are its run's",
                              [f"pass the run folder: ragen plot {shell_word(run_dir.parent.parent)}"])
        raise ConfigError(f"no metrics in {run_dir / 'metrics.jsonl'}", ["pass a run directory written by 'ragen run'"])
    out_dir = Path(out) if out else run_dir / "plots"
    blocker = next((p for p in (out_dir, *out_dir.parents) if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        if out:
            raise ConfigError(f"--out {out_dir}: {blocker} is a file; the plots go into a folder",
                              ["pass a folder (it is created if missing), e.g. --out plots/"])
        raise ConfigError(f"{blocker} is a file where the run's plots folder goes",
                          ["move it away, or write the plots elsewhere with --out DIR"])
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out {out_dir}: cannot create the folder ({exc.strerror or type(exc).__name__})") from None
    written: list[Path] = []
    changes = setting_changes(run_dir)
    figures = plan(rows)
    warn_nonfinite(rows, [k for _, chosen in figures for k in chosen])
    for panel, chosen in figures:
        if panel.own_scale:
            cols = min(len(chosen), 3)
            fig, axes = plt.subplots(-(-len(chosen) // cols), cols, figsize=(4 * cols, 3.2 * -(-len(chosen) // cols)), squeeze=False)
            for ax, key in zip(axes.flat, chosen):
                _draw(ax, rows, [key], LABELS.get(key, key), legend=False, changes=changes)
                ax.set_title(key, fontsize=9)
            for ax in list(axes.flat)[len(chosen):]:
                ax.set_visible(False)
            fig.suptitle(f"{run_dir.name}: {panel.name}")
        else:
            fig, ax = plt.subplots(figsize=(6, 4))
            _draw(ax, rows, chosen, panel.ylabel, legend=True, changes=changes)
            ax.set_title(f"{run_dir.name}: {panel.name}")
        fig.tight_layout()
        written.append(_save_png(fig, out_dir / f"{panel.name}.png"))
    if figures:
        fig, axes = plt.subplots(2, 2, figsize=(10, 7))
        first = sorted(figures, key=lambda f: SUMMARY.index(f[0].name) if f[0].name in SUMMARY else len(SUMMARY))[:4]
        for ax, (panel, chosen) in zip(axes.flat, first):
            keys = chosen[:1] if panel.own_scale else chosen[:6]  # one scale per axes
            _draw(ax, rows, keys, LABELS.get(keys[0], keys[0]) if panel.own_scale else panel.ylabel, legend=True, changes=changes)
            ax.set_title(keys[0] if panel.own_scale else panel.name)  # a panel of several scales shows one metric here: name it
        for ax in list(axes.flat)[len(first):]:
            ax.set_visible(False)
        fig.suptitle(run_dir.name)
        fig.tight_layout()
        written.append(_save_png(fig, out_dir / "summary.png"))
    grad_path = plot_grad_norms(rows, out_dir, run_dir.name)
    if grad_path is not None:
        written.append(grad_path)
    remove_stale(out_dir, written)
    return written


def warn_nonfinite(rows: list[dict[str, Any]], keys: list[str]) -> None:
    """One stderr warning per drawn metric that is NaN or infinite at some step (a loss that blew
    up is a gap in its line: say so rather than draw a curve that looks whole)."""
    for key in dict.fromkeys(keys):
        bad = nonfinite_steps(rows, key)
        if bad:
            shown = ", ".join(map(str, bad[:8])) + (f" and {len(bad) - 8} more" if len(bad) > 8 else "")
            print(f"warning: {key} is NaN or infinite at step{'s' if len(bad) > 1 else ''} {shown}: drawn as gaps", file=sys.stderr)


def remove_stale(out_dir: Path, written: list[Path], *, record: str = ".ragen-plot.json") -> None:
    """Delete the figures this command drew into ``out_dir`` earlier that this drawing did not write.

    They were drawn from another run or before its settings changed (a PPO run's critic.png left
    in the folder of a GRPO run) and would pass for this run's. What was drawn is listed in
    ``out_dir/record``, so only a file this command wrote there is ever removed (a user's own
    critic.png stays); each removal is named on stderr.
    """
    fresh = {path.name for path in written}
    listing = out_dir / record
    try:
        drawn = set(json.loads(listing.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        drawn = set()
    for name in sorted(drawn - fresh, key=str):  # (also a figure an older version drew under a name it no longer uses)
        stale = out_dir / str(name)
        if not (isinstance(name, str) and name.endswith(".png") and Path(name).name == name and stale.is_file()):
            continue  # only a PNG of this folder: a damaged record names nothing else
        try:
            stale.unlink()
        except OSError as exc:
            print(f"note: could not remove {stale}, drawn earlier ({exc.strerror or exc}): it does not show this run", file=sys.stderr)
            continue
        print(f"note: removed {stale}: drawn earlier, and the metrics it shows are not in this run", file=sys.stderr)
    listing.write_text(json.dumps(sorted(fresh)) + "\n", encoding="utf-8")


_GRAD_KEY = re.compile(r"^grad_norm/(bucket_(\d+)|all)/(task|entropy|kl|reward_std_mean)$")


def grad_norm_table(rows: list[dict[str, Any]]) -> dict[int, dict[str, dict[str, float]]]:
    """``{step: {bucket: {component: norm}}}`` from the ``grad_norm/<bucket>/<component>`` metrics.

    Each bucket's ``reward_std_mean`` is included under that name (it labels the bars).
    """
    table: dict[int, dict[str, dict[str, float]]] = {}
    for row in rows:
        for key, value in row.items():
            match = _GRAD_KEY.match(key)
            if match and isinstance(value, (int, float)):
                table.setdefault(int(row.get("step", 0)), {}).setdefault(match.group(1), {})[match.group(3)] = float(value)
    return table


def _bucket_order(name: str) -> tuple[int, int]:
    return (1, 0) if name == "all" else (0, int(name.split("_")[1]))


def plot_grad_norms(rows: list[dict[str, Any]], out_dir: Path, title: str) -> Path | None:
    """Grouped bars (bucket x component) for up to four analysed steps; None without such metrics."""
    import matplotlib.pyplot as plt

    table = grad_norm_table(rows)
    if not table:
        return None
    steps = sorted(table)
    if len(steps) > 4:  # first, last and two in between
        steps = [steps[round(i * (len(steps) - 1) / 3)] for i in range(4)]
    fig, axes = plt.subplots(1, len(steps), figsize=(4.5 * len(steps), 4), squeeze=False)
    comps = ["task", "entropy", "kl"]
    for ax, step in zip(axes[0], steps):
        buckets = sorted(table[step], key=_bucket_order)
        present = [c for c in comps if any(c in table[step][b] for b in buckets)]
        width = 0.8 / max(len(present), 1)
        for j, comp in enumerate(present):
            xs = [i + (j - (len(present) - 1) / 2) * width for i in range(len(buckets))]
            ax.bar(xs, [table[step][b].get(comp, 0.0) for b in buckets], width=width, label=comp)
        ax.set_xticks(range(len(buckets)))
        labels = [b.replace("bucket_", "b") + (f"\nrv {table[step][b]['reward_std_mean']:.2f}" if "reward_std_mean" in table[step][b] else "")
                  for b in buckets]
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_title(f"step {step}")
        ax.set_xlabel("reward-std bucket (low -> high)")
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("grad norm (pre-clip)")
    fig.suptitle(f"{title}: gradient norm per loss component")
    fig.tight_layout()
    return _save_png(fig, out_dir / "grad_norms.png")


def run(args: argparse.Namespace) -> int:
    from ragen_core.errors import ConfigError

    try:
        written = plot_run(args.run_dir, args.out)
    except OSError as exc:  # a folder where a PNG goes, a read-only disk: one line, not a traceback
        raise ConfigError(f"cannot write the plots: {exc.strerror or exc}: {exc.filename}",
                          ["remove what is in the way, or write them elsewhere with --out DIR"]) from None
    for path in written:
        print(path)
    return 0
