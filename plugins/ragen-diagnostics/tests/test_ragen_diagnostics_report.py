"""Report (plots + HTML), offline recomputation from a checkpoint, and ``ragen diagnose``."""

from __future__ import annotations

import base64
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from ragen_diagnostics.report import build_report, read_metrics

from ragen_core.cli.main import main as ragen_main
from ragen_core.errors import RagenError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_metrics(run: Path, with_filter: bool = True) -> None:
    """A 50-step run whose MI decays toward 0 while H(Z|X) holds (template collapse)."""
    run.mkdir(parents=True, exist_ok=True)
    lines = []
    for step in range(1, 51):
        row: dict[str, Any] = {"step": step, "train/reward": step / 50}
        if with_filter:
            row["rollout/in_group_reward_std"] = 0.5 * math.exp(-step / 20)
            row["rollout/filter_kept_ratio"] = 0.9 - step / 200
        if step == 1 or step % 5 == 0:
            mi = 0.4 * math.exp(-step / 12)
            for fam in ("collapse_trajectory_sample", "collapse_first_turn_sample"):
                row.update({
                    f"{fam}/mi_estimate": mi,
                    f"{fam}/mi_upper_bound": math.log(8),
                    f"{fam}/conditional_entropy_est": 1.2 + 0.01 * math.sin(step),
                    f"{fam}/reasoning_entropy_est": 1.2 + mi,
                    f"{fam}/retrieval_accuracy": 0.125 + mi,
                    f"{fam}/retrieval_chance_level": 0.125,
                })
            row["collapse/warning_template"] = 1.0 if mi < 0.2 else 0.0
            row["collapse/error"] = 0.0
        lines.append(json.dumps(row))
    lines.insert(3, "{not json")  # a torn line must not break the report
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_report_writes_pngs_and_self_contained_html(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_metrics(run)
    written = build_report(run)
    names = [p.name for p in written]
    assert names == ["collapse_regimes.png", "collapse_mi.png", "collapse_entropy.png", "collapse_retrieval.png",
                     "reward_variance.png", "filter_kept.png", "diagnostics.html"]
    for png in written[:-1]:
        assert png.parent == run / "plots" and png.read_bytes().startswith(PNG_MAGIC)
    page = (run / "diagnostics.html").read_text()
    images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    assert len(images) == 6 and all(base64.b64decode(i).startswith(PNG_MAGIC) for i in images)
    assert "src='http" not in page and "<script" not in page  # nothing fetched from elsewhere
    assert "template-collapse warning" in page and "at steps 10, 15," in page
    assert "not logged" not in page


def test_report_skips_curves_that_were_not_logged(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_metrics(run, with_filter=False)
    names = [p.name for p in build_report(run)]
    assert "reward_variance.png" not in names and "filter_kept.png" not in names
    assert "collapse_regimes.png" in names
    assert "not logged in this run" in (run / "diagnostics.html").read_text()


def test_offline_metrics_alone_still_give_a_regime_plot(tmp_path: Path) -> None:
    from ragen_diagnostics.offline import save_offline_metrics

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "rollout/filter_kept_ratio": 1.0}) + "\n")
    save_offline_metrics(run, 10, {"collapse_trajectory_sample/mi_estimate": 0.1,
                                   "collapse_trajectory_sample/conditional_entropy_est": 1.0}, "ckpt")
    names = [p.name for p in build_report(run)]
    assert names == ["collapse_regimes.png", "filter_kept.png", "diagnostics.html"]


def test_read_metrics_skips_malformed_lines(tmp_path: Path) -> None:
    write_metrics(tmp_path)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert len(rows) == 50 and [r["step"] for r in rows] == list(range(1, 51))


def test_a_step_diagnosed_twice_is_read_once_with_its_newest_row(tmp_path: Path) -> None:
    """`ragen diagnose --checkpoint` run twice for one step appends two rows: both were plotted."""
    offline = tmp_path / "diagnostics_offline.jsonl"
    offline.write_text("".join(json.dumps(r) + "\n" for r in [{"step": 6, "m": 1.0}, {"step": 3, "m": 2.0}, {"step": 6, "m": 3.0},
                                                               {"step": True, "m": 4.0}]))
    assert read_metrics(offline) == [{"step": 3, "m": 2.0}, {"step": 6, "m": 3.0}]  # a bool is no step


def test_missing_or_empty_run_dir_is_a_ragen_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RagenError, match="does not exist"):
        build_report(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "metrics.jsonl").write_text("")
    with pytest.raises(RagenError) as info:
        build_report(tmp_path / "empty")
    assert "hint:" in str(info.value)
    assert ragen_main(["diagnose", str(tmp_path / "nope")]) == 2
    assert ragen_main(["diagnose", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert "RagenError" in err and "hint:" in err and "Traceback" not in err


def test_cli_builds_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    write_metrics(run)
    assert ragen_main(["diagnose", str(run)]) == 0
    assert str(run / "diagnostics.html") in capsys.readouterr().out


def test_diagnose_reads_damaged_metrics_as_ragen_plot_does(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           caplog: pytest.LogCaptureFixture) -> None:
    """diagnose skipped damaged lines and NaN estimates in silence, and read a file of JSON arrays as "no metrics";
    ragen plot named them (helper-62's walk)."""
    from ragen_core.testing.run_helpers import one_line_error

    run = tmp_path / "run"
    write_metrics(run)  # line 4 is '{not json'
    lines = (run / "metrics.jsonl").read_text().splitlines()
    row = json.loads(lines[10])  # step 10
    row["collapse_trajectory_sample/mi_estimate"] = float("nan")
    lines[10] = json.dumps(row)
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    assert ragen_main(["diagnose", str(run)]) == 0
    damaged = [r.getMessage() for r in caplog.records if "not JSON rows" in r.getMessage()]
    assert damaged == [f"{run / 'metrics.jsonl'}: 1 line(s) not JSON rows, skipped (line 4)"]  # named once, not per read
    err = capsys.readouterr().err
    assert "warning: collapse_trajectory_sample/mi_estimate is NaN or infinite at step 10: drawn as gaps" in err
    (run / "metrics.jsonl").write_text("[1, 2]\n[3]\n")
    assert ragen_main(["diagnose", str(run)]) == 2
    assert one_line_error(capsys.readouterr().err).startswith(f"ConfigError: {run / 'metrics.jsonl'} line 1 is a JSON list, not an object")


def test_a_figure_the_run_no_longer_logs_is_removed_not_left_to_pass_for_its_own(tmp_path: Path,
                                                                                capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    write_metrics(run)
    (run / "plots").mkdir()
    (run / "plots" / "summary.png").write_bytes(b"ragen plot's, not diagnose's")
    assert "filter_kept.png" in {p.name for p in build_report(run)}
    capsys.readouterr()
    write_metrics(run, with_filter=False)  # the folder reused for a run without a filter
    written = {p.name for p in build_report(run)}
    assert "filter_kept.png" not in written and not (run / "plots" / "filter_kept.png").exists()
    assert not (run / "plots" / "reward_variance.png").exists()
    assert f"note: removed {run / 'plots' / 'filter_kept.png'}: drawn earlier" in capsys.readouterr().err
    assert (run / "plots" / "summary.png").read_bytes() == b"ragen plot's, not diagnose's"  # another command's figure stays


def test_diagnose_is_a_command_this_distribution_adds_through_the_hook() -> None:
    import importlib.util
    import subprocess
    import sys
    from importlib.metadata import entry_points

    (ep,) = [ep for ep in entry_points(group="ragen_core.commands") if ep.name == "diagnose"]
    assert ep.value == "ragen_diagnostics.cli" and ep.dist is not None and ep.dist.name == "ragen-diagnostics"
    assert importlib.util.find_spec("ragen_core.cli.diagnose") is None  # the core holds no copy
    # `ragen --help` lists it from that metadata without importing this package
    code = ("import contextlib, io, sys\nfrom ragen_core.cli.main import main\nbuf = io.StringIO()\n"
            "with contextlib.redirect_stdout(buf):\n    try:\n        main(['--help'])\n    except SystemExit:\n        pass\n"
            "print('    diagnose ' in buf.getvalue(), any(m.startswith('ragen_diagnostics') for m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["True", "False"], out.stderr


# -- offline: tiny model + synthetic trajectories ------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread() -> Any:
    """Tiny models on shared, oversubscribed CI cores run far faster single-threaded (OpenMP
    spin-waits dominate small kernels); restored afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def run_with_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, list[Any]]:
    import torch
    import transformers

    from ragen_core.rollout.types import Trajectory, Turn
    from ragen_core.seeding import make_rng

    run = tmp_path_factory.mktemp("offline") / "run"
    write_metrics(run)
    torch.manual_seed(3)
    cfg = transformers.Qwen2Config(vocab_size=200, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    model = transformers.Qwen2ForCausalLM(cfg).eval()
    model.save_pretrained(run / "checkpoints" / "step_5")
    rng = make_rng("offline-rollouts")
    trajectories = []
    for g in range(3):
        prompt = rng.integers(1, 200, size=12).tolist()
        for m in range(3):
            turns = []
            for t in range(2):
                z = rng.integers(1, 200, size=int(rng.integers(2, 6))).tolist()
                turns.append(Turn(prompt_ids=prompt + [t + 1] * t, response_ids=[1, 2], response_text="<think>r</think>",
                                  reasoning="r", reasoning_ids=z, reward=0.5))
            trajectories.append(Trajectory(env="e", tag="E", group_id=g, member=m, seed=g, env_id=3 * g + m, turns=turns))
    (run / "rollouts").mkdir()
    # step 6's rollouts, sampled by the weights saved after step 5 (and scored by them before step 6's update)
    (run / "rollouts" / "step_6.jsonl").write_text("\n".join(json.dumps(t.to_dict()) for t in trajectories) + "\n")
    return run, model, trajectories


def test_diagnose_offline_matches_the_live_diagnostic(run_with_checkpoint: tuple[Path, Any, list[Any]]) -> None:
    from ragen_diagnostics.diagnostic import CollapseDiagnostic
    from ragen_diagnostics.offline import diagnose_offline, load_trajectories

    from ragen_core.trainer.context import TrainContext

    run, model, trajectories = run_with_checkpoint
    loaded = load_trajectories(run / "rollouts" / "step_6.jsonl")
    assert loaded == trajectories  # JSON round trip of the rollout records
    offline = diagnose_offline(run / "checkpoints" / "step_5", run / "rollouts" / "step_6.jsonl")
    live = CollapseDiagnostic(compute_freq=1).ragen_on_rollout_end(trajectories, 6, TrainContext(config=None, run_dir=run, model=model))
    assert live is not None and offline["collapse/error"] == 0.0
    for key in ("collapse_first_turn_sample/mi_estimate", "collapse_trajectory_sample/conditional_entropy_est",
                "collapse_trajectory_sample/retrieval_accuracy", "collapse/valid_thinking_rate"):
        assert offline[key] == pytest.approx(live[key], abs=1e-5)
    assert offline["collapse_first_turn_sample/num_columns"] == 3.0


def test_loading_the_checkpoint_prints_no_transformers_bar(run_with_checkpoint: tuple[Path, Any, list[Any]],
                                                            capfd: pytest.CaptureFixture[str]) -> None:
    """Between 'diagnose [2/5] loading checkpoint' and '[3/5]' transformers drew its 'Loading weights'
    bar (carriage returns in a log), where a run's and ragen eval's loads of a local folder draw none."""
    from ragen_diagnostics.offline import load_model

    run, _, _ = run_with_checkpoint
    load_model(run / "checkpoints" / "step_5")
    out, err = capfd.readouterr()
    assert "Loading weights" not in out + err and "\r" not in err


def test_cli_recomputes_offline_then_reports(run_with_checkpoint: tuple[Path, Any, list[Any]], capsys: pytest.CaptureFixture[str]) -> None:
    run, _, _ = run_with_checkpoint
    assert ragen_main(["diagnose", str(run), "--checkpoint", "step_5", "--num-samples", "all"]) == 0
    rows = read_metrics(run / "diagnostics_offline.jsonl")
    # step 6's logged metrics are what step_5's weights measure on step 6's rollouts: filed as step 6
    assert rows and rows[-1]["step"] == 6 and rows[-1]["collapse_trajectory_sample/num_rows"] == 18.0
    assert (run / "plots" / "collapse_regimes.png").is_file()
    page = (run / "diagnostics.html").read_text()
    assert "Offline recomputation" in page
    captured = capsys.readouterr()
    assert "offline metrics of step 6 appended" in captured.out
    stages = [line for line in captured.err.splitlines() if line.startswith("diagnose [")]  # progress on stderr
    assert [line[:14] for line in stages] == [f"diagnose [{i}/5]" for i in range(1, 6)], captured.err
    assert "collapse_first_turn_sample" in stages[2] and "collapse_trajectory_sample" in stages[3]
    assert ragen_main(["diagnose", str(run), "--checkpoint", "step_99"]) == 2
    # --rollouts alone finds the checkpoint that sampled them (the step before's)
    assert ragen_main(["diagnose", str(run), "--rollouts", str(run / "rollouts" / "step_6.jsonl")]) == 0
    lines = (run / "diagnostics_offline.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [6, 6]  # appended; the report reads the newest
    assert [r["step"] for r in read_metrics(run / "diagnostics_offline.jsonl")] == [6]
    assert "offline metrics of step 6 appended" in capsys.readouterr().out
    assert ragen_main(["diagnose", str(run), "--rollouts", str(run / "missing.jsonl"), "--checkpoint", "step_5"]) == 2


def test_the_readme_names_the_plots_ragen_diagnose_writes():
    """README's run-directory list names diagnose's plot files (it said plots/collapse_*.png, while
    a run without collapse metrics gets reward_variance.png and filter_kept.png only)."""
    import re
    from pathlib import Path

    from ragen_diagnostics.report import _curve_specs

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text(encoding="utf-8")
    entry = re.search(r"diagnostics\.html\s+written by ragen diagnose(.*?)diagnostics_offline", readme, re.S)
    assert entry is not None
    text = entry.group(1)
    for name, *_ in _curve_specs():
        stem = name.removesuffix(".png")
        assert name in text or stem.removeprefix("collapse") in text, name
    assert "_regimes" in text  # collapse_regimes.png


def test_the_no_reasoning_note_says_what_the_offline_route_needs():
    """The note offered 'ragen diagnose RUN_DIR --checkpoint step_N', which fails on a run that
    saved no rollouts: it says what that route reads."""
    from ragen_diagnostics.report import skipped_note

    note = skipped_note([1, 2])
    assert "--checkpoint step_N --z-source response" in note
    assert "save_rollouts=true" in note and "--rollouts FILE" in note


def test_one_measurement_draws_no_regime_dividers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a single offline measurement the dividers sat on the point itself (the middle of a range
    of one), so its quadrant meant nothing; from two measurements on they are relative to the first."""
    from matplotlib.axes import Axes
    from ragen_diagnostics.report import _regime_plot

    drawn: list[str] = []
    for name in ("axvline", "axhline", "set_title"):
        real = getattr(Axes, name)
        monkeypatch.setattr(Axes, name, lambda self, *a, _name=name, _real=real, **k: (drawn.append(f"{_name}:{a[0]}"), _real(self, *a, **k))[1])

    def offline(step: int, mi: float) -> dict[str, Any]:
        return {"step": step, "collapse_trajectory_sample/mi_estimate": mi, "collapse_trajectory_sample/conditional_entropy_est": 1.0}

    assert _regime_plot([], [offline(10, 0.1)], tmp_path / "one.png", 0.5, 0.5)
    assert drawn == ["set_title:Reasoning regimes (one measurement: regimes compare later ones with the first, so no dividers)"]
    drawn.clear()
    assert _regime_plot([], [offline(10, 0.1), offline(20, 0.02)], tmp_path / "two.png", 0.5, 0.5)
    assert drawn == ["axvline:0.5", "axhline:0.05", "set_title:Reasoning regimes (dividers at 50% / 50% of the first measurement)"]


def test_diagnose_prints_where_the_run_ended_and_its_collapse_warnings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ragen diagnose printed only the paths it wrote: what the run's MI, H(Z|X) and retrieval did,
    and whether it collapsed, was in the HTML alone."""
    run = tmp_path / "run"
    write_metrics(run)  # MI decays toward 0 while H(Z|X) holds
    assert ragen_main(["diagnose", str(run)]) == 0
    out = capsys.readouterr().out.splitlines()
    mi0, mi1 = 0.4 * math.exp(-1 / 12), 0.4 * math.exp(-50 / 12)
    for label in ("trajectory sample", "first-turn sample"):
        line = next(x for x in out if x.startswith(f"{label} (steps 1 -> 50): "))
        assert f"I(X;Z) {mi0:.3f} -> {mi1:.3f} nats/token (at most log N = {math.log(8):.3f})" in line
        assert f"retrieval {0.125 + mi1:.3f} (chance 0.125)" in line
        assert "step 50: template collapse" in line
    warned = [x for x in out if x.startswith("template-collapse warning")]
    assert len(warned) == 1 and "at steps 10, 15, 20" in warned[0]


def test_the_summary_names_each_regime_and_retrieval_at_chance() -> None:
    from ragen_diagnostics.report import summary_lines

    fam = "collapse_trajectory_sample"
    first = {"step": 1, f"{fam}/mi_estimate": 0.4, f"{fam}/conditional_entropy_est": 1.0}
    for mi, h, regime in ((0.3, 0.9, "diverse & grounded"), (0.3, 0.2, "compressed & grounded"),
                          (0.1, 0.9, "template collapse"), (0.1, 0.2, "low-entropy collapse")):
        last = {"step": 5, f"{fam}/mi_estimate": mi, f"{fam}/conditional_entropy_est": h,
                f"{fam}/retrieval_accuracy": 0.25, f"{fam}/retrieval_chance_level": 0.25}
        (line,) = summary_lines([first, last])
        assert line.startswith("trajectory sample (steps 1 -> 5)") and f"step 5: {regime} (" in line
        assert "at chance: the reasoning does not tell its prompt" in line
    (single,) = summary_lines([first])  # one measurement: nothing to compare with, no regime
    assert single.startswith("trajectory sample (step 1)") and "step 1:" not in single
    assert summary_lines([{"step": 1, "train/reward": 0.5}]) == []


def test_the_readme_names_every_metric_the_diagnostic_logs():
    """The README listed the namespaces only (`collapse_trajectory_sample/<m>`): no metric name a
    researcher finds in metrics.jsonl, nor what it means, was in the docs."""
    import numpy as np
    from ragen_diagnostics.estimators import EmaTracker, collapse_metrics

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    estimate = collapse_metrics(np.array([[-1.0, -3.0], [-2.5, -0.5], [-1.2, -2.0]]), np.array([2, 2, 3]),
                                np.array([0, 1, 0]), [(1,), (2,)], std_eps=1e-3, ema=EmaTracker(decay=0.9))
    names = {re.sub(r"@\d+$", "@k", key) for key in estimate.metrics}
    assert "mi_estimate" in names and "retrieval_accuracy@k" in names
    assert [name for name in sorted(names) if f"`{name}`" not in readme] == []
    for key in ("valid_thinking_rate", "skipped_no_reasoning", "warning_template", "warning_low_entropy"):
        assert f"`{key}`" in readme


def test_equal_family_curves_are_drawn_once_under_both_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A single-turn env's first-turn and trajectory estimates are one series: the second line was drawn
    exactly over the first, hidden but listed in the legend; now one line names both. Unequal ones stay two."""
    from matplotlib.axes import Axes
    from ragen_diagnostics.report import _curves

    labels: list[str] = []
    real = Axes.plot
    monkeypatch.setattr(Axes, "plot", lambda self, *a, **k: (labels.append(k.get("label")), real(self, *a, **k))[1])
    rows = [{"step": s, "a/acc": 0.5 + s / 10, "b/acc": 0.5 + s / 10 + 1e-16, "c/acc": 0.1} for s in (1, 2, 3)]
    keys = [("a/acc", "accuracy (first turn)", "-"), ("b/acc", "accuracy (trajectory)", "-"), ("c/acc", "chance", ":")]
    assert _curves(rows, tmp_path / "r.png", "Retrieval", "top-1 accuracy", keys)
    assert labels == ["accuracy (first turn) = accuracy (trajectory)", "chance"]


def test_diagnose_summarises_offline_measurements_of_a_run_trained_without_the_diagnostic(tmp_path: Path,
                                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The usual offline route (a run trained without diagnostics, then diagnosed from its checkpoints):
    its training rows hold no MI estimate, yet the summary read them instead of the offline rows and
    printed nothing under the regime plot it had drawn from those."""
    from ragen_diagnostics.offline import save_offline_metrics

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "train/reward": s / 20}) + "\n" for s in range(1, 21)))
    for step, mi in ((10, 0.4), (20, 0.1)):
        save_offline_metrics(run, step, {"collapse_trajectory_sample/mi_estimate": mi,
                                         "collapse_trajectory_sample/conditional_entropy_est": 1.0}, "ckpt")
    assert ragen_main(["diagnose", str(run)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert any(line.endswith("collapse_regimes.png") for line in out)
    (line,) = [x for x in out if x.startswith("trajectory sample (steps 10 -> 20): ")]
    assert "I(X;Z) 0.400 -> 0.100 nats/token" in line and "step 20: template collapse" in line
