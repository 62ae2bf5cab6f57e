"""The observation text (spec 13.9), built from plain values so it can be tested on golden texts.

Layout, blocks separated by one blank line::

    Steps taken: 2/100 | accepted tactics: 1
    Theorem (informal):                       <- only when the theorem has an informal statement
        <statement wrapped at 88 characters, indented by four spaces>
    Proof so far:
      <numbered proof text: its last 40 lines, numbers right-aligned, at least 3 wide, "n | line">
    Recent steps:                             <- once a tactic was tried; the last 5
      (3 earlier steps omitted)
      04. simp [✗ rejected]
      05. norm_num [✓ accepted]
    Last Lean feedback (accepted: yes):       <- after a step
      01. [UNSOLVED GOALS 9:52 → 10:10] unsolved goals
          x : ℝ ...                           <- further lines of a message, indented

A message is ``NN. [SEVERITY line:col → line:col] text`` with an ``unsolved goals`` error labelled
``UNSOLVED GOALS``; a check that never reached Lean shows its status instead (``TIMEOUT``,
``SERVER_ERROR``, ``REPL_ERROR``, or ``NOT CHECKED`` for a tactic refused before sending).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from ragen_env_lean.checker import CheckResult, LeanMessage

TRANSCRIPT_LINES = 40
LOG_ENTRIES = 5
WRAP = 88


def numbered(text: str, last: int = TRANSCRIPT_LINES) -> list[str]:
    """The last ``last`` lines of ``text`` as ``" n | line"`` (numbers right-aligned, width >= 3)."""
    lines = text.split("\n")
    width = max(3, len(str(len(lines))))
    first = max(0, len(lines) - last)
    return [f"{i + 1:>{width}} | {line}".rstrip() for i, line in enumerate(lines) if i >= first]


def message_line(index: int, message: LeanMessage, truncate: int = 0) -> list[str]:
    """``NN. [SEVERITY l:c → l:c] text`` (continuation lines indented under the text)."""
    label = "UNSOLVED GOALS" if message.is_unsolved_goals else message.severity.upper()
    where = f"{message.line}:{message.column}"
    if message.end_line is not None:
        where += f" → {message.end_line}:{message.end_column}"
    text = message.text if not truncate or len(message.text) <= truncate else message.text[:truncate] + " …"
    first, *rest = text.split("\n") or [""]
    return [f"  {index:02d}. [{label} {where}] {first}"] + [f"      {line}" for line in rest]


def feedback_lines(result: CheckResult | None, accepted: bool, refusal: str | None, truncate: int = 0) -> list[str]:
    """The "Last Lean feedback" block of the latest step."""
    out = [f"Last Lean feedback (accepted: {'yes' if accepted else 'no'}):"]
    if refusal is not None:
        return out + [f"  01. [NOT CHECKED] {refusal}"]
    if result is None:
        return out
    if result.status != "ok":
        return out + [f"  01. [{result.status.upper()}] {result.error or 'no reason given'}"]
    if not result.messages:
        return out + ["  (no messages)"]
    for i, message in enumerate(result.messages, start=1):
        out += message_line(i, message, truncate)
    return out


def observation(*, steps: int, max_steps: int, accepted: int, informal: str, proof: str,
                log: Sequence[tuple[str, bool]], feedback: list[str] | None) -> str:
    """The whole observation (see the module docstring)."""
    blocks = [f"Steps taken: {steps}/{max_steps} | accepted tactics: {accepted}"]
    if informal:
        wrapped = textwrap.fill(" ".join(informal.split()), width=WRAP, initial_indent="    ", subsequent_indent="    ")
        blocks.append("Theorem (informal):\n" + wrapped)
    blocks.append("Proof so far:\n" + "\n".join("  " + line for line in numbered(proof)))
    if log:
        lines = ["Recent steps:"]
        if len(log) > LOG_ENTRIES:
            lines.append(f"  ({len(log) - LOG_ENTRIES} earlier steps omitted)")
        for number, (tactic, ok) in enumerate(log, start=1):
            if number > len(log) - LOG_ENTRIES:
                shown = " ⏎ ".join(tactic.split("\n")) or "(empty)"
                lines.append(f"  {number:02d}. {shown} [{'✓ accepted' if ok else '✗ rejected'}]")
        blocks.append("\n".join(lines))
    if feedback:
        blocks.append("\n".join(feedback))
    return "\n\n".join(blocks)
