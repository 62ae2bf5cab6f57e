"""Plots of a run: written by the run itself, labelled, each series once, one scale per loss."""

from __future__ import annotations

import json

import pytest

from ragen_core.cli.plot import plan, plot_run


def _rows(steps: int = 3, **series: list[float]) -> list[dict]:
    return [{"step": s + 1, **{k.replace("__", "/"): v[s] for k, v in series.items()}} for s in range(steps)]


GRPO = _rows(
    train__success=[0.1, 0.2, 0.3], train__bandit__success=[0.1, 0.2, 0.3],  # one env: the per-env copy repeats the aggregate
    val_env__success=[0.0, 0.5, 0.5], train__reward=[0.1, 0.4, 0.9],
    actor__entropy=[5.5, 5.4, 5.0], actor__pg_loss=[0.01, -0.02, 0.0], actor__grad_norm=[120.0, 80.0, 30.0],
    critic__score__mean=[0.1, 0.4, 0.9], critic__advantages__mean=[0.0, 0.0, 0.0],  # GRPO logs these under critic/ too
    train__bandit__action_is_valid=[0.5, 0.7, 0.9],
)
for row in GRPO:  # "val-env" cannot be spelt as a keyword
    row["val-env/success"] = row.pop("val_env/success")


def _panels(rows: list[dict]) -> dict[str, list[str]]:
    return {panel.name: keys for panel, keys in plan(rows)}


def test_a_series_equal_to_another_is_drawn_once_and_aggregates_win():
    panels = _panels(GRPO)
    assert panels["success"] == ["train/success", "val-env/success"]
    two_envs = _rows(train__success=[0.2, 0.3, 0.4], train__a__success=[0.1, 0.2, 0.3], train__b__success=[0.3, 0.4, 0.5])
    assert _panels(two_envs)["success"] == ["train/a/success", "train/b/success", "train/success"]  # different: all kept


def test_series_equal_up_to_rounding_are_drawn_once():
    """On Bandit (one turn, every group with its own prompt) the first-turn and trajectory collapse
    estimates are the same numbers summed in another order (0.558496828114148 vs 0.5584968281141481):
    collapse.png drew each of them twice."""
    mi = [0.558496828114148, 0.32020802898611356, 0.719]
    rows = _rows(collapse_first_turn_sample__mi_estimate=mi,
                 collapse_trajectory_sample__mi_estimate=[v * (1 + 2e-16) for v in mi[:2]] + [mi[2]])
    assert rows[0]["collapse_trajectory_sample/mi_estimate"] != mi[0]  # differs in its last bit
    assert _panels(rows)["collapse"] == ["collapse_first_turn_sample/mi_estimate"]
    apart = _rows(collapse_first_turn_sample__mi_estimate=mi, collapse_trajectory_sample__mi_estimate=[v + 1e-6 for v in mi])
    assert len(_panels(apart)["collapse"]) == 2  # a real difference is still drawn


def test_an_envs_info_metrics_get_a_figure_of_their_own_and_stay_out_of_success(monkeypatch, tmp_path):
    """``train/<tag>/info/<key>`` (an env's declared info_metrics): one axes each; an info key named
    ``success`` is the env's per-action value, not the episode success rate."""
    rows = [{**row, "train/bandit/info/expected_reward": 0.1 * row["step"], "val-env/bandit/info/chose_best_arm": 0.5,
             "train/bandit/info/success": 0.2 * row["step"]} for row in GRPO]
    panels = _panels(rows)
    assert panels["success"] == ["train/success", "val-env/success"]
    assert sorted(panels["env_info"]) == ["train/bandit/info/expected_reward", "train/bandit/info/success", "val-env/bandit/info/chose_best_arm"]
    axes = _drawn_axes(monkeypatch, tmp_path, rows)
    assert sorted(line for ax in axes["env_info.png"] for line in ax["lines"]) == sorted(panels["env_info"])


def test_a_grpo_run_has_no_critic_panel_and_a_ppo_run_has_one():
    assert "critic" not in _panels(GRPO)
    ppo = [dict(row, **{"critic/vf_loss": 0.5 / row["step"]}) for row in GRPO]
    assert _panels(ppo)["critic"] == ["critic/vf_loss"]


def test_the_collapse_figure_draws_the_estimates_with_units_not_the_bookkeeping():
    """collapse.png drew the first 12 collapse keys alphabetically (error, counts, marginal std, ...):
    MI, retrieval and H(Z) never appeared."""
    book = {f"collapse{k}": [1.0, 2.0, 3.0 + i] for i, k in enumerate(
        ("__error", "__valid_thinking_rate", "_first_turn_sample__num_total", "_first_turn_sample__marginal_std",
         "_first_turn_sample__mi_defined", "_first_turn_sample__num_columns", "_first_turn_sample__mi_upper_bound",
         "_first_turn_sample__retrieval_chance_level", "_first_turn_sample__mi_zscore_ema", "_trajectory_sample__num_rows",
         "_trajectory_sample__num_columns", "_trajectory_sample__mi_zscore", "_first_turn_sample__marginal_mean"))}
    estimates = {"collapse_first_turn_sample__mi_estimate": [0.6, 0.4, 0.1], "collapse_first_turn_sample__retrieval_accuracy": [1.0, 0.8, 0.5],
                 "collapse_first_turn_sample__conditional_entropy_est": [1.0, 1.1, 1.2],
                 "collapse_trajectory_sample__mi_estimate": [0.5, 0.3, 0.2]}
    panel, keys = next((p, k) for p, k in plan(_rows(**book, **estimates)) if p.name == "collapse")
    assert sorted(keys) == sorted(k.replace("__", "/") for k in estimates)
    from ragen_core.cli.plot import LABELS

    assert LABELS["collapse_first_turn_sample/mi_estimate"] == "I(X;Z) (first turn, nats/token)"


def test_losses_get_one_axes_each_with_the_policy_loss_first(monkeypatch, tmp_path):
    panel, keys = next((p, k) for p, k in plan(GRPO) if p.name == "actor_loss")
    assert panel.own_scale and keys == ["actor/pg_loss", "actor/entropy", "actor/grad_norm"]
    axes = _drawn_axes(monkeypatch, tmp_path, GRPO)
    assert [len(ax["lines"]) for ax in axes["actor_loss.png"]] == [1, 1, 1]
    assert [ax["ylabel"] for ax in axes["actor_loss.png"]] == ["policy-gradient loss", "entropy (nats per token)", "actor gradient norm (pre-clip)"]


def test_an_all_zero_policy_loss_is_drawn_not_the_kl_loss_it_equals_and_the_summary_names_it(monkeypatch, tmp_path):
    """A step whose advantages were all zero logs pg_loss 0.0, as the (disabled) KL loss: the
    policy loss stayed, and the summary's loss axes is titled with what it draws (it said
    'actor_loss' over an entropy curve)."""
    rows = [dict(row, **{"actor/pg_loss": 0.0, "actor/kl_loss": 0.0}) for row in GRPO]
    assert _panels(rows)["actor_loss"][0] == "actor/pg_loss"
    from matplotlib.figure import Figure

    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    titles: dict[str, list[str]] = {}
    save = Figure.savefig

    def record(fig, path, *args, **kwargs):
        titles[str(path).rsplit("/", 1)[-1]] = [ax.get_title() for ax in fig.axes if ax.get_visible()]
        return save(fig, path, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    plot_run(tmp_path)
    assert titles["summary.png"] == ["success", "reward", "validity", "actor/pg_loss"]


def _drawn_axes(monkeypatch, tmp_path, rows) -> dict[str, list[dict]]:
    """Write ``rows`` as a run's metrics, plot it, and return the visible axes of every saved figure."""
    from matplotlib.figure import Figure

    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    seen: dict[str, list[dict]] = {}
    save = Figure.savefig

    def record(fig, path, *args, **kwargs):
        seen[str(path).rsplit("/", 1)[-1]] = [
            {"xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(), "lines": [line.get_label() for line in ax.get_lines()]}
            for ax in fig.axes if ax.get_visible()
        ]
        return save(fig, path, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    written = plot_run(tmp_path)
    assert sorted(p.name for p in written) == sorted(seen)
    return seen


def test_every_axes_is_labelled_and_no_series_is_drawn_twice(monkeypatch, tmp_path):
    axes = _drawn_axes(monkeypatch, tmp_path, GRPO)
    assert {"success.png", "reward.png", "actor_loss.png", "validity.png", "summary.png"} <= set(axes)
    assert "critic.png" not in axes
    for name, drawn in axes.items():
        for ax in drawn:
            assert ax["xlabel"] == "step" and ax["ylabel"], (name, ax)
            assert len(ax["lines"]) == len(set(ax["lines"])), (name, ax)
    assert axes["success.png"][0]["lines"] == ["train/success", "val-env/success"]
    assert [ax["ylabel"] for ax in axes["summary.png"]] == ["success rate", "reward per episode", "share of valid actions", "policy-gradient loss"]


@pytest.mark.parametrize("plots", ["1", "0"])
def test_a_run_draws_its_plots_when_it_ends(tmp_path, monkeypatch, capsys, plots):
    from ragen_core.config import load_config
    from ragen_core.testing.toy_env import register_toy_env
    from ragen_core.trainer.config import RunConfig
    from ragen_core.trainer.trainer import Trainer

    monkeypatch.setenv("RAGEN_PLOTS", plots)
    cfg = load_config(RunConfig, [], [f"env={register_toy_env()}", "env_config.length=3", "env_config.max_turns=1", "rollout.env_groups=2",
                                      "rollout.group_size=2", "sampling.train.max_new_tokens=8", "optim.mini_batch_size=4",
                                      "optim.micro_batch_size=2", "steps=1", "test_freq=0", "save_freq=0", "warm_start.enabled=false",
                                      "progress=false", f"run_dir={tmp_path / 'run'}"])
    Trainer(cfg).train()
    summary = tmp_path / "run" / "plots" / "summary.png"
    assert summary.is_file() is (plots == "1")
    assert (f"plots: {tmp_path / 'run' / 'plots'}" in capsys.readouterr().out) is (plots == "1")


def test_a_plot_stopped_while_it_is_written_leaves_no_cut_png(monkeypatch, tmp_path):
    """SIGTERM / Ctrl-C in the middle of savefig left a truncated summary.png behind."""
    from matplotlib.figure import Figure

    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in GRPO))
    real = Figure.savefig
    calls: list[int] = []

    def stopped_savefig(self, fname, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # the second figure: half written, then the signal
            with open(fname, "wb") as fh:
                fh.write(b"\x89PNG cut")
            raise KeyboardInterrupt
        return real(self, fname, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", stopped_savefig)
    with pytest.raises(KeyboardInterrupt):
        plot_run(tmp_path)
    pngs = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert len(pngs) == 1 and pngs[0].endswith(".png")  # the first figure, whole; nothing of the second, no temporary folder
    assert (tmp_path / "plots" / pngs[0]).read_bytes().startswith(b"\x89PNG\r\n")


def test_a_run_stopped_while_drawing_its_plots_says_how_to_draw_them(monkeypatch, tmp_path, capsys):
    """A SIGTERM after the last step, while the plots were drawn, ended with only "terminated (SIGTERM)"."""
    from ragen_core.cli import plot as plot_mod
    from ragen_core.errors import Terminated
    from ragen_core.trainer.loggers import JsonlLogger

    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in GRPO))

    def terminated(run_dir, out=None, rows=None):
        raise Terminated

    monkeypatch.setattr(plot_mod, "plot_run", terminated)
    monkeypatch.setenv("RAGEN_PLOTS", "1")
    with pytest.raises(Terminated):  # still stops the command (exit 143), after the line
        JsonlLogger(tmp_path).ragen_on_train_end()
    assert (f"plots not drawn (stopped while drawing them; metrics.jsonl and the checkpoints are kept): draw them with 'ragen plot {tmp_path}'"
            in capsys.readouterr().err)


def test_a_resume_that_changed_settings_is_marked_on_every_curve(monkeypatch, tmp_path):
    """Curves ran straight through a --resume that changed optim.lr: nothing showed where the
    settings changed (config_changes.jsonl knew)."""
    from matplotlib.figure import Figure

    (tmp_path / "config_changes.jsonl").write_text(
        json.dumps({"from_step": 3, "changed": {"optim.lr": [1e-3, 1e-4]}}) + "\n" + "torn{\n"
        + json.dumps({"from_step": 2, "changed": {"a": [1, 2], "b": [1, 2]}, "added": {"c": 1}}) + "\n")
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in GRPO))
    marks: dict[str, list[tuple[list[float], list[str]]]] = {}
    save = Figure.savefig

    def record(fig, path, *args, **kwargs):
        marks[str(path).rsplit("/", 1)[-1]] = [
            (sorted(line.get_xdata()[0] for line in ax.get_lines() if line.get_linestyle() == ":"), [t.get_text() for t in ax.texts])
            for ax in fig.axes if ax.get_visible() and ax.get_lines()]
        return save(fig, path, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    plot_run(tmp_path)
    assert marks and "summary.png" in marks
    for name, drawn in marks.items():
        for xs, texts in drawn:
            assert xs == [1.5, 2.5] and texts == [" resumed: optim.lr", " resumed: a, b +1"], name


def test_a_dollar_sign_in_the_run_name_is_text_not_mathtext(tmp_path):
    """A run folder 'tr_$^$' drew no plots ('ParseSyntaxException') and `ragen plot` crashed (helper-62's walk)."""
    run = tmp_path / "tr_$^$"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in GRPO))
    written = plot_run(run)
    assert written and all(p.is_file() and p.stat().st_size > 1000 for p in written)


def test_something_in_the_way_of_a_png_is_one_line(tmp_path, capsys):
    from ragen_core.cli.main import main
    from ragen_core.testing.run_helpers import one_line_error

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in GRPO))
    (run / "plots" / "summary.png").mkdir(parents=True)  # a folder where the summary PNG goes
    assert main(["plot", str(run)]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert line.startswith("ConfigError: cannot write the plots: ") and "summary.png" in line, line


def test_a_loss_that_is_not_finite_is_named_not_silently_a_gap(tmp_path, capsys):
    """An Infinity pg_loss at one step was only a gap in the line (helper-62's walk)."""
    rows = [dict(r) for r in GRPO]
    rows[1]["actor/pg_loss"] = float("inf")
    rows[2]["actor/pg_loss"] = float("nan")
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))  # json writes Infinity / NaN
    plot_run(run)
    err = capsys.readouterr().err
    assert "warning: actor/pg_loss is NaN or infinite at steps 2, 3: drawn as gaps" in err
    assert err.count("warning:") == 1  # the finite series say nothing


def test_plot_errors_name_what_was_given(tmp_path, capsys):
    """No --out given, yet the error said '--out RUN/plots'; a checkpoint folder was told it had no metrics (helper-62's walk)."""
    from ragen_core.cli.main import main
    from ragen_core.testing.run_helpers import one_line_error

    run = tmp_path / "run"
    (run / "checkpoints" / "step_3").mkdir(parents=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in GRPO))
    (run / "plots").write_text("not a folder")
    assert main(["plot", str(run)]) == 2
    assert one_line_error(capsys.readouterr().err) == f"ConfigError: {run / 'plots'} is a file where the run's plots folder goes"
    assert main(["plot", str(run / "checkpoints" / "step_3")]) == 2
    err = capsys.readouterr().err
    assert one_line_error(err) == f"ConfigError: {run / 'checkpoints' / 'step_3'} is a checkpoint; the metrics are its run's"
    assert f"hint: pass the run folder: ragen plot {run}" in err


def test_a_reused_out_folder_keeps_no_figure_of_another_run(tmp_path, capsys):
    """A PPO run's critic.png stayed in the --out folder a GRPO run was then drawn into, passing for its own (helper-62's walk)."""
    ppo = [dict(r, **{"critic/vf_loss": 1.0 / r["step"]}) for r in GRPO]
    out = tmp_path / "figures"
    for name, rows in (("ppo", ppo), ("grpo", GRPO)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out / "notes").mkdir(parents=True)
    (out / "mine.png").write_bytes(b"a user's own file")
    (out / "timing.png").write_bytes(b"a user's own figure, named as one of ragen plot's")  # this run draws no timing
    assert "critic.png" in {p.name for p in plot_run(tmp_path / "ppo", out)}
    capsys.readouterr()
    written = plot_run(tmp_path / "grpo", out)
    assert "critic.png" not in {p.name for p in written}
    assert not (out / "critic.png").exists()
    assert f"note: removed {out / 'critic.png'}: drawn earlier" in capsys.readouterr().err
    assert (out / "timing.png").read_bytes() == b"a user's own figure, named as one of ragen plot's"  # not drawn by ragen plot: kept
    assert sorted(p.name for p in out.iterdir()) == sorted([p.name for p in written] + [".ragen-plot.json", "mine.png", "notes", "timing.png"])
    # a figure an older version drew under a name no panel has now goes too; a damaged record names nothing outside
    (out / "old_panel.png").write_bytes(b"x")
    (tmp_path / "outside.png").write_bytes(b"x")
    (out / ".ragen-plot.json").write_text(json.dumps(["old_panel.png", "../outside.png", 3, "mine.png"]))
    (out / "mine.png").unlink()
    plot_run(tmp_path / "grpo", out)
    assert not (out / "old_panel.png").exists() and (tmp_path / "outside.png").exists()


def test_an_unreadable_metrics_file_is_a_read_error_not_a_write_error(tmp_path, capsys, monkeypatch):
    from pathlib import Path

    from ragen_core.cli.main import main
    from ragen_core.testing.run_helpers import one_line_error

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in GRPO))
    real = Path.read_text

    def refuse(self, *args, **kwargs):  # root reads any mode bits: simulate the permission error itself
        if self.name == "metrics.jsonl":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", refuse)
    assert main(["plot", str(run)]) == 2
    assert one_line_error(capsys.readouterr().err) == f"ConfigError: cannot read {run / 'metrics.jsonl'} (Permission denied)"


def test_a_torn_last_metrics_line_is_named_as_a_damaged_one_is(tmp_path, caplog):
    """A damaged middle line was named ("1 line(s) not JSON rows, skipped"), a torn last one skipped without a word."""
    from ragen_core.cli.main import main

    run = tmp_path / "run"
    run.mkdir()
    metrics = run / "metrics.jsonl"
    whole = [json.dumps(r) + "\n" for r in GRPO]
    cut = ": a run is writing it, or was killed while writing it"
    for text, said in [("".join(whole) + whole[0][:20], f"{metrics}: 1 line(s) not JSON rows, skipped (line 4; the last line is cut short{cut})"),
                       (whole[0][:-9] + "\n" + "".join(whole[1:]) + whole[0][:20],
                        f"{metrics}: 2 line(s) not JSON rows, skipped (line 1, 4; the last line is cut short{cut})"),
                       ("".join(whole), None)]:
        metrics.write_text(text)
        caplog.clear()
        with caplog.at_level("WARNING", logger="ragen_core.trainer.loggers"):
            assert main(["plot", str(run), "--out", str(tmp_path / "plots")]) == 0
        assert [r.getMessage() for r in caplog.records] == ([said] if said else [])


def test_a_damaged_metrics_file_is_warned_about_once_when_a_run_draws_its_plots(monkeypatch, tmp_path, caplog):
    """The run's end read metrics.jsonl to see it had rows, then plot_run read it again: the same
    "not JSON rows, skipped" warning twice."""
    from ragen_core.trainer.loggers import JsonlLogger

    metrics = tmp_path / "metrics.jsonl"
    whole = [json.dumps(r) + "\n" for r in GRPO]
    metrics.write_text(whole[0] + "{not json\n" + "".join(whole[1:]))
    monkeypatch.setenv("RAGEN_PLOTS", "1")
    with caplog.at_level("WARNING", logger="ragen_core.trainer.loggers"):
        JsonlLogger(tmp_path).ragen_on_train_end()
    assert [r.getMessage() for r in caplog.records] == [f"{metrics}: 1 line(s) not JSON rows, skipped (line 2)"]
    assert list((tmp_path / "plots").glob("*.png"))  # and the plots are drawn from the rows read
