"""Actions and answers: parse ``search[...]`` / ``finish[...]``, extract free-form answers, score.

Scoring follows the SQuAD / HotpotQA convention (spec 13.8): both sides are normalised
(lower-case, punctuation removed, the articles a/an/the removed, whitespace collapsed). An exact
match with any gold answer earns ``correct_reward``; otherwise the token F1 (precision and recall
over the multiset intersection of tokens) is taken, its maximum over the gold answers; an F1 of
at least ``f1_threshold`` earns ``correct_reward * F1``, anything below earns
``incorrect_reward``. When either side normalises to ``yes``, ``no`` or ``noanswer`` and the two
differ, the F1 is 0 (a yes/no question is not half right).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence
from typing import Literal, NamedTuple

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL | re.IGNORECASE)
_BOLD = re.compile(r"\*\*(.+?)\*\*", re.DOTALL)
_THE_ANSWER_IS = re.compile(r"the answer is\s*:?\s*(.+)", re.IGNORECASE | re.DOTALL)
_CONNECTIVE = re.compile(r"\b(?:therefore|thus|so|hence)\b\s*,?\s*(.+)", re.IGNORECASE | re.DOTALL)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_YES_NO = ("yes", "no", "noanswer")


class Action(NamedTuple):
    """One parsed action string."""

    kind: Literal["search", "finish", "answer", "empty"]
    text: str
    """The query (search), the answer (finish) or the whole stripped action (answer)."""


def parse_action(action: str) -> Action:
    """Classify an action string (spec 13.8: stripped; prefix ``search[``/``finish[`` and suffix ``]``).

    Prefixes are matched case-insensitively (``Search[x]`` is a search); the inner text is
    stripped. Anything else that is not blank is a free-form answer attempt.
    """
    text = action.strip() if isinstance(action, str) else ""
    if not text:
        return Action("empty", "")
    lower = text.lower()
    if text.endswith("]"):
        for kind in ("search", "finish"):
            if lower.startswith(kind + "["):
                return Action(kind, text[len(kind) + 1 : -1].strip())  # type: ignore[arg-type]
    return Action("answer", text)


def _boxed(text: str) -> str | None:
    """The content of the first ``\\boxed{...}``, with nested braces balanced."""
    start = text.find("\\boxed{")
    if start < 0:
        return None
    depth, i = 1, start + len("\\boxed{")
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def _first_clause(text: str) -> str:
    """Text up to the first sentence end or line break, stripped of trailing punctuation."""
    first = _SENTENCE_END.split(text.strip(), maxsplit=1)[0]
    return first.split("\n", 1)[0].strip().rstrip(".!?").strip()


def extract_answer(text: str) -> str:
    """The answer inside a free-form reply (spec 13.8 chain, first that applies).

    Think blocks are dropped; then the first ``\\boxed{...}``; the first bold text longer than 2
    characters; the clause after "the answer is", or after therefore/thus/so/hence, when longer
    than 3 characters; the first sentence longer than 5 characters; else the first 100 characters.
    """
    text = _THINK.sub("", text).strip()
    boxed = _boxed(text)
    if boxed is not None and boxed.strip():
        return boxed.strip()
    for match in _BOLD.finditer(text):
        if len(match.group(1).strip()) > 2:
            return match.group(1).strip()
    for pattern in (_THE_ANSWER_IS, _CONNECTIVE):
        match = pattern.search(text)
        if match:
            clause = _first_clause(match.group(1))
            if len(clause) > 3:
                return clause
    for sentence in _SENTENCE_END.split(text):
        if len(sentence.strip()) > 5:
            return sentence.strip()
    return text[:100]


def normalize(text: str) -> str:
    """SQuAD normalisation: lower-case, drop punctuation and articles, collapse whitespace."""
    text = text.lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> bool:
    """Equal after :func:`normalize`; an empty prediction matches nothing.

    A gold answer that normalises to nothing (``A+``: the article "a" and a sign) is compared as
    lower-cased text with single spaces and no sentence punctuation at its end instead: under
    :func:`normalize` ``finish[]``, ``the`` and ``.`` all matched it.
    """
    pred, ref = normalize(prediction), normalize(gold)
    if not ref:  # lower case, single spaces, no sentence punctuation at the end ('A+.' is 'A+')
        pred, ref = (" ".join(text.lower().split()).rstrip(".,;:!?") for text in (prediction, gold))
    return bool(pred) and pred == ref


def f1(prediction: str, gold: str) -> float:
    """Token F1 of the normalised strings (0 when a yes/no/noanswer side differs)."""
    pred, ref = normalize(prediction), normalize(gold)
    if (pred in _YES_NO or ref in _YES_NO) and pred != ref:
        return 0.0
    pred_tokens, ref_tokens = pred.split(), ref.split()
    common = sum((Counter(pred_tokens) & Counter(ref_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred_tokens), common / len(ref_tokens)
    return 2 * precision * recall / (precision + recall)


class Score(NamedTuple):
    reward: float
    exact: bool
    f1: float


def score_answer(prediction: str, golds: Sequence[str], *, correct_reward: float = 1.0,
                 incorrect_reward: float = 0.0, f1_threshold: float = 0.3) -> Score:
    """Reward of ``prediction`` against ``golds`` (see module docstring)."""
    if any(exact_match(prediction, g) for g in golds):
        return Score(correct_reward, True, 1.0)
    best = max((f1(prediction, g) for g in golds), default=0.0)
    reward = correct_reward * best if best >= f1_threshold else incorrect_reward
    return Score(reward, False, best)
