"""Answer-check throughput of the MetaMathQA checkers: the math checker beside the exact rule.

Run: ``python bench/bench_metamathqa_checker.py [--passes 3]``. The goal is >= 5,000 checks/s
for the math checker on typical answers.

Workload ("typical"): every label of the built-in problems (and of the shared MetaMathQA
sample when ``../shared/data`` has it) is checked against a group of eight model-like replies
drawn with a fixed seed: the bare answer, the answer with formatting (``$``, units, ``\\boxed``,
"The answer is", trailing zeros, thousands separators, LaTeX spellings of fractions) and wrong
numbers. The checker's caches are cleared before each timed pass, so a pass pays for every
distinct reply and label once, as a rollout step would. Each rate is the best of the
passes. Two more rows show the expression path alone (radical and fraction labels answered in
another spelling) and the slowest of a list of hostile replies.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from collections.abc import Callable
from pathlib import Path

from ragen_env_metamathqa import checker, symbolic
from ragen_env_metamathqa.checker import exact_match, math_equal
from ragen_env_metamathqa.problems import builtin_problems, label_from_response

from ragen_core.seeding import make_py_rng

GOAL = 5_000
SAMPLE = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "metamathqa-sample" / "metamathqa_gsm_ansaug_200.jsonl"


def _labels() -> list[str]:
    labels = [p.answer for p in builtin_problems(240)]
    if SAMPLE.is_file():
        for line in SAMPLE.read_text(encoding="utf-8").splitlines():
            label = label_from_response(json.loads(line)["response"])
            if label:
                labels.append(label)
    return labels


def _replies(label: str, rng: random.Random) -> list[tuple[str, bool]]:
    """Eight ``(reply, is right)`` for ``label``: right ones in several spellings, wrong numbers."""
    plain = label.lstrip("-").replace(",", "").isdigit()
    wrong = str(int(label.replace(",", "")) + rng.choice([-2, -1, 1, 3, 10])) if plain else "7"
    right = [label, f"\\boxed{{{label}}}", f"The answer is {label}.", f"The answer is: {label}"]
    if plain:
        right += [f"${label}", f"{label} dollars", f"{label}.00", f"{int(label.replace(',', '')):,}"]
    elif label.startswith("\\frac"):
        right += [label.replace("\\frac", "\\dfrac"), label.replace("\\frac{", "").replace("}{", "/").rstrip("}")]
    wrongs = [wrong, f"\\boxed{{{wrong}}}", f"So the total is {wrong}."]
    return [(rng.choice(right), True) if rng.random() < 0.6 else (rng.choice(wrongs), False) for _ in range(8)]


def _clear_caches() -> None:
    checker.fast_values.cache_clear()
    checker.expression_value.cache_clear()
    symbolic.worker()._cache.clear()  # sympy verdicts too: every pass asks the worker afresh


def rate(check: Callable[[str, str], bool], pairs: list[tuple[str, str]], passes: int) -> float:
    """Best checks per second over ``pairs`` in ``passes`` passes, caches cleared before each."""
    best = 0.0
    for _ in range(passes):
        _clear_caches()
        start = time.perf_counter()
        for answer, label in pairs:
            check(answer, label)
        best = max(best, len(pairs) / (time.perf_counter() - start))
    return best


def _expression_rewrites() -> list[tuple[str, str]]:
    """Built-in radical and fraction labels answered in a spelling only the expression path reads."""
    pairs = []
    for problem in builtin_problems(240):
        if m := re.fullmatch(r"(\d*)\\sqrt\{(\d+)\}", problem.answer):
            pairs.append((f"\\sqrt{{{int(m.group(1) or 1) ** 2 * int(m.group(2))}}}", problem.answer))  # 2\sqrt{3} -> \sqrt{12}
        elif m := re.fullmatch(r"(-?)\\frac\{(\d+)\}\{(\d+)\}", problem.answer):
            pairs.append((f"{m.group(1)}{m.group(2)} \\cdot \\frac{{1}}{{{m.group(3)}}}", problem.answer))
    return pairs


HOSTILE = ["1/" * 90 + "3", "9^" * 60 + "9", "\\sqrt" * 60 + "{2}", "(" * 100_000 + "1" + ")" * 100_000,
           "\\boxed{" * 100_000, "x" * 1_000_000, "((x+1)^{999})^{999}", "\\sin(10^{999})"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passes", type=int, default=3, help="timed passes per row; the best counts")
    args = parser.parse_args()
    rng = make_py_rng(0, "bench-metamathqa")
    labels = _labels()
    graded = [(reply, label, right) for label in labels for reply, right in _replies(label, rng)]
    pairs = [(reply, label) for reply, label, _ in graded]
    math_equal("2\\sqrt{2}", "\\sqrt{8}")  # first-use imports (mpmath) stay outside the timing
    exact_rate, math_rate = rate(exact_match, pairs, args.passes), rate(math_equal, pairs, args.passes)
    n_right = sum(right for _, _, right in graded)

    def accepted(check: Callable[[str, str], bool]) -> str:
        hits = [check(a, b) for a, b, _ in graded]
        true_pos = sum(h for h, (_, _, right) in zip(hits, graded) if right)
        false_pos = sum(h for h, (_, _, right) in zip(hits, graded) if not right)
        return f"{true_pos / n_right:>11.1%}{false_pos / (len(graded) - n_right):>11.1%}"

    expression_pairs = _expression_rewrites()
    assert all(math_equal(a, b) for a, b in expression_pairs)
    expr_rate = rate(math_equal, expression_pairs, args.passes)
    numeric_rate = rate(lambda a, b: math_equal(a, b, symbolic=False), expression_pairs, args.passes)
    worst = 0.0
    for reply in HOSTILE:
        start = time.perf_counter()
        math_equal(reply, "\\sqrt{2}")
        worst = max(worst, time.perf_counter() - start)

    print(f"workload: {len(labels)} labels x 8 replies = {len(pairs)} checks per pass "
          f"(best of {args.passes} passes, caches cleared)")
    print(f"{'checker':<34}{'checks/s':>12}{'right ok':>11}{'wrong ok':>11}   (share of right / wrong replies accepted)")
    print(f"{'exact (reference rule)':<34}{exact_rate:>12,.0f}{accepted(exact_match)}")
    print(f"{'math (default)':<34}{math_rate:>12,.0f}{accepted(math_equal)}")
    print(f"{'math, expression path only':<34}{expr_rate:>12,.0f}{'':>11}  ({len(expression_pairs)} radical/fraction rewrites, "
          "each confirmed by sympy in its worker)")
    print(f"{'  the same, numbers only':<34}{numeric_rate:>12,.0f}{'':>11}  (symbolic=False: no sympy check)")
    print(f"slowest hostile reply: {worst * 1000:.1f} ms ({len(HOSTILE)} replies up to 1 MB)")
    verdict = "meets" if math_rate >= GOAL else "MISSES"
    print(f"math checker: {math_rate:,.0f} checks/s {verdict} the {GOAL:,} goal ({math_rate / GOAL:.1f}x); "
          f"exact/math time ratio {exact_rate / math_rate:.1f}x")


if __name__ == "__main__":
    main()
