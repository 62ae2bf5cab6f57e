"""Real checking: verdicts from a real Lean 4 with Mathlib. Skipped (with the reason) unless a
checker is named by environment variables:

* local REPL: ``RAGEN_LEAN_REPL`` = the command (e.g. ``lake env /opt/repl/.lake/build/bin/repl``)
  and ``RAGEN_LEAN_PROJECT`` = the Mathlib project folder it runs in;
* or a Kimina server: ``RAGEN_LEAN_SERVER`` = its URL (``RAGEN_LEAN_API_KEY`` if it needs one).

Command (see the package README)::

    RAGEN_LEAN_REPL="lake env $HOME/repl/.lake/build/bin/repl" RAGEN_LEAN_PROJECT=$HOME/mathlib4 \\
        python -m pytest -p no:xdist ragen-env-lean/tests/test_ragen_env_lean_real.py ragen-env-lean/tests/test_ragen_env_lean_conformance.py
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from ragen_env_lean.builtin import builtin_theorems
from ragen_env_lean.checker import make_checker, verdict
from ragen_env_lean.config import LeanConfig
from ragen_env_lean.env import LeanEnv
from ragen_env_lean.repl import close_shared
from ragen_env_lean.statements import body_text, make_theorem

SAMPLE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "minif2f-sample" / "lean"
REAL = {
    "repl_command": os.environ.get("RAGEN_LEAN_REPL") or None,
    "repl_cwd": os.environ.get("RAGEN_LEAN_PROJECT") or None,
    "server_url": os.environ.get("RAGEN_LEAN_SERVER") or None,
    "api_key": os.environ.get("RAGEN_LEAN_API_KEY") or None,
}
_lean = shutil.which("lean")
pytestmark = pytest.mark.skipif(
    not (REAL["repl_command"] or REAL["server_url"]),
    reason=("needs a real Lean checker: set RAGEN_LEAN_REPL (+ RAGEN_LEAN_PROJECT) or RAGEN_LEAN_SERVER "
            f"({'lean is at ' + _lean + ' but no REPL is named' if _lean else 'no lean on PATH'})"),
)


@pytest.fixture
def make_env():
    def make(theorem: str) -> LeanEnv:
        env = LeanEnv(LeanConfig(**{k: v for k, v in REAL.items() if v}, theorem=theorem, request_timeout=300.0,
                                 repl_start_timeout=900.0))
        env.reset(0)
        return env

    yield make
    close_shared()


def test_correct_proof_is_accepted_then_succeeds(make_env):
    env = make_env("ragen_eval_poly")
    first = env.step("subst h₀")
    assert (first.info["action_is_valid"], first.info["success"], first.done) == (True, False, False)
    assert any(m["text"].startswith("unsolved goals") for m in first.info["messages"])
    last = env.step("norm_num")
    assert (last.info["action_is_valid"], last.info["success"], last.done) == (True, True, True)


def test_wrong_tactic_is_rejected_with_leans_message(make_env):
    env = make_env("ragen_linear_eq")
    result = env.step("exact ragen_no_such_lemma")
    assert result.info["action_is_valid"] is False and result.info["status"] == "ok"
    assert any("unknown identifier 'ragen_no_such_lemma'" in m["text"] for m in result.info["messages"])
    assert "[ERROR " in result.observation
    assert env.step("linarith").info["success"] is True  # the rejected tactic was dropped


def test_sorry_is_rejected(make_env):
    env = make_env("ragen_linear_eq")
    result = env.step("sorry")
    assert (result.info["action_is_valid"], result.info["success"]) == (False, False)
    assert any("sorry" in m["text"] for m in result.info["messages"])


def test_unsolved_goals_are_accepted_but_not_success(make_env):
    env = make_env("ragen_and_swap")
    result = env.step("constructor")
    assert (result.info["action_is_valid"], result.info["success"]) == (True, False)
    assert "UNSOLVED GOALS" in result.observation


def test_every_builtin_proof_is_accepted_by_lean(make_env):
    found = builtin_theorems()
    for theorem in found.train + found.val:
        env = make_env(theorem.name)
        results = [env.step(t) for t in theorem.proof]
        assert all(r.info["action_is_valid"] for r in results), (theorem.name, results[-1].info["messages"])
        assert results[-1].info["success"], (theorem.name, results[-1].info["messages"])


@pytest.mark.skipif(not SAMPLE.is_dir(), reason=f"miniF2F sample not found at {SAMPLE}")
def test_minif2f_statements_elaborate_and_sorry_is_refused(make_env):
    checker = make_checker(make_env("ragen_linear_eq").config)
    for path in sorted(SAMPLE.glob("*.lean"))[:3]:
        theorem = make_theorem(path.stem, path.read_text(encoding="utf-8"))
        result = checker.check(theorem.imports, body_text(theorem, ["sorry"]))
        assert result.status == "ok", (path.name, result.error)
        errors = [m for m in result.messages if m.severity == "error"]
        assert not errors, (path.name, errors)  # the statement elaborates under this Mathlib
        assert any(m.text.startswith("declaration uses 'sorry'") for m in result.messages)
        assert verdict(result).accepted is False
