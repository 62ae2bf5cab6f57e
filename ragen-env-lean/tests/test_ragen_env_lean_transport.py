"""Transport faults of both backends, against a real process and a real HTTP server of the test's
own that speak the protocols' message shapes (tests/lean_repl_double.py; a small HTTP handler
here). They prove the process and request management, not proofs: the stand-ins follow fixed
rules (see the double's docstring)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from ragen_env_lean.availability import check_available
from ragen_env_lean.checker import NotLeanReply, parse_response, verdict
from ragen_env_lean.config import LeanConfig
from ragen_env_lean.env import LeanEnv
from ragen_env_lean.repl import ReplChecker, ReplProcess, close_shared
from ragen_env_lean.server import ServerChecker
from ragen_env_lean.statements import proof_text

from ragen_core.errors import ConfigError

DOUBLE = str(Path(__file__).with_name("lean_repl_double.py"))
HEADER = "import Mathlib\nimport Aesop"
BODY = "open Nat\n\ntheorem t (a : ℕ) : a = a := by\n  {}"


@pytest.fixture
def double_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LEAN_DOUBLE_DIR", str(tmp_path))
    yield tmp_path
    close_shared()


def _requests(folder: Path) -> list[dict]:
    path = folder / "requests.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


def _repl_env(**overrides) -> LeanEnv:
    env = LeanEnv(LeanConfig(repl_command=[sys.executable, DOUBLE], theorem="ragen_and_swap", **overrides))
    env.reset(0)
    return env


def _process(timeout: float = 10.0, memory_mb: int = 4096) -> ReplProcess:
    return ReplProcess([sys.executable, DOUBLE], None, timeout=timeout, start_timeout=10.0, memory_mb=memory_mb)


# ---------------------------------------------------------------------------- REPL process
def test_header_is_elaborated_once_and_its_env_reused(double_dir):
    proc = _process()
    try:
        first = proc.check(HEADER, BODY.format("rfl"))
        second = proc.check(HEADER, BODY.format("fail_here"))
    finally:
        proc.stop()
    assert [r.get("env") for r in _requests(double_dir)] == [None, 0, 0]
    assert _requests(double_dir)[0] == {"cmd": HEADER}
    assert (first.status, first.messages, proc.starts) == ("ok", (), 1)
    # the failing tactic is line 4 of the body, line 7 of the full text (2 header lines + blank)
    (message,) = second.messages
    assert (message.severity, message.line, message.text) == ("error", 7, "unknown tactic 'fail_here'")
    full = f"{HEADER}\n\n{BODY.format('fail_here')}".split("\n")
    assert full[message.line - 1] == "  fail_here"


def test_checker_dies_mid_proof_and_is_restarted(double_dir):
    env = _repl_env()
    first = env.step("constructor")
    assert (first.info["status"], first.info["action_is_valid"], first.info["success"]) == ("ok", True, False)
    checker = env._checker
    assert isinstance(checker, ReplChecker)
    (proc,) = checker.processes
    os.killpg(proc.pid, signal.SIGKILL)  # the REPL dies between two steps
    time.sleep(0.2)
    second = env.step("exact hq")
    assert second.info["status"] == "ok" and proc.starts == 2
    # the new process got the header again and the whole accepted proof
    last = _requests(double_dir)[-2:]
    assert last[0] == {"cmd": env.theorem.imports}
    assert last[1]["cmd"].endswith("  constructor\n  exact hq")


def test_crash_during_a_check_is_retried_once_on_a_fresh_process(double_dir):
    env = _repl_env()
    result = env.step("crash_once")  # the first process exits while checking; the retry answers
    assert (result.info["status"], result.info["action_is_valid"]) == ("ok", True)
    assert env._checker.processes[0].starts == 2
    dead = env.step("crash")  # dies every time: reported, not guessed
    assert (dead.info["status"], dead.info["action_is_valid"], dead.reward) == ("server_error", False, pytest.approx(-1.1, abs=1e-12))
    assert dead.info["error"].startswith("Lean REPL exited (code 3)")
    assert "[SERVER_ERROR] Lean REPL exited (code 3)" in dead.observation


def test_tactic_timeout_kills_the_process_and_the_next_check_starts_anew(double_dir):
    env = _repl_env(request_timeout=1.0)
    started = time.monotonic()
    slow = env.step("sleep 30")
    assert time.monotonic() - started < 10
    assert (slow.info["status"], slow.info["action_is_valid"]) == ("timeout", False)
    # -0.1 step, -1.0 rejected, -1.0 timeout: sums of one-decimal constants, equal to 1e-12
    assert slow.reward == pytest.approx(-2.1, abs=1e-12)
    assert slow.info["error"] == "Lean REPL timed out after 1 s"
    proc = env._checker.processes[0]
    assert proc.pid is None
    assert env.step("constructor").info["status"] == "ok" and proc.starts == 2


def test_malformed_json_is_a_server_error_after_one_retry(double_dir):
    env = _repl_env()
    bad = env.step("garbage")
    assert (bad.info["status"], bad.info["action_is_valid"]) == ("server_error", False)
    assert bad.info["error"].startswith("Lean REPL sent malformed JSON: 'this is not json")
    proc = env._checker.processes[0]
    assert proc.starts == 2 and proc.pid is None
    assert env.step("constructor").info["status"] == "ok" and proc.starts == 3


def test_memory_above_the_limit_restarts_before_the_next_check(double_dir):
    proc = _process(memory_mb=64)
    try:
        assert proc.check(HEADER, BODY.format("rfl")).status == "ok"
        assert proc.pid is not None and proc.memory_mb_used() < 64
        assert proc.check(HEADER, BODY.format("hog")).status == "ok"  # the answer is kept ...
        assert proc.pid is None  # ... and the 100 MB process is gone
        assert proc.check(HEADER, BODY.format("rfl")).status == "ok" and proc.starts == 2
    finally:
        proc.stop()


def test_header_errors_and_repl_level_messages_reject(double_dir):
    proc = _process()
    try:
        broken = proc.check("import Nope", BODY.format("rfl"))
        assert broken.status == "ok" and broken.messages[0].text == "unknown module prefix 'Nope'"
        assert verdict(broken).accepted is False
        reply = proc.request({"cmd": "example : True := trivial", "env": 99}, 5.0)
    finally:
        proc.stop()
    refused = parse_response(reply)
    assert (refused.status, refused.error) == ("repl_error", "Unknown environment.")
    assert verdict(refused) == verdict(refused).__class__(False, False, False, False)


def test_a_missing_program_is_a_server_error_not_a_verdict(tmp_path):
    proc = ReplProcess([str(tmp_path / "no-such-repl")], None, timeout=5.0, start_timeout=5.0, memory_mb=4096)
    try:
        result = proc.check(HEADER, BODY.format("rfl"))
    finally:
        proc.stop()
    assert result.status == "server_error"
    # Linux starts it through the parent-death shim (which reports the exec failure), elsewhere Popen fails
    assert result.error.startswith(("Lean REPL exited (code 127): cannot run", "Lean REPL could not start")), result.error
    assert "no-such-repl" in result.error


# ---------------------------------------------------------------------------- HTTP server
class _Server:
    """A Kimina-shaped server: each POST takes the next planned behaviour (the last one repeats)."""

    def __init__(self, plan: list[tuple]) -> None:
        self.plan, self.seen = list(plan), []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.seen.append((self.path, dict(self.headers), body))
                kind, *args = outer.plan.pop(0) if len(outer.plan) > 1 else outer.plan[0]
                if kind == "slow":
                    time.sleep(args[0])
                    kind = "ok"
                if kind == "status":
                    self.send_response(args[0])
                    self.end_headers()
                    self.wfile.write(b"boom")
                    return
                if kind == "empty":  # a server that answers every snippet with {} (not a REPL response)
                    results = [{"id": s["id"], "time": 0.1, "error": None, "response": {}} for s in body["snippets"]]
                else:
                    results = [outer.result(s) for s in body["snippets"]]
                text = b"<html>not json" if kind == "garbage" else json.dumps({"results": results}).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(text)
                except BrokenPipeError:  # the client gave up waiting (the slow-server test)
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @staticmethod
    def result(snippet: dict) -> dict:
        code = snippet["code"]
        if "leantimeout" in code:
            return {"id": snippet["id"], "time": 0.1, "error": "Lean REPL command timed out", "response": None}
        last = code.rstrip().split("\n")[-1].strip()
        messages = [] if last in ("omega", "exact hp") or last.endswith(":= trivial") else [  # proved; the probe too
            {"severity": "error", "pos": {"line": 7, "column": 60}, "endPos": {"line": 8, "column": 5}, "data": f"unsolved goals\n{last}"}]
        return {"id": snippet["id"], "time": 0.25, "error": None, "response": {"env": 0, "messages": messages}}

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server(request):
    made: list[_Server] = []

    def start(*plan: tuple) -> _Server:
        made.append(_Server(list(plan) or [("ok",)]))
        return made[-1]

    yield start
    for s in made:
        s.close()


def _client(url: str, **kw) -> ServerChecker:
    return ServerChecker(url, **{"retry_backoff": 0.01, **kw})


def test_request_shape_and_api_key(server):
    srv = server(("ok",))
    result = _client(srv.url, api_key="sekret", request_timeout=12.0).check(HEADER, BODY.format("omega"))
    assert (result.status, result.messages, result.time_s) == ("ok", (), 0.25)
    path, headers, body = srv.seen[0]
    assert path == "/api/check" and headers["Authorization"] == "Bearer sekret"
    assert body["timeout"] == 12.0 and body["reuse"] is True and body["debug"] is False
    assert [s["code"] for s in body["snippets"]] == [f"{HEADER}\n\n{BODY.format('omega')}"]


def test_http_500_is_retried_with_backoff_then_succeeds(server):
    srv = server(("status", 500), ("status", 503), ("ok",))
    client = _client(srv.url, max_retries=3)
    assert client.check(HEADER, BODY.format("omega")).status == "ok"
    assert client.requests == 3


def test_http_500_past_the_retries_is_a_server_error(server):
    srv = server(("status", 500))
    client = _client(srv.url, max_retries=2)
    result = client.check(HEADER, BODY.format("omega"))
    assert (result.status, result.error, client.requests) == ("server_error", "Lean server answered HTTP 500: boom", 3)


def test_client_errors_are_not_retried(server):
    srv = server(("status", 401))
    client = _client(srv.url, max_retries=3)
    result = client.check(HEADER, BODY.format("omega"))
    assert (result.status, result.error, client.requests) == ("server_error", "Lean server answered HTTP 401: boom", 1)


def test_slow_server_times_out(server):
    srv = server(("slow", 3.0))
    client = _client(srv.url, http_timeout=0.5, max_retries=1)
    started = time.monotonic()
    result = client.check(HEADER, BODY.format("omega"))
    assert time.monotonic() - started < 2.5  # two attempts of 0.5 s, not the server's 3 s each
    assert (result.status, result.error, client.requests) == ("timeout", "Lean server request timed out after 0.5 s", 2)


def test_malformed_reply_is_retried(server):
    srv = server(("garbage",), ("ok",))
    client = _client(srv.url, max_retries=1)
    assert client.check(HEADER, BODY.format("omega")).status == "ok" and client.requests == 2
    srv2 = server(("garbage",))
    failed = _client(srv2.url, max_retries=0).check(HEADER, BODY.format("omega"))
    assert (failed.status, failed.error) == ("server_error", "Lean server sent a malformed reply: '<html>not json'")


def test_batches_keep_order(server):
    srv = server(("ok",))
    client = _client(srv.url, batch_size=2)
    items = [(HEADER, BODY.format(t)) for t in ("omega", "simp", "omega", "ring", "omega")]
    results = client.check_many(items)
    assert [len(body["snippets"]) for _, _, body in srv.seen] == [2, 2, 1]
    assert [bool(r.messages) for r in results] == [False, True, False, True, False]
    assert results[1].messages[0].text == "unsolved goals\nsimp"


def test_unreachable_server_is_a_server_error():
    client = _client("http://127.0.0.1:9", max_retries=1)  # the discard port: nothing listens on loopback
    result = client.check(HEADER, BODY.format("omega"))
    assert result.status == "server_error" and result.error.startswith("Lean server unreachable at http://127.0.0.1:9")


def test_env_over_the_server_rewards_from_lean_verdicts(server):
    srv = server(("ok",))
    env = LeanEnv(LeanConfig(server_url=srv.url, theorem="ragen_and_swap", retry_backoff=0.01))
    env.reset(3)
    steps = [env.step(t) for t in ("constructor", "leantimeout", "exact hp")]
    assert [s.info["status"] for s in steps] == ["ok", "timeout", "ok"]
    assert [s.info["action_is_valid"] for s in steps] == [True, False, True]
    # one-decimal constant sums; 1e-12 absorbs their binary rounding
    assert [s.reward for s in steps] == [pytest.approx(v, abs=1e-12) for v in (0.9, -2.1, 10.9)]
    assert steps[-1].done and steps[-1].info["success"]
    assert srv.seen[-1][2]["snippets"][0]["code"] == proof_text(env.theorem, ["constructor", "exact hp"])


# ---------------------------------------------------------------------------- not a Lean checker
#: Answers every request (blank-line separated, like the REPL) with ``{}``.
ANSWERS_EMPTY = ("import sys\nbuf = []\nfor line in sys.stdin:\n    if line.strip():\n        buf.append(line)\n"
                 "    elif buf:\n        buf = []\n        sys.stdout.write('{}\\n\\n')\n        sys.stdout.flush()\n")
#: Writes ``{}`` without the blank line a REPL ends its replies with, then hangs (``sh -c 'echo {}; sleep 100'``).
ANSWERS_EMPTY_THEN_HANGS = "import sys, time\nsys.stdout.write('{}\\n')\nsys.stdout.flush()\ntime.sleep(100)\n"
#: Echoes its input, like ``cat``, on machines without one.
ECHOES = "import sys\nfor line in sys.stdin:\n    sys.stdout.write(line)\n    sys.stdout.flush()\n"


def _cat() -> list[str]:
    cat = shutil.which("cat")
    return [cat] if cat else [sys.executable, "-c", ECHOES]


@pytest.mark.parametrize("reply", [{}, {"cmd": HEADER}, {"cmd": BODY, "env": 0}, {"id": "x", "result": "ok"}, [], None,
                                   {"env": 0, "messages": "oops"}], ids=repr)
def test_parse_response_refuses_what_is_not_a_repl_response(reply):
    with pytest.raises(ValueError) as raised:  # the documented ValueError ...
        parse_response(reply)
    assert isinstance(raised.value, NotLeanReply)  # ... of the kind that says "not a Lean checker"


def test_parse_response_keeps_the_real_shapes():
    assert (parse_response({"env": 0}).status, parse_response({"env": 0}).not_lean) == ("ok", False)
    assert parse_response({"messages": [], "sorries": []}).status == "ok"
    assert parse_response({"message": "Unknown environment."}).status == "repl_error"
    with pytest.raises(ValueError) as malformed:
        parse_response({"env": 0, "messages": [{"severity": "error"}]})
    assert not isinstance(malformed.value, NotLeanReply)  # a REPL response with a broken message: a transport fault


@pytest.mark.parametrize("command", [_cat(), [sys.executable, "-c", ECHOES], [sys.executable, "-c", ANSWERS_EMPTY],
                                     [sys.executable, "-c", ANSWERS_EMPTY_THEN_HANGS]],
                         ids=["cat", "python-echo", "python-empty", "empty-then-hangs"])
def test_a_process_that_is_not_a_repl_is_flagged_at_once(command):
    proc = ReplProcess(command, None, timeout=10.0, start_timeout=10.0, memory_mb=4096)
    started = time.monotonic()
    try:
        result = proc.check(HEADER, BODY.format("rfl"))
    finally:
        proc.stop()
    assert (result.status, result.not_lean, verdict(result).accepted) == ("server_error", True, False)
    assert time.monotonic() - started < 8  # a whole JSON reply is read at once: "{}" then silence ran into the 10 s timeout
    assert proc.starts == 1 and proc.pid is None  # stopped, and not retried: a retry would get the same


@pytest.mark.parametrize("command", [_cat(), [sys.executable, "-c", ANSWERS_EMPTY], [sys.executable, "-c", "pass"],
                                     [sys.executable, "-c", "import time; time.sleep(60)"]],
                         ids=["cat", "python-empty", "exits-at-once", "never-answers"])
def test_env_reset_with_a_command_that_is_not_a_repl_refuses_in_one_line(command):
    # a program that exits or never answers proves nothing either: every verdict must come from Lean
    env = LeanEnv(LeanConfig(repl_command=command, theorem="ragen_and_swap", request_timeout=2.0))
    try:
        with pytest.raises(ConfigError) as refused:
            env.reset(0)
    finally:
        close_shared()
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"lean env: env_config.repl_command {shlex.join(command)!r} is not a Lean REPL (")
    assert "set env_config.repl_command to the community Lean REPL" in message


def test_a_server_answering_empty_results_is_not_a_lean_server(server):
    srv = server(("empty",))
    result = _client(srv.url, max_retries=3).check(HEADER, BODY.format("omega"))
    assert (result.status, result.not_lean, verdict(result).accepted) == ("server_error", True, False)
    assert "none of a REPL response's fields" in result.error
    env = LeanEnv(LeanConfig(server_url=srv.url, theorem="ragen_and_swap"))
    with pytest.raises(ConfigError) as refused:
        env.reset(0)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"lean env: env_config.server_url {srv.url} is not a Kimina Lean server (")


def test_no_check_endpoint_is_not_a_lean_server(server):
    srv = server(("status", 404))
    result = _client(srv.url, max_retries=3).check(HEADER, BODY.format("omega"))
    assert (result.status, result.not_lean) == ("server_error", True)
    assert len(srv.seen) == 1


# ---------------------------------------------------------------------------- dead server at start
def _closed_port_url() -> str:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_a_dead_server_url_is_refused_at_start_in_one_line():
    url = _closed_port_url()
    started = time.monotonic()
    for make in (lambda: check_available(LeanConfig(server_url=url)), lambda: LeanEnv(LeanConfig(server_url=url))):
        with pytest.raises(ConfigError) as refused:
            make()
        message = str(refused.value)
        assert "\n" not in message
        assert message.startswith(f"lean env: env_config.server_url {url} does not answer (")
        assert "start the Kimina Lean server there, or fix env_config.server_url" in message
    assert time.monotonic() - started < 10


def test_a_live_server_url_passes_the_start_check(server):
    srv = server(("ok",))
    check_available(LeanConfig(server_url=srv.url))  # a GET /health the stand-in does not serve (501) still says "up"
    assert srv.seen == []  # the start check sends no proof



def test_a_repl_that_dies_before_reading_reports_its_exit_code(monkeypatch):
    """The request is written after the program is gone (a broken pipe): the error names its exit
    code as when it dies later ('exited (BrokenPipeError)' made the missing-program test flaky)."""
    proc = ReplProcess(["sh", "-c", "echo 'no REPL here' >&2; exit 3"], None, timeout=5.0, start_timeout=5.0, memory_mb=4096)
    start = proc._start

    def start_and_let_it_die():
        started = start()
        started.wait(timeout=10)
        return started

    monkeypatch.setattr(proc, "_start", start_and_let_it_die)
    try:
        result = proc.check(HEADER, BODY.format("rfl"))
    finally:
        proc.stop()
    assert result.status == "server_error"
    assert result.error.startswith("Lean REPL exited (code 3)"), result.error
