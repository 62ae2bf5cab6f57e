"""Did a test pass? Comparison of what a program did with what the test expects.

Runs on the host, never in the sandbox, so a program cannot see the expected outputs.

* stdin tests: the spec's rule (stripped stdout equals the stripped expected output), extended to
  ignore ``\\r`` and trailing spaces at line ends, which judges ignore too.
* function-call tests: the reference compared ``str(result) == str(expected)``, so ``True`` never
  matched a JSON ``true`` and ``(1, 2)`` never matched ``[1, 2]``. Here the returned value (made
  JSON-like in the sandbox: tuples become lists) is compared by value with the expected value
  (parsed from JSON, else a Python literal), with ``bool`` and numbers kept apart and floats
  equal within a relative 1e-9; a one-element expected list (TACO wraps return values so) also
  matches its element; the spec's ``str()`` comparison still counts as a pass.

Only a test whose process exited cleanly (status ``ok``) can pass: a program that prints the
right answer and then crashes fails.
"""

from __future__ import annotations

import ast
import json
import math
from typing import Any

from ragen_env_deepcoder.problems import TestCase
from ragen_env_deepcoder.sandbox import TestRun

#: Expected values longer than this are compared as text only (``ast.literal_eval`` on megabytes
#: of nested brackets is slow and can exhaust the C stack).
_LITERAL_LIMIT = 100_000
_FLOAT_REL_TOL = 1e-9
"""Float tolerance: values round-trip through JSON exactly, so this only forgives a different
summation order in the program (an absolute floor of the same size covers values near 0)."""


def normalise_output(text: str) -> str:
    """Stdout as judges compare it: ``\\r`` dropped, trailing spaces per line, outer blank lines."""
    lines = text.replace("\r", "").split("\n")
    return "\n".join(line.rstrip() for line in lines).strip()


def parse_expected(value: Any) -> Any:
    """The expected return value of a call test, as a value (JSON, else Python literal, else text)."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        pass
    if len(value) <= _LITERAL_LIMIT:
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            pass
    return value


def same_value(got: Any, want: Any, depth: int = 0) -> bool:
    """Structural equality: lists/tuples alike, bool apart from numbers, floats within tolerance."""
    if depth > 200:
        return False
    if isinstance(got, bool) or isinstance(want, bool):
        return isinstance(got, bool) and isinstance(want, bool) and got == want
    if isinstance(got, (int, float)) and isinstance(want, (int, float)):
        if isinstance(got, int) and isinstance(want, int):
            return got == want
        return math.isclose(got, want, rel_tol=_FLOAT_REL_TOL, abs_tol=_FLOAT_REL_TOL)
    if isinstance(got, (list, tuple)) and isinstance(want, (list, tuple)):
        return len(got) == len(want) and all(same_value(g, w, depth + 1) for g, w in zip(got, want))
    if isinstance(got, dict) and isinstance(want, dict):
        return got.keys() == want.keys() and all(same_value(got[k], want[k], depth + 1) for k in got)
    return type(got) is type(want) and got == want


def passed(test: TestCase, run: TestRun) -> bool:
    """Whether ``run`` (the program on ``test``'s input) passes ``test``."""
    if run.status != "ok":
        return False
    if test.kind == "stdin":
        expected = str(test.output)
        return run.stdout.strip() == expected.strip() or normalise_output(run.stdout) == normalise_output(expected)
    result = run.result
    if not isinstance(result, dict):
        return False
    want = parse_expected(test.output)
    if "json" in result:
        got = result["json"]
        if same_value(got, want):
            return True
        if test.wrapped and isinstance(want, list) and len(want) == 1 and same_value(got, want[0]):
            return True
    return str(result.get("str")) == str(want)
