"""``ragen eval --model``: the default is the shipped warm policy a run of the env starts from (not
the tiny model's random weights), shipped policies (deltas too) can be named, and the first line
says what was evaluated."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ragen_core.cli.main import main
from ragen_core.trainer.warm_policy import SHIPPED_ROOT, shipped_policy


def _eval(capsys, *argv: str) -> tuple[int, str]:
    rc = main(["eval", "--env", "sudoku", "--groups", "2", *argv])
    out = capsys.readouterr()
    return rc, out.out + out.err


def _valid(text: str) -> float:
    return float(re.search(r"valid_turn_rate: ([0-9.]+)", text).group(1))


@pytest.mark.skipif(shipped_policy(SHIPPED_ROOT / "sudoku") is None, reason="the shipped sudoku delta policy is not installed")
def test_eval_defaults_to_the_shipped_warm_policy_and_names_it(capsys):
    rc, warm = _eval(capsys)
    assert rc == 0, warm
    assert "model: shipped warm policy 'sudoku'" in warm
    assert "evaluating 2 episodes (2 groups x 1) on sudoku" in warm and "eval: reset (" in warm and "eval: turn 1 (" in warm
    rc, random = _eval(capsys, "--model", "tiny")
    assert rc == 0 and "model: tiny with random weights" in random
    # The sudoku policy was built until its valid rate cleared the warm-start gate (0.5 and up) on
    # these settings; random weights do not write <think>...</think><answer>...</answer> at all.
    assert _valid(warm) >= 0.5 > _valid(random)
    # a delta policy's folder names it too (it holds delta.safetensors, not model.safetensors)
    rc, by_folder = _eval(capsys, "--model", str(SHIPPED_ROOT / "sudoku"))
    assert rc == 0 and "model: shipped warm policy 'sudoku'" in by_folder
    assert _valid(by_folder) == _valid(warm)  # same weights, same seeds, same machine


def test_eval_refuses_an_unknown_shipped_policy_in_one_line(capsys):
    rc, text = _eval(capsys, "--model", "warm:no-such-policy")
    assert rc == 2
    assert "ConfigError: --model warm:no-such-policy:" in text and "hint: shipped policies: warm:tiny-warm" in text
    assert "Traceback" not in text


def test_eval_of_a_run_folder_without_a_model_says_what_it_is(tmp_path, capsys):
    from ragen_core.testing.run_helpers import one_line_error

    run = tmp_path / "run"
    (run / "checkpoints" / "step_2").mkdir(parents=True)
    (run / "checkpoints" / "step_10").mkdir()
    (run / "config.yaml").write_text("env: sudoku\n")
    rc, text = _eval(capsys, "--model", str(run / "checkpoints"))
    assert rc == 2 and one_line_error(text) == f"ConfigError: --model {run / 'checkpoints'} holds checkpoints, not a model: name one of them"
    assert f"hint: --model {run / 'checkpoints' / 'step_10'} (the latest)" in text
    stopped = tmp_path / "stopped"  # a run that ended before its first checkpoint
    stopped.mkdir()
    (stopped / "config.yaml").write_text("env: sudoku\n")
    rc, text = _eval(capsys, "--model", str(stopped))
    assert rc == 2 and one_line_error(text) == f"ConfigError: run directory {stopped} has no checkpoint yet (it stopped before saving one)"


def test_eval_refuses_a_model_override_beside_a_shipped_policy(capsys):
    from ragen_core.testing.run_helpers import one_line_error

    rc, text = _eval(capsys, "model=some/other-model")
    assert rc == 2
    assert one_line_error(text) == "ConfigError: --model warm is a shipped policy of the tiny model, but model=some/other-model is set too"


@pytest.mark.parametrize(("override", "flag"), [("rollout.group_size=3", "--group-size 3"), ("val_groups=4", "--groups 4"),
                                                ("rollout.env_groups=5", "--groups 5"), ("val_group_size=2", "--group-size 2")])
def test_eval_refuses_group_sizes_as_overrides(capsys, override, flag):
    """rollout.group_size=3 was accepted and ignored: the episodes are --groups x --group-size."""
    from ragen_core.testing.run_helpers import one_line_error

    rc, text = _eval(capsys, override)
    assert rc == 2 and one_line_error(text).startswith(f"ConfigError: ragen eval sizes its episodes with {flag.split()[0]}, not ")
    assert f"hint: give {flag}" in text


def test_eval_says_when_the_shipped_policy_was_not_built_for_the_env(capsys):
    from ragen_core.testing.toy_env import register_toy_env

    env = register_toy_env()
    rc = main(["eval", "--env", env, "--groups", "1", "--model", "warm:tiny-warm", "sampling.val.max_new_tokens=8"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    folder = SHIPPED_ROOT / "tiny-warm"
    assert f"model: shipped warm policy 'tiny-warm' ({folder}); not built for {env!r}: a run warm-starts further from it" in out.out


def test_eval_of_a_run_uses_the_runs_env_preset_and_settings(tmp_path, capsys):
    import json

    from ragen_core.testing.run_helpers import toy_run_config
    from ragen_core.testing.toy_env import register_toy_env
    from ragen_core.trainer.trainer import Trainer

    env = register_toy_env()
    # preset Long (9 cells) with TOY_RUN's env_config.length=3 over it: the run trains on 3 cells (the env's default is 5)
    cfg = toy_run_config(tmp_path / "run", "preset=Long", "env_config.max_turns=1", steps=1)
    Trainer(cfg).train()
    capsys.readouterr()
    out = tmp_path / "val.jsonl"
    # no --env: the run names it; the trajectories carry the run's preset and its corridor length
    assert main(["eval", "--model", cfg.run_dir, "--groups", "1", "--out", str(out), "sampling.val.max_new_tokens=4"]) == 0
    err = capsys.readouterr().err
    assert f"env settings: from the run's config.yaml (env {env!r}, preset 'Long'" in err
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    corridor = next(line for line in record["messages"][1]["content"].splitlines() if set(line) <= {"_", "P", "G"} and "P" in line)
    assert record["tag"] == "Long" and len(corridor) == 3
    assert main(["eval", "--model", str(tmp_path / "nowhere")]) == 2  # a missing folder is named first, not the missing --env
    assert capsys.readouterr().err.startswith(f"RagenError: could not load model {str(tmp_path / 'nowhere')!r}: the folder does not exist")
    assert main(["eval", "--model", "tiny"]) == 2  # a model that exists but names no env
    assert "ragen eval needs --env NAME" in capsys.readouterr().err


def test_eval_of_a_run_folder_without_a_readable_config_names_the_file(tmp_path, capsys):
    """A run directory whose config.yaml was missing or broken got "ragen eval needs --env NAME (or
    --model naming a run directory ...)", though --model did name one."""
    from ragen_core.testing.run_helpers import one_line_error

    run = tmp_path / "run"
    (run / "checkpoints" / "step_2").mkdir(parents=True)
    (run / "checkpoints" / "step_2" / "config.json").write_text("{}")  # a model folder, as far as the name check goes
    hint = "hint: restore it, or give --env NAME (with the run's env settings) to evaluate the model anyway"
    for model in (run, run / "checkpoints" / "step_2"):
        rc = main(["eval", "--model", str(model), "--groups", "2"])
        text = capsys.readouterr().err
        assert rc == 2 and one_line_error(text) == f"ConfigError: {run / 'config.yaml'} not found: ragen eval takes a run directory's env from it"
        assert hint in text.splitlines()
    (run / "config.yaml").write_text("steps: [unclosed\n")
    assert main(["eval", "--model", str(run), "--groups", "2"]) == 2
    assert one_line_error(capsys.readouterr().err).startswith(f"ConfigError: malformed YAML in {run / 'config.yaml'} at line 2")
    (run / "config.yaml").write_text("steps: 3\n")
    assert main(["eval", "--model", str(run), "--groups", "2"]) == 2
    said = one_line_error(capsys.readouterr().err)
    assert said == f"ConfigError: {run / 'config.yaml'} names no env: ragen eval takes a run directory's env from it"


def test_eval_of_a_run_samples_as_its_validation_did_and_flags_win(tmp_path, capsys, monkeypatch):
    """A run validated at temperature 1.5 with 3 new tokens was evaluated at the defaults (0.5, 48 tokens)
    without a word (helper-62's walk)."""
    from ragen_core.testing.run_helpers import toy_run_config
    from ragen_core.trainer.trainer import Trainer

    cfg = toy_run_config(tmp_path / "run", "sampling.val.temperature=1.5", "sampling.val.max_new_tokens=3", "save_freq=1", steps=1)
    Trainer(cfg).train()
    base = ["eval", "--model", cfg.run_dir, "--groups", "1"]
    seen = _sampling_seen(monkeypatch, [base, [*base, "--temperature", "0.7"]])
    assert [(s.temperature, s.max_new_tokens) for s in seen] == [(1.5, 3), (0.7, 3)]
    assert "and its validation sampling; flags and overrides win" in capsys.readouterr().err


def test_an_evaluation_too_large_to_hold_is_refused_at_once(capsys):
    """--groups 1000000000 grew memory by ~35 MB/s with no progress line (helper-62's walk)."""
    from ragen_core.testing.run_helpers import one_line_error

    assert main(["eval", "--env", "bandit", "--groups", "1000000000"]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert line == ("ConfigError: --groups 1000000000 x --group-size 1 is 1000000000 episodes, more than one evaluation holds "
                    "at once (100000)")


def test_greedy_contradictions_and_meaningless_pass_at_k_are_said(capsys):
    from ragen_core.testing.run_helpers import one_line_error

    assert main(["eval", "--env", "bandit", "--greedy", "--temperature", "0.9"]) == 2
    assert one_line_error(capsys.readouterr().err) == ("ConfigError: --greedy and --temperature 0.9 contradict each other: greedy "
                                                      "decoding has no temperature")
    assert main(["eval", "--env", "bandit", "--greedy", "--groups", "1000000", "--group-size", "4"]) == 2  # refused after the note
    assert "note: greedy replies are the same in every episode of a group, so pass@4 is pass@1" in capsys.readouterr().err


def test_eval_out_refuses_a_real_run_s_own_entries_only(tmp_path, monkeypatch):
    """A project folder with its own config.yaml is no run (helper-64's review); a run's entries are refused written or not."""
    from ragen_core.cli.evaluate import check_writable
    from ragen_core.errors import ConfigError

    project = tmp_path / "project"
    project.mkdir()
    (project / "config.yaml").write_text("env: bandit\n")
    (project / "metrics.txt").write_text("mine\n")
    monkeypatch.chdir(project)
    for out in ("rollouts/val.jsonl", "plots/x.jsonl", "metrics.jsonl", "config.yaml"):  # no metrics.jsonl or checkpoints/: no run
        assert check_writable(Path(out)) == Path(out)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("env: bandit\n")
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    assert check_writable(run / "eval.jsonl") == run / "eval.jsonl"  # beside the run's own files
    with pytest.raises(ConfigError, match=r"is the run .*'s rollouts/step_9.jsonl"):  # not written yet: would pass for the run's
        check_writable(run / "rollouts" / "step_9.jsonl")
    with pytest.raises(ConfigError, match=r"is the run .*'s metrics.jsonl, which a training run wrote") as err:
        check_writable(run / "metrics.jsonl")
    assert f"--out {run.resolve() / 'eval.jsonl'}" in str(err.value)  # a hint that is not refused in turn


def test_a_run_config_with_a_sampling_key_this_version_lacks_is_still_evaluated(tmp_path, capsys):
    from ragen_core.cli.evaluate import run_env_settings

    run = _fake_run(tmp_path, "env: bandit\nsampling:\n  val:\n    temperature: 0.7\n    stop: ['\\n']\n    1: 2\n    null: 3\n")
    assert run_env_settings(str(run))["sampling"] == {"val": {"temperature": 0.7}}
    assert "note: the run's sampling.val 1, None, stop are not settings of this RAGEN: evaluated without" in capsys.readouterr().err


def test_a_temperature_samples_a_run_whose_validation_was_greedy(tmp_path, monkeypatch):
    from ragen_core.cli import evaluate as ev

    run = _fake_run(tmp_path, "env: bandit\nsampling:\n  val:\n    do_sample: false\n")
    monkeypatch.setattr(ev, "check_model_name", lambda model: None)
    base = ["eval", "--model", str(run), "--groups", "1"]
    seen = _sampling_seen(monkeypatch, [base, [*base, "--temperature", "0.9"]])
    assert [(s.do_sample, s.temperature) for s in seen] == [(False, 1.0), (True, 0.9)]  # (a section without temperature: its default)


def _fake_run(tmp_path: Path, config: str) -> Path:
    """A run folder as eval recognises one: its config.yaml and a metrics.jsonl."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(config)
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    return run


def _sampling_seen(monkeypatch, argvs: list[list[str]]) -> list:
    """The validation sampling ``ragen eval`` would evaluate with, for each argv (the evaluation itself is stopped)."""
    from ragen_core.cli import evaluate as ev

    seen = []

    class Stop(Exception):
        pass

    def capture(config, model_path, *, groups, group_size):
        seen.append(config.sampling.val)
        raise Stop

    monkeypatch.setattr(ev, "evaluate", capture)
    for argv in argvs:
        with pytest.raises(Stop):
            main(argv)
    return seen
