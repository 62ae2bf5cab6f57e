"""``ragen plot RUN_DIR``: learning curves of a run as PNG files in ``RUN_DIR/plots``.

One figure per metric family that the run logged (success and reward of train and validation,
actor losses, entropy, filter kept ratio, timing), plus ``summary.png`` with the four most useful
panels. Runs with gradient analysis (``grad_analysis.every > 0``) also get ``grad_norms.png``:
per analysed step, the task / entropy / KL gradient norm of every reward-std bucket. Uses
matplotlib's non-interactive Agg backend (works on headless machines).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

PANELS: list[tuple[str, str]] = [
    ("success", r"^(train|val-env)/(.+/)?success$"),
    ("reward", r"^(train|val-env)/reward$|^(train|val-env)/[^/]+/episodic_return$"),
    ("actor_loss", r"^actor/(pg_loss|entropy|ppo_kl|grad_norm)$"),
    ("critic", r"^critic/(vf_loss|score/mean)$"),
    ("filter", r"^rollout/(filter_kept_ratio|in_group_reward_std|empty_after_filter)$"),
    ("validity", r"^(train|val-env)/[^/]+/action_is_valid$"),
    ("timing", r"^timing_s/(step|gen|update_actor|update_critic)$"),
    ("collapse", r"^collapse.*"),
]


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


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> list[Path]:
    """Write the PNG files; returns their paths (empty when no metrics were logged)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ragen_core.errors import ConfigError
    from ragen_core.trainer.loggers import read_metrics

    run_dir = Path(run_dir)
    rows = read_metrics(run_dir / "metrics.jsonl")
    if not rows:
        raise ConfigError(f"no metrics in {run_dir / 'metrics.jsonl'}", ["pass a run directory written by 'ragen run'"])
    out_dir = Path(out) if out else run_dir / "plots"
    out_dir.mkdir(parents=True, exist_ok=True)
    keys = sorted({k for row in rows for k in row if k != "step"})
    written: list[Path] = []
    panels: list[tuple[str, list[str]]] = []
    for name, pattern in PANELS:
        chosen = [k for k in keys if re.match(pattern, k)]
        if chosen:
            panels.append((name, chosen))
    for name, chosen in panels:
        fig, ax = plt.subplots(figsize=(6, 4))
        for key in chosen[:12]:
            xs, ys = series(rows, key)
            ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3, label=key)
        ax.set_xlabel("step")
        ax.set_title(f"{run_dir.name}: {name}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out_dir / f"{name}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    if panels:
        fig, axes = plt.subplots(2, 2, figsize=(10, 7))
        for ax, (name, chosen) in zip(axes.flat, panels[:4]):
            for key in chosen[:6]:
                xs, ys = series(rows, key)
                ax.plot(xs, ys, label=key)
            ax.set_title(name)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6)
        fig.tight_layout()
        path = out_dir / "summary.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    grad_path = plot_grad_norms(rows, out_dir, run_dir.name)
    if grad_path is not None:
        written.append(grad_path)
    return written


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
    path = out_dir / "grad_norms.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def run(args: argparse.Namespace) -> int:
    written = plot_run(args.run_dir, args.out)
    for path in written:
        print(path)
    return 0
