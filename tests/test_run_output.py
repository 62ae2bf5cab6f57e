"""What a run prints: no transformers bars at loads and saves, a note when old checkpoints go,
progress bars while warm-starting."""

from __future__ import annotations

import pytest

from ragen_core.config import load_config
from ragen_core.testing.toy_env import register_toy_env
from ragen_core.trainer.config import RunConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _cfg(tmp_path, *extra: str) -> RunConfig:
    return load_config(RunConfig, [], [f"env={register_toy_env()}", "env_config.length=3", "env_config.max_turns=1", "rollout.env_groups=2",
                                       "rollout.group_size=2", "sampling.train.max_new_tokens=8", "optim.mini_batch_size=4",
                                       "optim.micro_batch_size=2", "test_freq=0", "warm_start.enabled=false", "progress=false",
                                       f"run_dir={tmp_path / 'run'}", *extra])


def test_checkpoints_print_no_transformers_bars_and_say_which_old_ones_were_removed(tmp_path, capfd):
    from ragen_core.trainer.checkpoint import list_checkpoints
    from ragen_core.trainer.trainer import Trainer

    Trainer(_cfg(tmp_path, "steps=3", "save_freq=1")).train()
    out, err = capfd.readouterr()  # file descriptors: tqdm and transformers write to the real stderr
    assert [step for step, _ in list_checkpoints(tmp_path / "run")] == [2, 3]
    assert "checkpoint step_3 written; removed step_1 (the newest 2 intact ones are kept: keep_checkpoints)" in out
    assert "checkpoint step_2 written" not in out  # nothing removed yet: no note
    for bar in ("Writing model shards", "Loading weights"):
        assert bar not in out + err


@pytest.mark.usefixtures("a_terminal")
def test_the_warm_start_shows_progress_bars_for_sft_and_the_valid_rate_check(tmp_path, capfd):
    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer.warmstart import warm_start

    cfg = _cfg(tmp_path, "progress=true", "warm_start.episodes=3", "warm_start.epochs=2", "warm_start.batch_size=1", "warm_start.check_episodes=2",
               "warm_start.max_rounds=1", "warm_start.target_valid_rate=0", "warm_start.start_from=scratch",
               f"warm_start.cache_dir={tmp_path / 'ws'}")
    model, tok = load_model_and_tokenizer("tiny")
    warm_start(cfg, model, tok)
    out, err = capfd.readouterr()
    # said before the rounds: they run from the model's own weights and take minutes (nothing said so before)
    assert ("warm start: teaching the reply format from the model's own weights (warm_start.start_from=scratch): rounds of 3 "
            "demonstrations until 0.00 valid replies, at most 1 rounds") in out
    # the bar's total: 3 demonstrations x 2 epochs at batch 1 (its first frame "0/6" is always drawn; the
    # last, "6/6", only when tqdm's 0.1 s refresh happens to fall after the last step: the bar does not stay)
    assert "warm start round 1: SFT" in err and "0/6" in err
    assert "warm start round 1: valid-rate check" in err
    quiet = _cfg(tmp_path, "progress=false", "warm_start.episodes=3", "warm_start.epochs=2", "warm_start.check_episodes=2",
                 "warm_start.max_rounds=1", "warm_start.target_valid_rate=0", "warm_start.start_from=scratch",
                 f"warm_start.cache_dir={tmp_path / 'ws2'}")
    warm_start(quiet, load_model_and_tokenizer("tiny")[0], tok)
    assert "warm start round 1: SFT" not in capfd.readouterr().err


@pytest.fixture
def a_terminal(monkeypatch):
    """stderr counts as a terminal: the run draws tqdm's bar (under capfd it would print lines)."""
    monkeypatch.setattr("ragen_core.trainer.progress.stderr_is_terminal", lambda: True)


@pytest.mark.usefixtures("a_terminal")
def test_every_step_says_what_it_is_doing_on_the_progress_bar(tmp_path, capfd):
    """The bar names the phase: the rollout's turns, then the update (the first can sit tens of
    seconds in torch's one-time set-up), and validation; after the first step beside the last
    step's reward and success. Later steps and validation used to sit silent (a minute or more)."""
    import re

    from ragen_core.trainer.trainer import Trainer

    Trainer(_cfg(tmp_path, "steps=2", "save_freq=0", "progress=true", "test_freq=2", "val_groups=1")).train()
    err = capfd.readouterr().err
    assert "turn 1 of a train rollout" in err
    assert "the update of step 1 (a process's first update sets torch up" in err
    assert re.search(r"reward=-?\d\.\d{3}, success=\d\.\d\d \| the update of step 2\b", err)
    assert re.search(r"\| turn 1 of a val rollout", err)


@pytest.mark.usefixtures("a_terminal")
def test_a_plugins_warning_during_training_prints_on_its_own_line_above_the_bar(tmp_path, capfd, monkeypatch):
    """A plugin's logger warning with no handler configured (the ray pool's "replaced actor" line)
    went through logging's last-resort handler straight onto stderr, glued to the end of the
    progress bar's line; during the loop it is printed above the bar (tqdm.write), on a line of its own."""
    import logging
    import re

    from ragen_core.testing.toy_env import CorridorEnv
    from ragen_core.trainer.trainer import Trainer

    plugin_log = logging.getLogger("ragen_test_plugin_warning")
    monkeypatch.setattr(plugin_log, "propagate", False)  # no handler anywhere above it (pytest's sit on the root logger)
    original = CorridorEnv.reset

    def warning_reset(self, *args, **kwargs):
        plugin_log.warning("test plugin: something the user should see")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(CorridorEnv, "reset", warning_reset)
    before = logging.lastResort
    Trainer(_cfg(tmp_path, "steps=1", "save_freq=0", "progress=true")).train()
    err = capfd.readouterr().err
    assert "test plugin: something the user should see" in err
    # on a line of its own: the bar is cleared first ('\r' + blanks + '\r'), never "...]test plugin"
    assert not re.search(r"[^\r\n]test plugin: something", err), err
    assert logging.lastResort is before  # put back after the loop


def test_piped_to_a_file_the_progress_is_plain_lines_without_carriage_returns(tmp_path, capfd, monkeypatch):
    """stderr not a terminal (a CI log, '2> run.log'): tqdm redrew its bar with a carriage return at
    every rollout turn and update, one line holding every redraw (a line each in a CI log viewer).
    Now the first and the last step print a line each, with the step's reward and success."""
    import re

    from ragen_core.trainer import progress
    from ragen_core.trainer.trainer import Trainer

    monkeypatch.setattr(progress, "LINE_EVERY_S", 3600.0)  # no step of a loaded machine reaches it: exactly the first and last line

    Trainer(_cfg(tmp_path, "steps=3", "save_freq=0", "progress=true", "test_freq=3", "val_groups=1")).train()
    err = capfd.readouterr().err
    assert "\r" not in err
    lines = [line for line in err.splitlines() if line.startswith("ragen ")]
    assert lines[0].endswith(": steps 1 to 3 (a line at the first and the last step, and at most one every 3600 s)")
    assert [re.search(r": (\d/3) steps \[", line).group(1) for line in lines[1:]] == ["1/3", "3/3"]  # step 2 came within the interval
    assert all(re.search(r"s/step\] reward=-?\d\.\d{3}, success=\d\.\d\d$", line) for line in lines[1:]), lines


def test_plain_progress_lines_are_at_most_one_per_interval_and_name_a_long_steps_phase(capsys):
    """100 steps of 1 s with 3 phases each: 1 + 100/30 step lines, not 400; a step sitting in one
    phase past the interval says that phase."""
    from ragen_core.trainer.progress import LineProgress

    now = [0.0]
    bar = LineProgress(100, 0, "ragen toy/grpo", every_s=30, clock=lambda: now[0])
    for step in range(1, 101):
        for phase, seconds in (("turn 1 of a train rollout", 0.25), ("the log-probs", 0.25), (f"the update of step {step}", 0.5)):
            now[0] += seconds
            bar.set_postfix_str(f"reward=0.500, success=0.50 | {phase}")
        bar.update(1)
        bar.set_postfix_str("reward=0.500, success=0.50")
    now[0] += 31  # a slow 101st phase, past the interval
    bar.set_postfix_str("reward=0.500, success=0.50 | turn 7 of a val rollout")
    bar.close()
    lines = capsys.readouterr().err.splitlines()
    assert 4 <= len(lines) <= 7, lines  # the start, step 1, about every 30th step, step 100, the slow phase
    assert lines[1].startswith("ragen toy/grpo: 1/100 steps [00:01, 1.00 s/step] reward=0.500")
    assert "ragen toy/grpo: 100/100 steps [01:40, 1.00 s/step] reward=0.500, success=0.50" in lines
    assert lines[-1].endswith("| turn 7 of a val rollout")


def test_piped_to_a_file_the_warm_start_prints_its_round_lines_and_no_bars(tmp_path, capfd):
    """Its bars redrew with a carriage return about once a second (86 redraws in a 70 s warm start
    piped to a file, up to its 600 s budget); in a log the round lines say the same."""
    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer.warmstart import warm_start

    cfg = _cfg(tmp_path, "progress=true", "warm_start.episodes=3", "warm_start.epochs=2", "warm_start.batch_size=1", "warm_start.check_episodes=2",
               "warm_start.max_rounds=1", "warm_start.target_valid_rate=0", "warm_start.start_from=scratch",
               f"warm_start.cache_dir={tmp_path / 'ws'}")
    model, tok = load_model_and_tokenizer("tiny")
    warm_start(cfg, model, tok)
    out, err = capfd.readouterr()
    assert "warm start round 1: valid rate" in out
    assert "\r" not in err and "warm start round 1: SFT" not in err
