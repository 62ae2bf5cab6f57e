"""The warm start's gate: a warm start below its target valid rate is never cached, nor used silently.

The measurement (:func:`ragen_core.trainer.warmstart.format_check`) is replaced by a fixed rate
so the gate's outcome does not depend on how well a few SFT steps happen to go; everything else
(demonstrations, SFT, the cache, the trainer and the CLI) is the real code.
"""

from __future__ import annotations

import json
import re

import pytest

from ragen_core.config import load_config
from ragen_core.errors import TrainingError
from ragen_core.testing.toy_env import register_toy_env
from ragen_core.trainer import warmstart
from ragen_core.trainer.config import RunConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: a tiny budget: no second round ever starts, so one measurement decides the gate
BUDGET = ["warm_start.episodes=3", "warm_start.epochs=1", "warm_start.check_episodes=2", "warm_start.max_rounds=3",
          "warm_start.max_seconds=0.001", "warm_start.target_valid_rate=0.9", "warm_start.start_from=scratch"]


def _overrides(tmp_path, *extra: str) -> list[str]:
    return [f"env={register_toy_env()}", "env_config.length=3", "env_config.max_turns=2", "env_config.max_actions_per_turn=1",
            "sampling.train.max_new_tokens=16", *BUDGET, f"warm_start.cache_dir={tmp_path / 'cache'}", *extra]


def _cfg(tmp_path, *extra: str) -> RunConfig:
    return load_config(RunConfig, [], _overrides(tmp_path, *extra))


@pytest.fixture
def measured(monkeypatch):
    """Every format check measures the rate in ``rates["now"]``; ``rates["calls"]`` counts the checks."""
    rates = {"now": 0.25, "calls": 0}

    def check(*args, **kwargs):
        rates["calls"] += 1
        return warmstart.FormatCheck(rates["now"], ["<think> x"])

    monkeypatch.setattr(warmstart, "format_check", check)
    return rates


def _cache_entries(tmp_path) -> list[str]:
    root = tmp_path / "cache"
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def test_a_missed_gate_stops_with_one_line_and_caches_nothing(tmp_path, measured, capsys):
    from ragen_core.models import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer("tiny")
    with pytest.raises(TrainingError) as err:
        warmstart.warm_start(_cfg(tmp_path), model, tok)
    first, *hints = str(err.value).splitlines()
    assert first.startswith("warm start missed its gate: 0.250 of replies valid after 1 round(s)")
    assert "(target 0.90; budget 3 rounds / 0 s); not cached" in first
    assert any("warm_start.on_gate_miss=continue" in h for h in hints)
    import re

    spent = float(re.search(r"round\(s\), (\d+) s", first).group(1))
    (suggested,) = [float(m.group(1)) for h in hints if (m := re.search(r"warm_start\.max_seconds=(\d+)", h))]
    assert suggested >= 2 * spent and suggested > 0  # more than one round took, not twice a budget it already outlasted
    assert measured["calls"] == 1  # the budget was spent after one round
    assert _cache_entries(tmp_path) == []  # neither the folder nor a leftover .tmp


def test_continue_trains_from_the_missed_model_records_the_miss_and_still_caches_nothing(tmp_path, measured, capsys):
    from ragen_core.models import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer("tiny")
    cfg = _cfg(tmp_path, "warm_start.on_gate_miss=continue")
    warm = warmstart.warm_start(cfg, model, tok)
    assert warm.ragen_warm_start["reached_target"] is False and warm.ragen_warm_start["valid_rate"] == 0.25
    assert "warm start missed its gate" in capsys.readouterr().out
    assert _cache_entries(tmp_path) == []
    warmstart.warm_start(cfg, load_model_and_tokenizer("tiny")[0], tok)  # the next run warm-starts again
    assert measured["calls"] == 2
    assert "using cached model" not in capsys.readouterr().out


def test_on_gate_miss_does_not_change_the_cache_key(tmp_path):
    assert warmstart.cache_key(_cfg(tmp_path)) == warmstart.cache_key(_cfg(tmp_path, "warm_start.on_gate_miss=continue"))


def test_a_cached_warm_start_that_missed_its_gate_is_not_used_and_is_replaced(tmp_path, measured, capsys):
    """Folders cached before the gate existed (valid rate 0.000, 'continuing'): never loaded again."""
    from ragen_core.models import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer("tiny")
    cfg = _cfg(tmp_path)
    folder = warmstart.cache_folder(cfg)
    model.save_pretrained(str(folder), safe_serialization=True)
    tok.save_pretrained(str(folder))
    (folder / warmstart.META_FILE).write_text(json.dumps({"valid_rate": 0.0, "reached_target": False}), encoding="utf-8")
    measured["now"] = 0.95
    warm = warmstart.warm_start(cfg, load_model_and_tokenizer("tiny")[0], tok)
    assert f"not using cached model {folder}: its record says it missed" in capsys.readouterr().out
    assert measured["calls"] == 1 and warm.ragen_warm_start["reached_target"] is True
    assert warmstart.read_meta(folder)["reached_target"] is True  # the passed warm start took its place
    assert _cache_entries(tmp_path) == [folder.name]
    warmstart.warm_start(cfg, load_model_and_tokenizer("tiny")[0], tok)
    assert "using cached model" in capsys.readouterr().out and measured["calls"] == 1


def _run_args(tmp_path, *extra: str) -> list[str]:
    env, *overrides = _overrides(tmp_path, *extra)  # the CLI takes the env as --env
    return ["run", "--env", env.removeprefix("env="), "--run-dir", str(tmp_path / "run"), "--steps", "1", "--no-progress", *overrides,
            "warm_start.enabled=true", "rollout.env_groups=2", "rollout.group_size=2", "optim.mini_batch_size=4",
            "optim.micro_batch_size=2", "test_freq=0", "save_freq=0"]


def test_ragen_run_stops_on_a_missed_gate_with_exit_2_and_one_line(tmp_path, measured, capsys):
    from ragen_core.cli.main import main

    assert main(_run_args(tmp_path)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    start = next(i for i, line in enumerate(err) if line.startswith("TrainingError: "))
    assert err[start].startswith("TrainingError: warm start missed its gate: 0.250 of replies valid")
    assert err[start + 1:] and all(line.startswith("hint: ") for line in err[start + 1:])  # the one line, then its hints
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # no RL step ran
    assert _cache_entries(tmp_path) == []


def test_ragen_run_with_continue_trains_and_records_the_miss(tmp_path, measured, capsys):
    from ragen_core.cli.main import main
    from ragen_core.trainer.loggers import read_metrics

    assert main(_run_args(tmp_path, "warm_start.on_gate_miss=continue")) == 0
    assert "warm start missed its gate" in capsys.readouterr().out
    record = json.loads((tmp_path / "run" / "warm_start.json").read_text())
    assert record["reached_target"] is False and record["valid_rate"] == 0.25
    first = read_metrics(tmp_path / "run" / "metrics.jsonl")[0]
    assert (first["warm_start/valid_rate"], first["warm_start/reached_target"]) == (0.25, 0.0)
    assert _cache_entries(tmp_path) == []


def test_the_time_budget_stops_sft_inside_a_round_not_only_between_rounds(tmp_path, measured, capsys):
    """warm_start.max_seconds used to be read between rounds only: one long round ran minutes past
    it. Past the budget no SFT batch starts (the first always runs) and the run says so."""
    from ragen_core.models import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer("tiny")
    cfg = _cfg(tmp_path, "warm_start.episodes=8", "warm_start.epochs=4", "warm_start.batch_size=1", "warm_start.on_gate_miss=continue")
    warm = warmstart.warm_start(cfg, model, tok)
    (round_one,) = warm.ragen_warm_start["history"]
    assert round_one["sft_steps"] == 1  # of 8 demonstrations x 4 epochs at batch 1 = 32 planned
    assert "warm start round 1: SFT stopped after 1 of 32 steps: warm_start.max_seconds (0 s) is spent" in capsys.readouterr().out


def test_the_stopped_sft_counts_its_planned_steps_in_rows_of_a_windowed_context(tmp_path, measured, capsys, monkeypatch):
    """With a windowed context every turn is its own SFT row: the note said "of 32 steps" (episodes)
    while SFT planned its batches over the turns."""
    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer.batch import build_batch

    model, tok = load_model_and_tokenizer("tiny")
    cfg = _cfg(tmp_path, "warm_start.episodes=8", "warm_start.epochs=4", "warm_start.batch_size=1", "warm_start.on_gate_miss=continue",
               "rollout.extra.context_window=single-turn")
    seen: list[int] = []
    real_sft = warmstart.sft

    def counting_sft(model, tokenizer, trajs, **kwargs):
        seen.append(len(build_batch(trajs, 0, per_turn=kwargs["per_turn"])))
        return real_sft(model, tokenizer, trajs, **kwargs)

    monkeypatch.setattr(warmstart, "sft", counting_sft)
    warmstart.warm_start(cfg, model, tok)
    (rows,) = seen
    assert rows > 8  # random demonstrations of a 2-turn env: some have two turns
    assert f"warm start round 1: SFT stopped after 1 of {4 * rows} steps" in capsys.readouterr().out


def test_sft_without_a_deadline_runs_every_planned_step(tmp_path):
    import time

    from ragen_core.models import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer("tiny")
    cfg = _cfg(tmp_path)
    trajs = warmstart.demonstrations(cfg, tok, round_no=0, balance={})
    assert len(warmstart.sft(model, tok, trajs, epochs=2, lr=1e-3, batch_size=1, seed=0)) == 2 * len(trajs)
    assert len(warmstart.sft(model, tok, trajs, epochs=2, lr=1e-3, batch_size=1, seed=0, deadline=time.time() - 1)) == 1


def test_demonstrations_cut_by_the_reply_budget_stop_the_warm_start_before_sft(tmp_path, measured, capsys):
    """With max_new_tokens too small for even an empty-thought reply, every demonstration is cut
    before </answer>: SFT could never reach the gate (a user's run spent 5 minutes on it)."""
    from ragen_core.errors import ConfigError
    from ragen_core.models import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer("tiny")
    with pytest.raises(ConfigError) as err:
        warmstart.warm_start(_cfg(tmp_path, "sampling.train.max_new_tokens=6"), model, tok)
    first, hint, _ = str(err.value).splitlines()
    found = re.search(r"warm start: (\d+) of (\d+) demonstration replies need more than sampling.train.max_new_tokens=6 tokens "
                      r"\(up to (\d+)\)", first)
    assert found is not None and int(found.group(1)) == int(found.group(2)) >= 3, first  # every reply of 3 episodes is cut
    assert hint == f"hint: raise sampling.train.max_new_tokens to {found.group(3)} or more (and sampling.val.max_new_tokens with it)"
    assert measured["calls"] == 0  # stopped before any SFT or check
    warmstart.warm_start(_cfg(tmp_path, f"sampling.train.max_new_tokens={found.group(3)}", "warm_start.on_gate_miss=continue"), model, tok)
    capsys.readouterr()
    # on_gate_miss=continue: the user accepted a missed gate, so the cut is a warning and training goes on
    warmstart.warm_start(_cfg(tmp_path, "sampling.train.max_new_tokens=6", "warm_start.on_gate_miss=continue"), model, tok)
    assert "warning: warm start: " in capsys.readouterr().err and measured["calls"] >= 1


def test_demonstrations_cut_by_an_enforced_env_budget_name_that_budget(tmp_path, measured):
    """Under rollout.enforce_env_max_tokens the env's max_tokens cuts the demonstrations, not
    sampling.train.max_new_tokens: the refusal said to raise the latter, which changed nothing."""
    from ragen_core.errors import ConfigError
    from ragen_core.models import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer("tiny")
    cfg = _cfg(tmp_path, "sampling.train.max_new_tokens=48", "rollout.enforce_env_max_tokens=true", "env_config.max_tokens=6")
    with pytest.raises(ConfigError) as err:
        warmstart.warm_start(cfg, model, tok)
    first, hint, _ = str(err.value).splitlines()
    found = re.search(r"demonstration replies need more than env_config.max_tokens=6 tokens \(up to (\d+)\)", first)
    assert found is not None, first
    assert hint == f"hint: raise env_config.max_tokens to {found.group(1)} or more, or set rollout.enforce_env_max_tokens=false"
    assert measured["calls"] == 0


def test_demonstrations_longer_than_both_budgets_name_both(tmp_path, measured):
    """The env's max_tokens (6) cut them, but they also need more than sampling.train.max_new_tokens (8):
    raising max_tokens alone, or turning rollout.enforce_env_max_tokens off, still leaves them cut at 8."""
    from ragen_core.errors import ConfigError
    from ragen_core.models import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer("tiny")
    cfg = _cfg(tmp_path, "sampling.train.max_new_tokens=8", "rollout.enforce_env_max_tokens=true", "env_config.max_tokens=6")
    with pytest.raises(ConfigError) as err:
        warmstart.warm_start(cfg, model, tok)
    first, hint, _ = str(err.value).splitlines()
    found = re.search(r"need more than env_config.max_tokens=6 tokens \(up to (\d+)\)", first)
    assert found is not None and int(found.group(1)) > 8, first
    assert hint == (f"hint: raise env_config.max_tokens and sampling.train.max_new_tokens to {found.group(1)} or more "
                    "(and sampling.val.max_new_tokens with it)")
    assert measured["calls"] == 0
