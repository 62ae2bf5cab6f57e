"""A stand-in for the Lean REPL used by the transport tests: it speaks the REPL's message shapes
(JSON commands separated by blank lines; ``{"env", "messages", "sorries"}`` or
``{"message"}`` replies) but proves nothing. Its verdicts follow fixed rules on the tactic lines
(the lines after the statement's ``:= by``), so the tests can drive every path of the process
management:

* ``sorry`` / ``admit``: a ``declaration uses 'sorry'`` warning and one sorry;
* a tactic starting with ``fail``: an ``unknown tactic`` error on its line;
* ``sleep S``: answer after S seconds; ``crash``: exit without answering;
  ``crash_once``: exit the first time (a flag file in ``$LEAN_DOUBLE_DIR`` remembers it);
  ``garbage``: answer text that is not JSON; ``hog``: hold 100 MB until exit;
* otherwise the proof is closed when its last tactic is one of the closing words below, and
  an ``unsolved goals`` error on the statement line is reported when it is not; a term proof
  without ``:= by`` (the env's start-up probe ``example : True := trivial``) is proved.

A command without ``env`` is a header: ``import Nope`` gives an error, anything else a new env
id. An unknown ``env`` gets ``{"message": "Unknown environment."}``. With ``$LEAN_DOUBLE_DIR`` set,
every request is appended to ``requests.jsonl`` there.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

CLOSING = ("omega", "ring", "linarith", "nlinarith", "norm_num", "exact", "positivity", "decide", "simp", "rfl",
           "linear_combination")
hog: list[bytes] = []


def answer(request: dict) -> dict | None:
    text = request.get("cmd", "")
    if "env" not in request:
        if "import Nope" in text:
            return {"messages": [{"severity": "error", "pos": {"line": 1, "column": 0}, "endPos": {"line": 1, "column": 11},
                                  "data": "unknown module prefix 'Nope'"}], "env": 0}
        answer.envs += 1  # type: ignore[attr-defined]
        return {"env": answer.envs - 1}  # type: ignore[attr-defined]
    if request["env"] >= answer.envs:  # type: ignore[attr-defined]
        return {"message": "Unknown environment."}
    lines = text.split("\n")
    if not any(line.rstrip().endswith(":= by") for line in lines):  # a term proof (the env's probe): proved
        return {"env": request["env"] + 100, "messages": [], "sorries": []}
    start = next(i for i, line in enumerate(lines) if line.rstrip().endswith(":= by"))
    messages, sorries = [], []
    tactics = [(i + 1, line.strip()) for i, line in enumerate(lines) if i > start and line.strip()]
    for number, tactic in tactics:
        if tactic.startswith("sleep"):
            time.sleep(float(tactic.split()[1]))
        elif tactic == "crash":
            sys.exit(3)
        elif tactic == "crash_once":
            flag = Path(os.environ["LEAN_DOUBLE_DIR"]) / "crashed"
            if not flag.exists():
                flag.write_text("1")
                sys.exit(3)
        elif tactic == "garbage":
            return None
        elif tactic == "hog":
            hog.append(b"x" * (100 << 20))
        elif tactic in ("sorry", "admit"):
            sorries.append({"pos": {"line": number, "column": 2}, "endPos": {"line": number, "column": 7}, "goal": "⊢ False"})
            messages.append({"severity": "warning", "pos": {"line": start + 1, "column": 8},
                             "endPos": {"line": start + 1, "column": 12}, "data": "declaration uses 'sorry'"})
        elif tactic.startswith("fail"):
            messages.append({"severity": "error", "pos": {"line": number, "column": 2}, "endPos": {"line": number, "column": 2 + len(tactic)},
                             "data": f"unknown tactic '{tactic}'"})
    closed = bool(tactics) and tactics[-1][1].split(" ")[0] in CLOSING
    if not closed and not sorries and not any(m["severity"] == "error" for m in messages):
        messages.append({"severity": "error", "pos": {"line": start + 1, "column": len(lines[start]) - 2},
                         "endPos": {"line": len(lines), "column": len(lines[-1])}, "data": "unsolved goals\n⊢ goal"})
    return {"env": request["env"] + 100, "messages": messages, "sorries": sorries}


answer.envs = 0  # type: ignore[attr-defined]


def main() -> None:
    buffer: list[str] = []
    for line in sys.stdin:
        if line.strip():
            buffer.append(line)
            continue
        if not buffer:
            continue
        request, buffer = json.loads("".join(buffer)), []
        if os.environ.get("LEAN_DOUBLE_DIR"):
            with open(Path(os.environ["LEAN_DOUBLE_DIR"]) / "requests.jsonl", "a", encoding="utf-8") as log:
                log.write(json.dumps(request, ensure_ascii=False) + "\n")
        reply = answer(request)
        sys.stdout.write("this is not json\n\n" if reply is None else json.dumps(reply, ensure_ascii=False) + "\n\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
