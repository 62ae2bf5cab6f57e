"""Turn a model reply into actions (spec 5.4); never raises, whatever the text.

A reply is valid when it contains a ``<think>...</think>`` block followed (after optional
whitespace) by an ``<answer>...</answer>`` block -- or, without thinking, just an answer block.
The first such pair counts; both captures are non-greedy and may span lines. Special strings
(the four tags and the ChatML markers) are removed from the captures, the answer is split on
the env's action separator, empty pieces are dropped and at most ``max_actions`` are kept.

The parse result is used only to drive the environment and for reports: training uses the
sampled token ids, not :attr:`ParsedReply.reconstructed` (spec 17 L1), unless the run sets
``compat.retokenized_text`` (the reference's text, in history and training).

Matching is done with ``str.find`` and one anchored regex per candidate instead of a single
``.*?`` regex, so an adversarial reply (thousands of unclosed ``<think>`` tags) costs linear
time. The result is the same as the reference's non-greedy regex: if any match exists, one
starts at the first ``<think>``, and its think part ends at the first ``</think>`` that is
followed by whitespace and ``<answer>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
#: Strings removed from the captured think and answer text.
SPECIAL_STRINGS = (THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE, "<|im_start|>", "<|im_end|>")

_CLOSE_THEN_ANSWER = re.compile(r"</think>\s*<answer>")


@dataclass(frozen=True)
class ParsedReply:
    """What a reply says, as far as the environment is concerned."""

    reasoning: str | None
    """Cleaned think text; None in no-think mode or when the reply did not parse."""
    answer: str | None
    """Cleaned answer text (rebuilt from the kept actions when some were cut); None if no parse."""
    actions: list[str] = field(default_factory=list)
    """Non-empty action strings, at most ``max_actions`` of them, in reply order."""
    ok: bool = False
    """The reply had the required block structure."""
    reconstructed: str = ""
    """``<think>R</think><answer>A</answer>`` (or the raw text when it did not parse)."""


def _clean(text: str) -> str:
    for s in SPECIAL_STRINGS:
        text = text.replace(s, "")
    return text.strip()


def _find_blocks(text: str, think: bool) -> tuple[str | None, str] | None:
    """Return ``(raw think, raw answer)`` of the first valid block structure, or None."""
    if think:
        start = text.find(THINK_OPEN)
        if start < 0:
            return None
        body = start + len(THINK_OPEN)
        m = _CLOSE_THEN_ANSWER.search(text, body)
        if m is None:
            return None
        end = text.find(ANSWER_CLOSE, m.end())
        if end < 0:
            return None
        return text[body : m.start()], text[m.end() : end]
    start = text.find(ANSWER_OPEN)
    if start < 0:
        return None
    body = start + len(ANSWER_OPEN)
    end = text.find(ANSWER_CLOSE, body)
    if end < 0:
        return None
    return None, text[body:end]


def parse_reply(text: str, *, think: bool = True, action_sep: str | None = "||", max_actions: int = 2) -> ParsedReply:
    """Parse a reply (with its generation prefix already put back in front).

    Args:
        text: The decoded reply, e.g. ``"<think>go left</think><answer>Left || Up</answer>"``.
        think: Require a think block before the answer block.
        action_sep: Separator between actions; None means the whole answer is one action
            (free-form answers such as code or equations).
        max_actions: Keep at most this many actions; when some are cut, the answer text is
            rebuilt from the kept ones joined with ``" {sep} "``.

    Returns:
        A :class:`ParsedReply`; ``ok`` is False (and ``actions`` empty) when the structure is
        missing. An answer block that is present but empty parses with no actions.
    """
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    elif not isinstance(text, str):
        text = "" if text is None else str(text)
    found = _find_blocks(text, think)
    if found is None:
        return ParsedReply(reasoning=None, answer=None, actions=[], ok=False, reconstructed=text)
    raw_think, raw_answer = found
    reasoning = _clean(raw_think) if raw_think is not None else None
    answer = _clean(raw_answer)
    if action_sep is None:
        actions = [answer] if answer else []
    else:
        actions = [a.strip() for a in answer.split(action_sep)]
        actions = [a for a in actions if a]
    cap = max(0, max_actions)
    if len(actions) > cap:
        actions = actions[:cap]
        answer = f" {action_sep} ".join(actions) if action_sep is not None else (actions[0] if actions else "")
    body = f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}"
    reconstructed = f"{THINK_OPEN}{reasoning}{THINK_CLOSE}{body}" if think else body
    return ParsedReply(reasoning=reasoning, answer=answer, actions=actions, ok=True, reconstructed=reconstructed)
