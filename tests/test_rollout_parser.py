"""Reply parsing (spec 5.4): table of well-formed and garbage replies, plus regex equivalence."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_core.rollout.parser import parse_reply

T = "<think>"
TC = "</think>"
A = "<answer>"
AC = "</answer>"

# (text, kwargs, ok, reasoning, answer, actions)
CASES = [
    ("<think>go left</think><answer>Left || Up</answer>", {}, True, "go left", "Left || Up", ["Left", "Up"]),
    ("<think> a\nb </think>\n  <answer>\n Left \n</answer>", {}, True, "a\nb", "Left", ["Left"]),
    ("<think>x</think><answer>Left || Up || Right</answer>", {}, True, "x", "Left || Up", ["Left", "Up"]),
    ("<think>x</think><answer>Left || Up || Right</answer>", {"max_actions": 5}, True, "x", "Left || Up || Right", ["Left", "Up", "Right"]),
    ("<think>x</think><answer>|| Left |||| ||</answer>", {}, True, "x", "|| Left |||| ||", ["Left"]),
    ("<think>x</think><answer></answer>", {}, True, "x", "", []),
    ("<think></think><answer>Up</answer><|im_end|>", {}, True, "", "Up", ["Up"]),
    ("<think>x</think><answer>a<|im_end|>b || <|im_start|>c</answer>", {}, True, "x", "ab || c", ["ab", "c"]),
    ("<think>x</think><answer>1 + 2 || 3</answer>", {"action_sep": None}, True, "x", "1 + 2 || 3", ["1 + 2 || 3"]),
    ("<think>x</think><answer>   </answer>", {"action_sep": None}, True, "x", "", []),
    ("<answer>Left</answer>", {"think": False}, True, None, "Left", ["Left"]),
    ("<think>ignored</think><answer>Left</answer>", {"think": False}, True, None, "Left", ["Left"]),
    ("junk <think>a</think> <answer>B</answer> more <think>c</think><answer>D</answer>", {}, True, "a", "B", ["B"]),
    # Non-greedy think capture runs to the first </think> followed by <answer>.
    ("<think>a</think> mid <think>b</think><answer>C</answer>", {}, True, "a mid b", "C", ["C"]),
    ("<think>a <think>b</think><answer>C</answer>", {}, True, "a b", "C", ["C"]),
    ("<think>x</think><answer>a <answer>b</answer></answer>", {}, True, "x", "a b", ["a b"]),
    # Failures.
    ("", {}, False, None, None, []),
    ("Left || Up", {}, False, None, None, []),
    ("<answer>Left</answer>", {}, False, None, None, []),
    ("<think>x</think>", {}, False, None, None, []),
    ("<think>x</think> junk <answer>Left</answer>", {}, False, None, None, []),
    ("<think>x</think><answer>Left", {}, False, None, None, []),
    ("<think>x<answer>Left</answer>", {}, False, None, None, []),
    ("<answer>Left</answer><think>x</think>", {}, False, None, None, []),
    ("</think><answer>Left</answer>", {}, False, None, None, []),
    ("<answer>Left", {"think": False}, False, None, None, []),
    ("\x00\xff\ufffd<think>\x00</think><answer>\x01</answer>", {}, True, "\x00", "\x01", ["\x01"]),
]


@pytest.mark.parametrize(("text", "kwargs", "ok", "reasoning", "answer", "actions"), CASES)
def test_parse_table(text, kwargs, ok, reasoning, answer, actions):
    r = parse_reply(text, **kwargs)
    assert (r.ok, r.reasoning, r.answer, r.actions) == (ok, reasoning, answer, actions)
    if not ok:
        assert r.reconstructed == text


def test_reconstructed_forms():
    r = parse_reply("<think> plan </think>\n<answer> Left || Up || Down </answer>")
    assert r.reconstructed == "<think>plan</think><answer>Left || Up</answer>"
    r = parse_reply("<answer> Left </answer>", think=False)
    assert r.reconstructed == "<answer>Left</answer>"


def test_custom_separator_rebuild():
    r = parse_reply("<think>t</think><answer>a, b, c</answer>", action_sep=",", max_actions=2)
    assert r.actions == ["a", "b"] and r.answer == "a , b"


def test_zero_cap_keeps_nothing():
    r = parse_reply("<think>t</think><answer>a || b</answer>", max_actions=0)
    assert r.ok and r.actions == [] and r.answer == ""


def test_non_string_input_never_raises():
    assert parse_reply(None).ok is False  # type: ignore[arg-type]
    assert parse_reply(b"<answer>x\xff</answer>", think=False).actions == ["x\ufffd"]  # type: ignore[arg-type]
    assert parse_reply(12).ok is False  # type: ignore[arg-type]


def test_huge_adversarial_reply_is_fast_and_fails():
    text = "<think>" * 200_000 + "</think>" * 1000
    r = parse_reply(text)
    assert not r.ok
    big = "<think>" + "x" * 1_000_000 + "</think><answer>Up</answer>"
    assert parse_reply(big).actions == ["Up"]


_REF_THINK = re.compile(r"<think>(.*?)</think>\s*<answer>(.*?)</answer>", re.DOTALL)
_REF_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)

_pieces = st.sampled_from([T, TC, A, AC, " ", "\n", "x", "Up", "||", "<|im_end|>", "<"])


@settings(max_examples=400, deadline=None)
@given(st.lists(_pieces, max_size=14), st.booleans())
def test_matches_reference_regex(pieces, think):
    text = "".join(pieces)
    r = parse_reply(text, think=think, max_actions=99)
    m = (_REF_THINK if think else _REF_ANSWER).search(text)
    assert r.ok == (m is not None)
    if m is not None:
        clean = [g for g in m.groups()]
        for s in (T, TC, A, AC, "<|im_start|>", "<|im_end|>"):
            clean = [c.replace(s, "") for c in clean]
        clean = [c.strip() for c in clean]
        assert r.answer == clean[-1]
        if think:
            assert r.reasoning == clean[0]
