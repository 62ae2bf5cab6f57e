"""Plots and a self-contained HTML report of a run's collapse diagnostics.

:func:`build_report` reads ``RUN_DIR/metrics.jsonl`` (and ``RUN_DIR/diagnostics_offline.jsonl``
when :mod:`ragen_diagnostics.offline` wrote one) and writes into ``RUN_DIR/plots/``:

* ``collapse_regimes.png``: RAGEN-2's four regimes, x = H(Z|X) (``conditional_entropy_est``),
  y = I(X;Z) (``mi_estimate``), with the run's path through them coloured by step. The dividing
  lines sit at ``entropy_ratio`` and ``mi_ratio`` times the first measurement (the same rule as
  the diagnostic's warnings), so the quadrants read "relative to where the run started";
* ``collapse_mi.png``, ``collapse_entropy.png``, ``collapse_retrieval.png`` (accuracy vs chance),
  ``reward_variance.png`` (``rollout/in_group_reward_std``), ``filter_kept.png``
  (``rollout/filter_kept_ratio``); a curve whose metrics were never logged is skipped;

and ``RUN_DIR/diagnostics.html`` with every PNG embedded as base64. matplotlib runs on Agg.
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path
from typing import Any

from ragen_core.cli.plot import same_series_key
from ragen_core.errors import RagenError

FAMILIES = {"collapse_trajectory_sample": "trajectory sample", "collapse_first_turn_sample": "first-turn sample"}
QUADRANTS = ("diverse & grounded", "compressed & grounded", "template collapse", "low-entropy collapse")
OFFLINE_FILE = "diagnostics_offline.jsonl"


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Rows of a metrics JSONL file with a numeric ``step``, one per step in step order (a step
    diagnosed twice offline: the newest row).

    Read as ``ragen plot`` reads it (:func:`ragen_core.trainer.loggers.read_metrics`): a torn last
    line is ignored, other damaged lines are skipped with a warning naming them, and a file that
    is not a metrics file is a one-line error.
    """
    from ragen_core.trainer.loggers import is_step
    from ragen_core.trainer.loggers import read_metrics as read_rows

    return [row for row in read_rows(path) if is_step(row.get("step"))]


def series(rows: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of the rows that logged a finite ``key``."""
    xs, ys = [], []
    for row in rows:
        value = row.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value):
            xs.append(float(row["step"]))
            ys.append(float(value))
    return xs, ys


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _integer_locator() -> Any:
    """Tick locator that only places whole numbers (training steps)."""
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(integer=True)


def _family_paths(rows: list[dict[str, Any]]) -> list[tuple[str, list[float], list[float], list[float]]]:
    """Per family with data: (label, steps, H(Z|X), MI) at the steps that logged both."""
    paths = []
    for fam, label in FAMILIES.items():
        s_h, h = series(rows, f"{fam}/conditional_entropy_est")
        s_i, mi = series(rows, f"{fam}/mi_estimate")
        both = sorted(set(s_h) & set(s_i))
        if both:
            hm, im = dict(zip(s_h, h)), dict(zip(s_i, mi))
            paths.append((label, both, [hm[s] for s in both], [im[s] for s in both]))
    return paths


def _regime_plot(rows: list[dict[str, Any]], offline: list[dict[str, Any]], out: Path, mi_ratio: float, entropy_ratio: float) -> bool:
    paths, off_paths = _family_paths(rows), _family_paths(offline)
    if not paths and not off_paths:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 6))
    all_h = [v for p in paths + off_paths for v in p[2]]
    all_mi = [v for p in paths + off_paths for v in p[3]]
    # dividers relative to the first measurement (the run's, else the earliest offline one); when
    # that is zero, the middle of the data. One measurement alone has no regime: nothing to compare with.
    ref = paths[0] if paths else off_paths[0]
    h_first, mi_first = ref[2][0], ref[3][0]
    single = len({s for p in paths + off_paths for s in p[1]}) < 2
    x_div = entropy_ratio * h_first if h_first > 0 else (min(all_h) + max(all_h)) / 2
    y_div = mi_ratio * mi_first if mi_first > 0 else (min(all_mi) + max(all_mi)) / 2
    lo_x, hi_x = min(all_h + [0.0]), max(all_h + [x_div]) * 1.15 + 1e-6
    lo_y, hi_y = min(all_mi + [0.0]) - 0.02, max(all_mi + [y_div]) * 1.15 + 1e-6
    if not single:  # shade the two collapse quadrants (low MI): template collapse right, low-entropy left
        ax.fill_between([x_div, hi_x], lo_y, y_div, color="tab:red", alpha=0.06, lw=0)
        ax.fill_between([lo_x, x_div], lo_y, y_div, color="tab:orange", alpha=0.08, lw=0)
        ax.axvline(x_div, color="grey", lw=0.8, ls="--")
        ax.axhline(y_div, color="grey", lw=0.8, ls="--")
        corners = {  # (x, y, ha, va) per quadrant label, in the order of QUADRANTS
            QUADRANTS[0]: (hi_x, hi_y, "right", "top"),
            QUADRANTS[1]: (lo_x, hi_y, "left", "top"),
            QUADRANTS[2]: (hi_x, lo_y, "right", "bottom"),
            QUADRANTS[3]: (lo_x, lo_y, "left", "bottom"),
        }
        for text, (x, y, ha, va) in corners.items():
            ax.text(x, y, text, ha=ha, va=va, fontsize=10, color="dimgray", style="italic")
    markers = ["o", "s"]
    sc = None
    for k, (label, steps, h, mi) in enumerate(paths):
        ax.plot(h, mi, color="lightgray", lw=1, zorder=1)
        sc = ax.scatter(h, mi, c=steps, cmap="viridis", marker=markers[k % 2], s=40, zorder=2, label=label, edgecolors="k", linewidths=0.3)
        ax.annotate(f"step {int(steps[0])}", (h[0], mi[0]), textcoords="offset points", xytext=(6, 4), fontsize=8)
        ax.annotate(f"step {int(steps[-1])}", (h[-1], mi[-1]), textcoords="offset points", xytext=(6, 4), fontsize=8)
    for k, (label, _, h, mi) in enumerate(off_paths):  # one marker and colour per family: they often sit close together
        ax.scatter(h, mi, marker="*P"[k % 2], s=160 if k % 2 == 0 else 110, color=("crimson", "darkorange")[k % 2], zorder=3,
                   label=f"offline ({label})", edgecolors="k", linewidths=0.3)
    if sc is not None:
        bar = fig.colorbar(sc, ax=ax, label="training step")
        bar.locator = _integer_locator()
        bar.update_ticks()
    ax.set_xlim(lo_x, hi_x)
    ax.set_ylim(lo_y, hi_y)
    ax.set_xlabel("conditional entropy H(Z|X) (nats/token)")
    ax.set_ylabel("mutual information I(X;Z) (nats/token)")
    rule = ("one measurement: regimes compare later ones with the first, so no dividers" if single
            else f"dividers at {entropy_ratio:.0%} / {mi_ratio:.0%} of the first measurement" if h_first > 0 and mi_first > 0
            else "dividers at the middle of the measured range")
    ax.set_title(f"Reasoning regimes ({rule})", fontsize=10)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


def _curves(rows: list[dict[str, Any]], out: Path, title: str, ylabel: str, keys: list[tuple[str, str, str]]) -> bool:
    """One line per (metric key, label, line style) that has data; False when none has. A series
    equal to an earlier one (to 12 significant digits, as ``ragen plot`` compares them: the first-turn
    and trajectory estimates of a single-turn env) is not drawn under it, hidden but in the legend:
    the earlier line's label names both (``accuracy (first turn) = accuracy (trajectory)``)."""
    data: list[tuple[tuple[list[float], list[float]], str, str]] = []
    seen: dict[tuple[tuple[float, float], ...], int] = {}
    for key, label, style in keys:
        xs, ys = series(rows, key)
        if not xs:
            continue
        points = same_series_key(xs, ys)
        if points in seen:
            (xs0, ys0), label0, style0 = data[seen[points]]
            data[seen[points]] = ((xs0, ys0), f"{label0} = {label}", style0)
            continue
        seen[points] = len(data)
        data.append(((xs, ys), label, style))
    if not data:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    for (xs, ys), label, style in data:
        ax.plot(xs, ys, style, label=label, marker="." if len(xs) < 60 else None)
    ax.set_xlabel("training step")
    ax.xaxis.set_major_locator(_integer_locator())  # steps are whole numbers: no 1.25, 1.5 ticks
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


def _curve_specs() -> list[tuple[str, str, str, list[tuple[str, str, str]]]]:
    fam_keys = list(FAMILIES.items())
    return [
        ("collapse_mi.png", "Mutual information I(X;Z)", "nats / token",
         [(f"{f}/mi_estimate", f"MI ({lab})", "-") for f, lab in fam_keys]),
        ("collapse_entropy.png", "Entropy of the reasoning", "nats / token",
         [(f"{f}/conditional_entropy_est", f"H(Z|X) ({lab})", "-") for f, lab in fam_keys]
         + [(f"{f}/reasoning_entropy_est", f"H(Z) ({lab})", "--") for f, lab in fam_keys]),
        ("collapse_retrieval.png", "Prompt retrieval from reasoning", "top-1 accuracy",
         [(f"{f}/retrieval_accuracy", f"accuracy ({lab})", "-") for f, lab in fam_keys]
         + [(f"{f}/retrieval_chance_level", f"chance ({lab})", ":") for f, lab in fam_keys]),
        ("reward_variance.png", "Within-group reward std (reward variance signal)", "std",
         [("rollout/in_group_reward_std", "in-group reward std", "-")]),
        ("filter_kept.png", "Groups kept by the rollout filter", "kept ratio",
         [("rollout/filter_kept_ratio", "kept ratio", "-")]),
    ]


SUMMARY_KEYS = ("mi_estimate", "mi_upper_bound", "conditional_entropy_est", "reasoning_entropy_est",
                "retrieval_accuracy", "retrieval_chance_level", "mi_zscore_ema")


def _cell(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, (int, float)) else "–"


def _summary_table(rows: list[dict[str, Any]], caption: str) -> str:
    body = []
    for fam, label in FAMILIES.items():
        steps = [r for r in rows if f"{fam}/mi_estimate" in r]
        if not steps:
            continue
        first, last = steps[0], steps[-1]
        for key in SUMMARY_KEYS:
            a, b = first.get(f"{fam}/{key}"), last.get(f"{fam}/{key}")
            body.append(f"<tr><td>{html.escape(label)}</td><td>{key}</td><td>{_cell(a)}</td><td>{_cell(b)}</td></tr>")
        body.append(f"<tr><td colspan=4><small>first step {first['step']}, last step {last['step']}</small></td></tr>")
    if not body:
        return ""
    return (f"<h2>{html.escape(caption)}</h2><table><tr><th>family</th><th>metric</th><th>first</th><th>last</th></tr>"
            + "".join(body) + "</table>")


def _regime(h: float, mi: float, h_first: float, mi_first: float, mi_ratio: float, entropy_ratio: float) -> str | None:
    """The quadrant of :data:`QUADRANTS` that (H(Z|X), MI) falls in, by the regime plot's rule
    (dividers at ``entropy_ratio`` / ``mi_ratio`` of the first measurement); None without a
    positive first measurement to compare with."""
    if h_first <= 0 or mi_first <= 0:
        return None
    grounded, diverse = mi >= mi_ratio * mi_first, h >= entropy_ratio * h_first
    return QUADRANTS[0 if grounded and diverse else 1 if grounded else 2 if diverse else 3]


def summary_lines(rows: list[dict[str, Any]], mi_ratio: float = 0.5, entropy_ratio: float = 0.5) -> list[str]:
    """What ``ragen diagnose`` prints under the file list: per family, MI, H(Z|X) and retrieval at
    the first and last measured step with the last step's regime, then the steps at which the
    diagnostic warned of a collapse. Empty when ``rows`` hold no MI estimate."""
    lines = []
    for fam, label in FAMILIES.items():
        steps = [r for r in rows if isinstance(r.get(f"{fam}/mi_estimate"), (int, float))
                 and isinstance(r.get(f"{fam}/conditional_entropy_est"), (int, float))]
        if not steps:
            continue
        first, last = steps[0], steps[-1]
        mi0, mi1 = first[f"{fam}/mi_estimate"], last[f"{fam}/mi_estimate"]
        h0, h1 = first[f"{fam}/conditional_entropy_est"], last[f"{fam}/conditional_entropy_est"]
        span = f"step {last['step']}" if len(steps) == 1 else f"steps {first['step']} -> {last['step']}"
        line = f"{label} ({span}): I(X;Z) {mi0:.3f} -> {mi1:.3f} nats/token"
        bound = last.get(f"{fam}/mi_upper_bound")
        if isinstance(bound, (int, float)):
            line += f" (at most log N = {bound:.3f})"
        line += f", H(Z|X) {h0:.3f} -> {h1:.3f}"
        acc, chance = last.get(f"{fam}/retrieval_accuracy"), last.get(f"{fam}/retrieval_chance_level")
        if isinstance(acc, (int, float)) and isinstance(chance, (int, float)):
            line += f", retrieval {acc:.3f} (chance {chance:.3f}{'; at chance: the reasoning does not tell its prompt' if acc <= chance else ''})"
        regime = _regime(h1, mi1, h0, mi0, mi_ratio, entropy_ratio) if len(steps) > 1 else None
        if regime is not None:
            line += (f"; step {last['step']}: {regime} (regime dividers at {entropy_ratio:.0%} of step {first['step']}'s H(Z|X) "
                     f"and {mi_ratio:.0%} of its MI)")
        lines.append(line)
    for key, what in (("collapse/warning_template", "template-collapse warning (MI fell while H(Z|X) held: diverse-looking "
                                                    "reasoning that ignores the input)"),
                      ("collapse/warning_low_entropy", "low-entropy-collapse warning (MI and H(Z|X) both fell)")):
        flagged = _flag_steps(rows, key)
        if flagged:
            lines.append(f"{what} at steps {_step_list(flagged)}")
    return lines


def _sources_table(offline: list[dict[str, Any]]) -> str:
    """Which weights scored which rollouts for each offline row (a step filed by guess says so)."""
    body = []
    for r in offline:
        how = "" if r.get("step_from") in (None, "rollouts") else " (filed after its checkpoint: the rollouts file names no step)"
        body.append(f"<tr><td>{html.escape(str(r.get('step')))}{html.escape(how)}</td><td><code>{html.escape(str(r.get('checkpoint', '–')))}"
                    f"</code></td><td><code>{html.escape(str(r.get('rollouts', '–')))}</code></td></tr>")
    if not body:
        return ""
    return ("<h3>Offline recomputation: sources</h3><table><tr><th>step</th><th>checkpoint (weights)</th><th>rollouts</th></tr>"
            + "".join(body) + "</table>")


def _flag_steps(rows: list[dict[str, Any]], key: str) -> list[int]:
    return [int(r["step"]) for r in rows if isinstance(r.get(key), (int, float)) and r[key] > 0]


SKIPPED_KEY = "collapse/skipped_no_reasoning"


def skipped_no_reasoning_steps(rows: list[dict[str, Any]]) -> list[int]:
    """Steps at which the collapse diagnostic ran but skipped MI because no turn had reasoning."""
    return sorted(set(_flag_steps(rows, SKIPPED_KEY)))


def _step_list(steps: list[int], limit: int = 8) -> str:
    shown = ", ".join(map(str, steps[:limit]))
    return shown + (f", ... ({len(steps)} steps)" if len(steps) > limit else "")


def skipped_note(steps: list[int]) -> str:
    """Why a run with the collapse diagnostic on has no MI metrics: the reasoning was empty."""
    return (f"the collapse diagnostic ran (steps {_step_list(steps)}) but every turn's <think> reasoning was empty "
            f"({SKIPPED_KEY}=1), so MI, entropy and retrieval were skipped. For replies without reasoning, score the "
            "whole reply: ragen run ... diagnostics=[collapse] diagnostics_config.collapse.z_source=response "
            "(or 'auto'), or afterwards ragen diagnose RUN_DIR --checkpoint step_N --z-source response (it reads the rollouts "
            "the run saved with save_rollouts=true, or a file given with --rollouts FILE)")


def write_html(run_dir: Path, rows: list[dict[str, Any]], offline: list[dict[str, Any]], pngs: list[Path], missing: list[str]) -> Path:
    """``RUN_DIR/diagnostics.html``: summary tables, warnings, and the PNGs inlined as base64."""
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>RAGEN collapse diagnostics</title>",
        ("<style>body{font-family:sans-serif;max-width:980px;margin:2em auto}table{border-collapse:collapse}"
         "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}img{max-width:100%}</style></head><body>"),
        (f"<h1>Reasoning-collapse diagnostics</h1><p>Run: <code>{html.escape(str(run_dir))}</code>; "
         f"{len(rows)} logged steps.</p>"),
        ("<p>I(X;Z) measures how much the reasoning depends on the input; H(Z|X) how diverse it is for a fixed "
         "input. High entropy with MI near zero and retrieval near chance is <b>template collapse</b>.</p>"),
    ]
    for key, label in (("collapse/warning_template", "template-collapse warning"), ("collapse/warning_low_entropy", "low-entropy-collapse warning")):
        steps = _flag_steps(rows, key)
        if steps:
            parts.append(f"<p><b>{label}</b> at steps {', '.join(map(str, steps))}</p>")
    skipped = skipped_no_reasoning_steps(rows)  # during training; an offline attempt's skip is its own line below
    recomputed = sorted({int(r["step"]) for r in offline if not r.get(SKIPPED_KEY) and isinstance(r.get("step"), (int, float))})
    if skipped and recomputed:  # the advice was taken: say what the recomputation measured instead of repeating it
        parts.append(f"<p><b>collapse metrics skipped during training</b> at steps {html.escape(_step_list(skipped))} (every "
                     f"turn's &lt;think&gt; reasoning was empty); the offline recomputation below measured steps "
                     f"{html.escape(_step_list(recomputed))}</p>")
    elif skipped:
        parts.append(f"<p><b>collapse metrics skipped</b>: {html.escape(skipped_note(skipped))}</p>")
    offline_skipped = [step for step in skipped_no_reasoning_steps(offline) if step not in recomputed]
    if offline_skipped:
        parts.append(f"<p><b>offline recomputation skipped</b> at steps {html.escape(_step_list(offline_skipped))}: every turn's "
                     "&lt;think&gt; reasoning in those rollouts was empty (recompute with --z-source response to score the whole reply)</p>")
    errors = _flag_steps(rows, "collapse/error")
    if errors:
        parts.append(f"<p><b>diagnostic errors</b> at steps {', '.join(map(str, errors))} (see the training log)</p>")
    parts.append(_summary_table(rows, "Training-time measurements"))
    parts.append(_summary_table(offline, "Offline recomputation"))
    parts.append(_sources_table(offline))
    for png in pngs:
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        parts.append(f"<h3>{html.escape(png.stem)}</h3><img alt='{html.escape(png.stem)}' src='data:image/png;base64,{data}'>")
    if missing:
        parts.append("<p><small>not logged in this run: " + html.escape(", ".join(missing)) + "</small></p>")
    parts.append("</body></html>")
    out = run_dir / "diagnostics.html"
    out.write_text("\n".join(parts), encoding="utf-8")
    return out


def load_rows(run_dir: str | Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The training-time rows and the offline rows of ``run_dir`` (:func:`read_metrics` each)."""
    return read_metrics(Path(run_dir) / "metrics.jsonl"), read_metrics(Path(run_dir) / OFFLINE_FILE)


def build_report(run_dir: str | Path, *, mi_ratio: float = 0.5, entropy_ratio: float = 0.5,
                 metrics: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None = None) -> list[Path]:
    """Draw the plots and write the HTML report of ``run_dir``.

    Args:
        run_dir: A RAGEN run directory with ``metrics.jsonl``.
        mi_ratio: MI divider of the regime plot, as a fraction of the first measured MI.
        entropy_ratio: Entropy divider, as a fraction of the first measured H(Z|X).
        metrics: :func:`load_rows` of ``run_dir`` when the caller has read them (read once, warned once).

    Returns:
        Paths of the written PNGs followed by the HTML file.

    Raises:
        RagenError: The directory is missing or holds no metrics (neither ``metrics.jsonl`` rows
            nor offline diagnostics).
    """
    plt = _plt()
    with plt.rc_context({"text.parse_math": False}):  # titles and labels are text: a '$' in a run's name is no mathtext
        return _build_report(Path(run_dir), mi_ratio, entropy_ratio, metrics)


def _build_report(run: Path, mi_ratio: float, entropy_ratio: float,
                  metrics: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None) -> list[Path]:
    from ragen_core.cli.plot import remove_stale, warn_nonfinite

    if run.is_file():
        raise RagenError(f"{run} is a file, not a run directory", ["pass the folder a training run wrote (it holds metrics.jsonl)"])
    if not run.is_dir():
        raise RagenError(f"run directory {run} does not exist", ["pass the folder a training run wrote (it holds metrics.jsonl), e.g. runs/<name>"])
    rows, offline = metrics if metrics is not None else load_rows(run)
    if not rows and not offline:
        if not (run / "config.yaml").is_file():  # not a run's folder at all: training advice would mislead
            raise RagenError(f"{run} is not a run directory (no config.yaml, no metrics.jsonl)",
                             ["pass the folder a training run wrote, e.g. runs/<name>"])
        raise RagenError(
            f"{run / 'metrics.jsonl'} is missing or has no metric rows",
            ["train with the collapse diagnostic enabled, or recompute offline: ragen diagnose RUN_DIR --checkpoint step_N --rollouts FILE"],
        )
    plots = run / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    missing: list[str] = []
    if _regime_plot(rows, offline, plots / "collapse_regimes.png", mi_ratio, entropy_ratio):
        written.append(plots / "collapse_regimes.png")
    else:
        missing.append("collapse metrics (regime plot)")
    specs = _curve_specs()
    warn_nonfinite(rows, [key for *_, keys in specs for key, _, _ in keys])
    for filename, title, ylabel, keys in specs:
        if _curves(rows, plots / filename, title, ylabel, keys):
            written.append(plots / filename)
        else:
            missing.append(title)
    remove_stale(plots, written, record=".ragen-diagnose.json")
    written.append(write_html(run, rows, offline, written, missing))
    return written
