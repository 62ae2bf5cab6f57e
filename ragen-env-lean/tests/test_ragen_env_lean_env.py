"""Observation (golden texts), verdict rules, reward arithmetic, config validation and the
no-toolchain refusal (no Lean needed).

Reward tests feed the env fixed checker answers through a scripted object with the checker
interface: they prove the arithmetic from verdicts, not checking (see the transport tests and the
real-Lean tests for that)."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest
from ragen_env_lean.availability import check_available
from ragen_env_lean.checker import CheckResult, LeanMessage, transport_failure, verdict
from ragen_env_lean.config import LeanConfig
from ragen_env_lean.env import LeanEnv
from ragen_env_lean.render import feedback_lines, numbered, observation
from ragen_env_lean.repl import close_shared

from ragen_core.cli.main import main
from ragen_core.errors import ConfigError

DOUBLE = str(Path(__file__).with_name("lean_repl_double.py"))
UNSOLVED = LeanMessage("error", 8, 60, 9, 10, "unsolved goals\nx : ℤ\n⊢ x ^ 2 = 4")
WRONG = LeanMessage("error", 9, 2, 9, 10, "unknown tactic")
SORRY = LeanMessage("warning", 8, 8, 8, 23, "declaration uses 'sorry'")


@pytest.fixture
def no_lean_on_path(tmp_path, monkeypatch):
    """A PATH with no ``lean`` (the machines without a toolchain)."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))


# ---------------------------------------------------------------------------- observation
def test_golden_first_observation():
    text = observation(steps=0, max_steps=100, accepted=0, informal="Show that 1 + 1 = 2.", proof="import Mathlib\n\ntheorem t : 1 + 1 = 2 := by",
                       log=[], feedback=None)
    assert text == (
        "Steps taken: 0/100 | accepted tactics: 0\n"
        "\n"
        "Theorem (informal):\n"
        "    Show that 1 + 1 = 2.\n"
        "\n"
        "Proof so far:\n"
        "    1 | import Mathlib\n"
        "    2 |\n"
        "    3 | theorem t : 1 + 1 = 2 := by"
    )


def test_golden_observation_with_log_and_messages():
    proof = "\n".join(f"line {i}" for i in range(1, 46))  # 45 lines: the first 5 are cut
    log = [("simp", False), ("norm_num", True), ("ring", False), ("omega", False), ("nlinarith [sq_nonneg x]", True),
           ("cases h with\n| inl => rfl", False)]
    result = CheckResult("ok", (UNSOLVED, LeanMessage("warning", 3, 0, None, None, "unused variable `h`")))
    text = observation(steps=6, max_steps=100, accepted=2, informal="", proof=proof, log=log,
                       feedback=feedback_lines(result, True, None, truncate=0))
    assert text.split("\n\n") == [
        "Steps taken: 6/100 | accepted tactics: 2",
        "Proof so far:\n" + "\n".join(f"  {i:>3} | line {i}" for i in range(6, 46)),
        "Recent steps:\n"
        "  (1 earlier steps omitted)\n"
        "  02. norm_num [✓ accepted]\n"
        "  03. ring [✗ rejected]\n"
        "  04. omega [✗ rejected]\n"
        "  05. nlinarith [sq_nonneg x] [✓ accepted]\n"
        "  06. cases h with ⏎ | inl => rfl [✗ rejected]",
        "Last Lean feedback (accepted: yes):\n"
        "  01. [UNSOLVED GOALS 8:60 → 9:10] unsolved goals\n"
        "      x : ℤ\n"
        "      ⊢ x ^ 2 = 4\n"
        "  02. [WARNING 3:0] unused variable `h`",
    ]


def test_golden_feedback_of_failures_and_truncation():
    assert feedback_lines(None, False, "empty tactic") == ["Last Lean feedback (accepted: no):", "  01. [NOT CHECKED] empty tactic"]
    assert feedback_lines(transport_failure("Lean REPL timed out after 30 s"), False, None) == [
        "Last Lean feedback (accepted: no):", "  01. [TIMEOUT] Lean REPL timed out after 30 s"]
    assert feedback_lines(CheckResult("repl_error", error="Unknown environment."), False, None)[1] == "  01. [REPL_ERROR] Unknown environment."
    assert feedback_lines(CheckResult("ok", (WRONG,)), False, None, truncate=7) == [
        "Last Lean feedback (accepted: no):", "  01. [ERROR 9:2 → 9:10] unknown …"]
    assert feedback_lines(CheckResult("ok"), True, None)[1] == "  (no messages)"


def test_numbering_is_right_aligned_and_at_least_three_wide():
    assert numbered("a\nb") == ["  1 | a", "  2 | b"]
    long = numbered("\n".join(["x"] * 1200), last=2)
    assert long == ["1199 | x", "1200 | x"]


def test_informal_statement_is_wrapped_at_88_columns():
    text = observation(steps=0, max_steps=1, accepted=0, informal="word " * 40, proof="p", log=[], feedback=None)
    block = text.split("\n\n")[1].split("\n")
    assert block[0] == "Theorem (informal):" and all(len(line) <= 88 and line.startswith("    word") for line in block[1:])
    assert len(block) == 4  # 40 words of 5 characters at 88 columns with a 4-space indent: 17 + 17 + 6


# ---------------------------------------------------------------------------- verdicts and rewards
def test_verdict_rules():
    assert verdict(CheckResult("ok")) == verdict(CheckResult("ok")).__class__(True, True, False, False)
    assert (verdict(CheckResult("ok", (UNSOLVED,))).accepted, verdict(CheckResult("ok", (UNSOLVED,))).success) == (True, False)
    assert verdict(CheckResult("ok", (UNSOLVED, WRONG))).accepted is False
    assert verdict(CheckResult("ok", (SORRY,))) == verdict(CheckResult("ok")).__class__(False, False, False, True)
    assert verdict(CheckResult("ok", sorries=1)).accepted is False
    assert verdict(CheckResult("ok", (LeanMessage("warning", 1, 0, None, None, "unused variable"),))).success is True
    assert verdict(transport_failure("Lean server request timed out after 60 s")).timeout is True
    assert verdict(transport_failure("connection refused")) == verdict(CheckResult("repl_error")).__class__(False, False, False, False)
    assert transport_failure("connection refused").status == "server_error"


class Scripted:
    """The checker interface answering from a list (records what it was asked)."""

    def __init__(self, answers: list[CheckResult]) -> None:
        self.answers, self.asked = list(answers), []

    def check(self, header: str, body: str) -> CheckResult:
        self.asked.append(body)
        return self.answers.pop(0)

    def check_many(self, items):
        return [self.check(h, b) for h, b in items]

    def close(self) -> None:
        pass


def _env(answers: list[CheckResult], **overrides) -> tuple[LeanEnv, Scripted]:
    # a command that exists (passes the start-up check) and is never started: the scripted checker
    # is in place before reset, so nothing is probed
    env = LeanEnv(LeanConfig(repl_command=[sys.executable], theorem="ragen_eval_poly", **overrides))
    env._checker = scripted = Scripted(answers)
    env.reset(0)
    return env, scripted


# one-decimal constants summed in binary floating point: 1e-12 absorbs the rounding of the sums
def approx(value: float):
    return pytest.approx(value, abs=1e-12)


def test_rewards_follow_the_reward_table():
    env, scripted = _env([CheckResult("ok", (UNSOLVED,)), CheckResult("ok", (WRONG,)), CheckResult("ok", (SORRY,)),
                          transport_failure("timed out"), transport_failure("HTTP 500"), CheckResult("ok")])
    rewards = [env.step(t).reward for t in ("subst h₀", "simpx", "sorry", "norm_num", "norm_num", "", "norm_num")]
    assert rewards == [approx(0.9), approx(-1.1), approx(-1.1), approx(-2.1), approx(-1.1), approx(-1.1), approx(10.9)]
    assert len(scripted.asked) == 6  # the empty tactic was never sent
    # only accepted tactics stay: the last check held "subst h₀" and "norm_num", nothing rejected
    assert scripted.asked[-1].endswith(":= by\n  subst h₀\n  norm_num")
    assert env.proof_text().endswith(":= by\n  subst h₀\n  norm_num")


def test_a_reply_that_is_not_lean_ends_the_episode_with_an_error_not_a_reward():
    env, _ = _env([CheckResult("ok", (UNSOLVED,)), transport_failure("the reply {} has none of a REPL response's fields", not_lean=True)])
    assert env.step("subst h₀").reward == approx(0.9)
    with pytest.raises(ConfigError, match=r"^lean env: env_config.repl_command '.+' is not a Lean REPL \(the reply \{\} has none"):
        env.step("norm_num")


def test_info_fields_and_episode_end():
    env, _ = _env([CheckResult("ok", (UNSOLVED,)), CheckResult("ok")])
    _, _, done, info = env.step("subst h₀")
    assert (done, info["success"], info["action_is_valid"], info["action_is_effective"], info["status"]) == (False, False, True, True, "ok")
    assert info["messages"] == [{"severity": "error", "line": 8, "column": 60, "end_line": 9, "end_column": 10,
                                 "text": "unsolved goals\nx : ℤ\n⊢ x ^ 2 = 4"}]
    _, reward, done, info = env.step("norm_num")
    assert done and info["success"] and reward == approx(10.9)
    after = env.step("simp")
    assert (after.reward, after.done, after.info["action_is_valid"], after.info["status"]) == (0.0, True, False, "done")


def test_the_checker_time_is_an_info_metric_summed_over_the_episode():
    """info['lean_time_s'] (the checker's seconds for a tactic) was in every checked step's info, and never logged."""
    from ragen_core.interfaces.env import checked_info_metrics
    from ragen_core.rollout.env_pool import info_record
    from ragen_core.rollout.episodes import aggregate_info

    env, _ = _env([CheckResult("ok", (UNSOLVED,), time_s=0.25), CheckResult("ok", time_s=0.5)])
    declared = checked_info_metrics(env)
    records = [info_record(env.step(t).info, [key for key, _ in declared], "lean", t) for t in ("subst h₀", "", "norm_num")]
    assert aggregate_info(records, declared) == {"lean_time_s": 0.75}  # the refused tactic took no checker time


def test_max_steps_ends_the_episode_with_its_penalty():
    env, _ = _env([CheckResult("ok", (UNSOLVED,)), CheckResult("ok", (WRONG,))], max_steps=2)
    first, second = env.step("subst h₀"), env.step("simpx")
    assert (first.done, second.done, second.info["success"]) == (False, True, False)
    assert second.reward == approx(-3.1)  # -0.1 - 1.0 - 2.0
    assert second.observation.startswith("Steps taken: 2/2 | accepted tactics: 1")


def test_the_shown_budget_and_the_penalty_follow_the_action_cap_when_it_is_smaller():
    """Defaults: max_steps 100, max_actions_per_episode 30 -- the rollout stops at 30, so the env does."""
    env, _ = _env([CheckResult("ok", (WRONG,))] * 40)
    assert env.step_budget == 30 and env.render().startswith("Steps taken: 0/30 | ")
    results = [env.step("simpx") for _ in range(30)]
    assert [r.done for r in results] == [False] * 29 + [True]
    assert results[-1].reward == approx(-3.1) and results[-1].observation.startswith("Steps taken: 30/30 | ")
    capped, _ = _env([], max_steps=5, max_actions_per_episode=30)
    assert capped.step_budget == 5


def test_refused_tactics_are_rejected_without_a_check():
    env, scripted = _env([])
    for bad in ("", "   ", "axiom cheat : False", "x" * 3000):
        result = env.step(bad)
        assert (result.reward, result.info["status"], result.info["action_is_valid"]) == (approx(-1.1), "refused", False)
    assert scripted.asked == []
    assert "[NOT CHECKED] 'axiom' starts a Lean command, not a tactic" in env.step("rfl axiom x : False").observation


def test_oracle_and_random_actions():
    env, _ = _env([CheckResult("ok", (UNSOLVED,))])
    assert env.oracle_actions() == ["subst h₀", "norm_num"]
    env.step("subst h₀")
    assert env.oracle_actions() == ["norm_num"]
    import numpy as np

    assert env.random_action(np.random.default_rng(0)) in ("simp", "norm_num", "linarith", "nlinarith", "omega", "ring", "positivity",
                                                           "decide", "constructor", "intro h", "rfl", "aesop", "field_simp", "ring_nf")


def test_seeded_draws_use_the_fixed_splits():
    env = LeanEnv(LeanConfig(repl_command=[sys.executable]))
    env._checker = Scripted([])
    val_names = {env.reset(s, mode="val") and env.theorem.name for s in range(20)}
    train_names = {env.reset(s) and env.theorem.name for s in range(40)}
    assert val_names == {"ragen_abs_bound", "ragen_sum_sq"} and not val_names & train_names
    assert env.reset(7, member=0) == env.reset(7, member=5)


# ---------------------------------------------------------------------------- config
def test_config_validation():
    assert LeanConfig(repl_command="lake env /opt/repl/bin/repl").repl_command == ["lake", "env", "/opt/repl/bin/repl"]
    assert LeanConfig(server_url="http://h:8000/").server_url == "http://h:8000"
    assert LeanConfig(server_url="http://h:8000").chosen_backend() == "server"
    assert LeanConfig(server_url="http://h:8000", backend="repl").chosen_backend() == "repl"
    assert LeanConfig().chosen_backend() == "repl"
    for bad in ({"server_url": "h:8000"}, {"repl_command": []}, {"repl_command": ""}, {"request_timeout": 0}, {"max_retries": -1},
                {"dataset": "x.jsonl", "train_split": "test", "val_split": "test"}, {"severs_url": "http://h"}, {"backend": "docker"}):
        with pytest.raises(ConfigError, match="^LeanConfig: invalid config: "):
            LeanConfig(**bad)


def test_availability_messages(tmp_path, no_lean_on_path, monkeypatch):
    with pytest.raises(ConfigError) as none:
        check_available(LeanConfig())
    assert str(none.value) == (
        "lean env: no Lean checker configured: install Lean 4 with elan "
        "(curl https://raw.githubusercontent.com/leanprover/elan/master/elan-init.sh -sSf | sh), "
        "build the Lean REPL in a Mathlib project and set env_config.repl_command, or set env_config.server_url to a Kimina Lean server")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "lean").write_text("#!/bin/sh\n")
    (bin_dir / "lean").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(ConfigError, match=f"lean env: lean is on PATH \\({bin_dir / 'lean'}\\) but no REPL command is set; install"):
        check_available(LeanConfig())
    with pytest.raises(ConfigError, match="repl_command program 'no-such-repl' was not found"):
        check_available(LeanConfig(repl_command=["no-such-repl"]))
    with pytest.raises(ConfigError, match="repl_cwd .* is not a folder"):
        check_available(LeanConfig(repl_command=[sys.executable], repl_cwd=str(tmp_path / "nope")))
    with pytest.raises(ConfigError, match="backend 'server' needs env_config.server_url"):
        check_available(LeanConfig(backend="server"))
    check_available(LeanConfig(repl_command=[sys.executable]))
    with pytest.raises(ConfigError, match="^lean env: lean is on PATH"):
        LeanEnv()  # a directly built env refuses too


def test_cli_refuses_without_a_toolchain(tmp_path, no_lean_on_path, capsys):
    assert main(["env", "play", "lean"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ConfigError: lean env: no Lean checker configured: install Lean 4 with elan") and err.count("\n") == 1
    assert "env_config.server_url" in err
    run_dir = tmp_path / "run"
    assert main(["run", "--env", "lean", "--steps", "1", "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ConfigError: lean env: no Lean checker configured") and err.count("\n") == 1
    assert not run_dir.exists()  # refused before the run folder, the model or any env


def test_cli_refuses_a_dead_server_url_fast(tmp_path):
    """Before, nothing checked the URL at start: the warm start and then training ran against the
    dead server for minutes (every check a server_error after retries). A child process, so that
    a regression fails on the timeout instead of hanging the suite."""
    import socket
    import subprocess
    import time

    from ragen_core.testing.run_helpers import one_line_error

    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there now
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    run_dir = tmp_path / "run"
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "ragen_core.cli.main", "run", "--env", "lean", "--steps", "1", "--run-dir", str(run_dir),
                           f"env_config.server_url={url}"], capture_output=True, text=True, timeout=60)
    assert time.monotonic() - started < 10  # interpreter start and imports included
    assert done.returncode == 2, done.stderr[-2000:]
    line = one_line_error(done.stderr)
    assert line.startswith(f"ConfigError: lean env: env_config.server_url {url} does not answer (")
    assert "start the Kimina Lean server there, or fix env_config.server_url" in line
    assert not run_dir.exists()  # refused before the run folder, the model or any env


def test_play_proves_tactic_by_tactic(monkeypatch, capsys):
    """``ragen env play lean`` with the REPL stand-in: a person types tactics separated by ||."""
    monkeypatch.setattr(sys, "stdin", io.StringIO("constructor || fail_x\nexact hp\n"))
    monkeypatch.delenv("LEAN_DOUBLE_DIR", raising=False)
    try:
        code = main(["env", "play", "lean", "--set", f"repl_command=[{sys.executable}, {DOUBLE}]", "--set", "theorem=ragen_and_swap"])
    finally:
        close_shared()
    out = capsys.readouterr().out
    assert code == 0
    assert "  'constructor': reward +0.90" in out and "  'fail_x': reward -1.10  (invalid action)" in out
    assert "  'exact hp': reward +10.90" in out
    assert out.rstrip().endswith("episode over: total reward +10.70, success True")
    assert "    9 |   constructor\n   10 |   exact hp" in out  # the finished proof, rejected tactic dropped
    assert os.environ.get("LEAN_DOUBLE_DIR") is None


def test_repl_command_takes_a_string_or_a_bare_word_from_an_override():
    from ragen_core.config import apply_overrides

    assert LeanConfig(repl_command="lake env /r/repl").repl_command == ["lake", "env", "/r/repl"]
    parsed = apply_overrides({}, ["repl_command=true"])  # YAML reads the bare word as a bool
    assert LeanConfig(**parsed).repl_command == ["true"]
    assert LeanConfig(repl_command=7).repl_command == ["7"]
