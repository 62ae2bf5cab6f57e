"""DeepCoder episodes: answer extraction, starter-code rules, grading, rewards, bad input, play.

Rewards are exact fractions of tests passed, so they are compared with ``==``.
"""

from __future__ import annotations

import io
import math
import os
import pickle
import re
import traceback

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from ragen_env_deepcoder import answer
from ragen_env_deepcoder import sandbox as sb
from ragen_env_deepcoder.answer import ANSWER, TYPING_PRELUDE, assemble, assemble_program, extract_code, function_name
from ragen_env_deepcoder.builtin import ROWS
from ragen_env_deepcoder.config import SandboxConfig
from ragen_env_deepcoder.env import DeepCoderEnv
from ragen_env_deepcoder.grading import normalise_output, parse_expected, passed, same_value
from ragen_env_deepcoder.problems import Problem, TestCase, convert_tests, problem_from_row
from ragen_env_deepcoder.sandbox import TestRun

from ragen_core import registry
from ragen_core.cli.env import play, read_reply, split_reply
from ragen_core.seeding import make_rng

SUM = "a, b = map(int, input().split())\nprint(a + b)"


@pytest.fixture(scope="module")
def env():
    env = DeepCoderEnv()
    yield env
    env.close()


def on(env: DeepCoderEnv, index: int) -> DeepCoderEnv:
    """``env`` reset onto built-in problem ``index``."""
    env.reset(0)
    env._problem = problem_from_row(ROWS[index], f"builtin/{index}")
    return env


# ------------------------------------------------------------------------------ extraction
@pytest.mark.parametrize(
    ("answer", "code", "problem"),
    [
        (SUM, SUM, ""),
        (f"```python\n{SUM}\n```", SUM, ""),
        (f"Here it is:\n```py\n{SUM}\n```\nDone.", SUM, ""),
        (f"```\n{SUM}\n```", SUM, ""),
        (f"```python\nprint(1)\n```\nbetter:\n```python\n{SUM}\n```", SUM, ""),  # several: the last one
        (f"```cpp\nint main(){{}}\n```\n```python\n{SUM}\n```", SUM, ""),  # other languages skipped
        (f"```python\n{SUM}", SUM, ""),  # unterminated fence
        (f"~~~python\n{SUM}\n~~~", SUM, ""),
        ("```cpp\nint main() { return 0; }\n```", "", "wrong language (cpp)"),
        ("```java\nclass A {}\n```\n```rust\nfn main() {}\n```", "", "wrong language (java, rust)"),
        ("", "", "empty"),
        ("   \n\t", "", "empty"),
        ("```python\n```", "", "empty"),
    ],
)
def test_extract_code(answer, code, problem):
    found = extract_code(answer)
    assert (found.code, found.problem) == (code, problem)


STARTER = "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        "


def test_starter_code_rules():
    own_class = "class Solution:\n    def twoSum(self, nums, target):\n        return [0, 1]"
    assert assemble(STARTER, own_class) == TYPING_PRELUDE + own_class  # the model's class replaces the stub
    bare = "def twoSum(self, nums, target):\n    return [0, 1]"
    assert assemble(STARTER, bare) == TYPING_PRELUDE + bare + "\n\n\nclass Solution:  # the answer's top-level methods\n    twoSum = twoSum\n"
    helper = "import math\n\ndef helper():\n    return 1"
    assert assemble(helper, "print(helper())") == TYPING_PRELUDE + helper + "\n\nprint(helper())"  # a complete starter goes first
    assert assemble("def f(x):\n    ", "def f(x):\n    return x") == TYPING_PRELUDE + "def f(x):\n    return x"  # a stub does not
    assert assemble("", SUM) == SUM
    assert function_name(STARTER) == "twoSum" and function_name("def add(a, b):\n    ") == "add" and function_name("") is None


# ------------------------------------------------------------------------------ line numbers
CLASS_STARTER = "class Solution:\n    def f(self, x: List[int]) -> int:\n        "
HELPER_STARTER = "def helper(x):\n    return 10 // x\n"
#: (starter, answer code, the answer's line with the syntax error, its line raising once ``+)`` is
#: ``+ 1 // 0)``); the program that runs puts the typing import, the starter or a future import first
LINE_CASES = [
    ("", "x = 1\ny = 2\nprint(x +)\n", 3, 3),  # no starter: nothing added
    (CLASS_STARTER, "class Solution:\n    def f(self, x):\n        return (x +)\n", 3, 3),  # the typing import first
    (HELPER_STARTER, "a = 1\n\nprint(helper(a) +)\n", 3, 3),  # a starter that compiles goes first
    (CLASS_STARTER, "import math\n\ndef f(self, x):\n    return (x +)\n", 4, 4),  # top-level methods
    (CLASS_STARTER, '"""doc"""\nfrom __future__ import annotations\n\ny = (1 +)\n', 4, 4),  # a future import moves up
    # methods indented as in their class: put back into one when they parse so (an unexpected indent when not)
    (CLASS_STARTER, "    def f(self, x):\n        y = 1\n        return (x +)\n", 1, 3),
]


def _raising(code: str) -> str:
    return code.replace("+)", "+ 1 // 0)")


@pytest.mark.parametrize(("starter", "code", "line", "raising_line"), LINE_CASES)
def test_line_numbers_refer_to_the_answers_own_code(starter, code, line, raising_line):
    """The typing import and the starter went before the answer, so an error on its line 3 said line 4 or 5."""
    broken = assemble_program(starter, code)
    with pytest.raises(SyntaxError) as err:
        compile(broken.text, "solution.py", "exec")
    assert broken.origin(err.value.lineno) == (ANSWER, line)
    assert f"(solution.py, line {line})" in broken.locate(f"SyntaxError: {err.value}", compile_error=True)
    raising = assemble_program(starter, _raising(code))
    namespace: dict = {}
    with pytest.raises(ZeroDivisionError) as err:
        exec(compile(raising.text, "solution.py", "exec"), namespace)  # noqa: S102 - our own literal programs
        if "Solution" in namespace:
            namespace["Solution"]().f(1)
    shown = raising.locate("".join(traceback.format_exception(err.value)))
    assert f'File "solution.py", line {raising_line}, in ' in shown
    assert raising.origin(traceback.extract_tb(err.value.__traceback__)[-1].lineno) == (ANSWER, raising_line)


def test_lines_of_the_starter_and_the_compilers_own_references_are_named_too():
    program = assemble_program(HELPER_STARTER, "if True:\nprint(helper(0))\n")
    message = "IndentationError: expected an indented block after 'if' statement on line 5 (solution.py, line 6)"
    assert program.locate(message, compile_error=True) == \
        "IndentationError: expected an indented block after 'if' statement on line 1 (solution.py, line 2)"
    assert program.origin(3) == (answer.STARTER, 2)
    assert program.locate('  File "solution.py", line 3, in helper') == '  File "starter code", line 2, in helper'


def _working_config() -> SandboxConfig:
    """The strongest level that runs programs here (this interpreter, else the system one), or skip."""
    for level in sb.LEVELS:
        for python in (None, "/usr/bin/python3"):
            if (python is None or os.access(python, os.X_OK)) and sb.probe(level, python) is None:
                return SandboxConfig(isolation=level, allow_unisolated=True, python=python)
    pytest.skip("no sandbox level runs programs here")


def test_errors_from_the_sandbox_name_the_answers_lines():
    """Through the env and its sandbox: a SyntaxError and a ZeroDivisionError on known lines of the answer."""
    env = DeepCoderEnv(sandbox=_working_config())
    for starter, code, line, raising_line in LINE_CASES[1:]:
        test = TestCase("call", [1], 1, "f") if "Solution" in starter else TestCase("stdin", "", "1\n")
        env.reset(0)
        env._problem = Problem("say 1", (test,), starter_code=starter)
        detail = env.grade(f"```python\n{code}```")[1]["detail"]
        assert re.match(r"does not compile: (Syntax|Indentation)Error: ", detail) and detail.endswith(f"(solution.py, line {line})"), detail
        detail = env.grade(f"```python\n{_raising(code)}```")[1]["detail"]
        assert detail.startswith("test 1/1: exit 1 (ZeroDivisionError") and detail.endswith(f", at line {raising_line})"), detail
    env.reset(0)
    env._problem = Problem("say 1", (TestCase("stdin", "", "1\n"),), starter_code=HELPER_STARTER)
    detail = env.grade("print(helper(0))")[1]["detail"]
    assert detail.startswith("test 1/1: exit 1 (ZeroDivisionError") and detail.endswith(", at line 1)"), detail


# ------------------------------------------------------------------------------ grading rules
def test_stdout_comparison():
    assert normalise_output("1 2 \r\n3\n\n") == "1 2\n3"
    test = TestCase("stdin", "", "1 2\n3\n")
    assert passed(test, TestRun("ok", stdout="1 2  \n3"))
    assert not passed(test, TestRun("ok", stdout="1 2\n4\n"))
    assert not passed(test, TestRun("exit 1", stdout="1 2\n3\n"))  # right output, crashed
    assert not passed(test, TestRun("cpu_limit", stdout="1 2\n3\n"))


@pytest.mark.parametrize(
    ("got", "expected", "ok"),
    [
        ({"str": "[1, 2]", "json": [1, 2]}, "[1, 2]", True),
        ({"str": "(1, 2)", "json": [1, 2]}, "[1, 2]", True),  # the reference's str() rule failed this
        ({"str": "True", "json": True}, "true", True),  # ... and this
        ({"str": "1", "json": 1}, "true", False),  # bool and int stay apart
        ({"str": "0.30000000000000004", "json": 0.30000000000000004}, "0.3", True),
        ({"str": "{1}"}, "{1}", True),  # no JSON form: the spec's str() rule
        ({"str": "abc", "json": "abc"}, '"abc"', True),
        ({"str": "abd", "json": "abd"}, '"abc"', False),
        (None, "1", False),
    ],
)
def test_call_comparison(got, expected, ok):
    assert passed(TestCase("call", "", expected, "f"), TestRun("ok", result=got)) is ok


def test_a_one_element_list_matches_its_element_only_where_the_layout_wraps_results():
    """LiveCodeBench's expected '[2]' is a list: returning 2 passed it (helper-68's walk); TACO wraps every result."""
    five = TestRun("ok", result={"str": "5", "json": 5})
    assert passed(TestCase("call", "", [5], "f", wrapped=True), five)  # TACO / PrimeIntellect
    assert not passed(TestCase("call", "", "[5]", "f"), five)  # LiveCodeBench 'functional'
    assert passed(TestCase("call", "", "[5]", "f"), TestRun("ok", result={"str": "[5]", "json": [5]}))
    lcb, taco = (convert_tests(t, "f")[0] for t in ([{"input": "1", "output": "[5]", "testtype": "functional"}],
                                                     {"inputs": [[1]], "outputs": [[5]], "fn_name": "f"}))
    assert not passed(lcb, five) and passed(taco, five)


def test_parse_expected_and_same_value():
    assert parse_expected("[1, 2]") == [1, 2] and parse_expected("(1, 2)") == (1, 2) and parse_expected("hello") == "hello"
    assert parse_expected("[" * 200_000) == "[" * 200_000  # too long for literal_eval: text
    assert same_value({"a": [1, 2.0]}, {"a": (1, 2)}) and not same_value({"a": 1}, {"b": 1})
    assert not same_value(1.0, 1.1) and same_value(float("1e300"), 1e300)


# ------------------------------------------------------------------------------ episodes
def test_a_correct_program_scores_one_and_ends(env):
    obs, reward, done, info = on(env, 0).step(f"```python\n{SUM}\n```")
    assert (obs, reward, done) == ("Correct!", 1.0, True)
    assert {k: info[k] for k in ("success", "passed_tests", "total_tests", "pass_reward", "runnable", "action_is_valid", "action_is_effective")} == {
        "success": True, "passed_tests": 3, "total_tests": 3, "pass_reward": 1.0, "runnable": True, "action_is_valid": True,
        "action_is_effective": True}
    assert env.render() == "Correct!"
    assert env.step(SUM)[1:3] == (0.0, True)  # one answer per episode


def test_partial_credit_is_the_fraction_passed(env):
    program = "a, b = map(int, input().split())\nprint(a + b if a < 100 else 0)"  # fails only the third test
    obs, reward, done, info = on(env, 0).step(program)
    assert (obs, reward, done, info["passed_tests"], info["success"]) == ("Incorrect.", 2 / 3, True, 2, False)
    assert info["detail"] == "test 3/3: wrong answer"
    strict = DeepCoderEnv(partial_credit=False)
    assert on(strict, 0).step(program)[1] == 0.0


@pytest.mark.parametrize(
    ("answer", "detail"),
    [
        ("```cpp\n#include <cstdio>\nint main() {}\n```", "no program: wrong language (cpp)"),
        ("#include <cstdio>\nint main() { return 0; }", "does not compile: SyntaxError"),
        ("I think the answer is to add the numbers.", "does not compile: SyntaxError"),
        ("```python\nprint(1)\n```\n```python\nprint(2)\n```", "test 1/3: wrong answer"),
        ("x" * 300_000, "answer longer than 200000 characters: not run"),
    ],
)
def test_bad_answers_score_zero_and_say_why(env, answer, detail):
    obs, reward, done, info = on(env, 0).step(answer)
    assert (obs, reward, done, info["success"]) == ("Incorrect.", 0.0, True, False)
    assert info["detail"].startswith(detail)
    # a valid action is a program that was run (it may not compile); none found, or too long to run, is not one (it was)
    assert info["action_is_valid"] is not detail.startswith(("no program", "answer longer", "program longer"))


def test_an_empty_answer_is_an_invalid_action_that_ends_nothing(env):
    on(env, 0)
    obs, reward, done, info = env.step("  ")
    assert (obs, reward, done, info["action_is_valid"]) == ("Invalid action.", 0.0, False, False)
    assert env.step(SUM)[1:3] == (1.0, True)
    assert DeepCoderEnv(invalid_action_score=-0.5).reset(0) and on(DeepCoderEnv(invalid_action_score=-0.5), 0).step("")[1] == -0.5


TWO_SUM = "    seen = {}\n    for i, x in enumerate(nums):\n        if target - x in seen:\n            return [seen[target - x], i]\n" \
          "        seen[x] = i\n"


def test_methods_indented_as_in_their_class_go_back_into_one_with_their_strings_untouched():
    """Dedenting them also changed the text of a multi-line string literal (helper-74's review)."""
    starter = "class Solution:\n    def f(self) -> str:\n        "
    code = '    def f(self):\n        return """a\n        b"""\n'
    program = assemble(starter, code)
    namespace: dict = {}
    exec(compile(program, "solution.py", "exec"), namespace)  # noqa: S102 - our own literal program
    assert namespace["Solution"]().f() == "a\n        b"


def test_an_answer_opening_with_a_future_import_runs(env):
    """'from __future__ import annotations' came after the typing prelude: a SyntaxError for a correct program."""
    on(env, 28)
    method = "".join("    " + line + "\n" for line in ("def twoSum(self, nums: list[int], target: int) -> list[int]:\n" + TWO_SUM).splitlines())
    obs, reward, done, info = env.step(f"```python\nfrom __future__ import annotations\n\n# one pass\nclass Solution:\n{method}```")
    assert (obs, reward) == ("Correct!", 1.0), info["detail"]
    assert assemble("class Solution:\n    pass\n", '"""doc"""\nfrom __future__ import annotations\nx = 1') == \
        "from __future__ import annotations\n" + TYPING_PRELUDE + 'class Solution:\n    pass\n\n"""doc"""\nx = 1'


@pytest.mark.parametrize("answer", [
    "import math\n\ndef twoSum(self, nums, target):\n" + TWO_SUM,  # an import first
    "# one pass with a dict\ndef twoSum(self, nums, target):\n" + TWO_SUM,  # a comment first
    "def twoSum(nums, target):\n" + TWO_SUM,  # a plain function, no self
    "def pairs(self, nums, target):\n" + TWO_SUM + "\ndef twoSum(self, nums, target):\n    return self.pairs(nums, target)\n",  # a helper method
    "".join("    " + line + "\n" for line in ("def twoSum(self, nums, target):\n" + TWO_SUM).splitlines()),  # indented as in its class
    "# my answer\n" + "".join("    " + line + "\n" for line in ("def twoSum(self, nums, target):\n" + TWO_SUM).splitlines()),  # a comment first
])
def test_top_level_functions_answer_a_class_solution_starter(env, answer):
    """A correct method after an import or a comment got 'missing 1 required positional argument', and a plain
    function was forced into the class ('takes 1 positional argument but 2 were given') (helper-68's walk)."""
    on(env, 28)  # twoSum, LiveCodeBench layout, a class Solution starter
    obs, reward, done, info = env.step(f"```python\n{answer}```")
    assert (obs, reward) == ("Correct!", 1.0), info["detail"]


def test_function_call_problem_with_a_class_solution_starter(env):
    on(env, 28)  # twoSum, LiveCodeBench layout
    assert "Complete this starter code" in env.render() and "def twoSum" in env.render()
    bare = "```python\ndef twoSum(self, nums: List[int], target: int) -> List[int]:\n    for i in range(len(nums)):\n" \
           "        for j in range(i + 1, len(nums)):\n            if nums[i] + nums[j] == target:\n                return (i, j)\n```"
    assert env.step(bare)[1] == 1.0  # made a method of class Solution; a tuple matches the JSON list


def test_every_builtin_reference_solution_passes_every_test(env):
    for i, row in enumerate(ROWS):
        reward, info = on(env, i).grade(row["solution"])
        assert reward == 1.0, (i, info)


def test_reset_is_seeded_per_mode_and_the_splits_differ():
    env = DeepCoderEnv()
    train = {env.reset(seed) for seed in range(1000)}  # uniform draws: P(a problem unseen) < 1e-12
    val = {env.reset(seed, mode="val") for seed in range(1000)}
    assert len(train) == 32 and len(val) == 8 and not train & val
    assert DeepCoderEnv().reset(11) == DeepCoderEnv().reset(11, member=3)


def test_random_action_is_a_program_that_runs(env):
    rng = make_rng(3, "random-action")
    for seed in range(6):
        env.reset(seed)
        _, reward, done, info = env.step(env.random_action(rng))
        assert done and info["runnable"] and 0.0 <= reward <= 1.0


def test_pickled_env_grades_in_the_receiving_process(env):
    on(env, 0)
    clone = pickle.loads(pickle.dumps(env))
    assert clone._sandbox is None and clone.step(SUM)[1] == 1.0


def test_preset_and_instruction():
    env = registry.make("env", "deepcoder", preset="DeepCoder")
    assert (env.config.max_actions_per_episode, env.config.max_tokens, env.config.max_turns, env.action_sep) == (1, 8000, 1, None)
    text = DeepCoderEnv(sandbox={"time_limit_s": 4}).instruction()
    assert "<answer>" in text and "4 s time limit" in text and "fraction of tests" in text


# ------------------------------------------------------------------------------ fuzzing
_FRAGMENTS = st.sampled_from(["```", "```python\n", "```cpp\n", "\n", "print(7)", "input()", "<answer>", "||", "def f(", "class Solution:",
                              "é", "\x00", "    ", "1/0"])
_ANSWERS = st.one_of(st.text(max_size=200), st.lists(_FRAGMENTS, max_size=30).map("".join))


@settings(max_examples=300, deadline=None)
@given(answer=_ANSWERS)
@example(answer="```" * 50_000)
@example(answer="```python\n" * 20_000)
def test_extraction_never_fails(answer):
    found = extract_code(answer)
    assert isinstance(found.code, str) and (found.code == "") == bool(found.problem)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31), answer=_ANSWERS)
@example(seed=0, answer="```python\nimport sys\nsys.setrecursionlimit(10**6)\ndef f(n): return f(n + 1)\nf(0)\n```")
def test_any_answer_is_scored_never_raises(env, seed, answer):
    env.reset(seed)
    obs, reward, done, info = env.step(answer)
    assert isinstance(obs, str) and math.isfinite(reward) and 0.0 <= reward <= 1.0
    assert done is bool(answer.strip()) and info["success"] is (reward == 1.0 and done)


# ------------------------------------------------------------------------------ ragen env play
def test_read_reply_takes_a_pasted_program_for_free_form_envs():
    fenced = io.StringIO(f"```python\n{SUM}\n\n```\nnext\n")
    assert read_reply(fenced, free_form=True) == f"```python\n{SUM}\n\n```" and fenced.readline() == "next\n"
    tagged = io.StringIO(f"<answer>\n{SUM}\n</answer>\n")
    assert read_reply(tagged, free_form=True) == f"<answer>\n{SUM}\n</answer>"
    assert read_reply(io.StringIO("```python\nprint(1)\n"), free_form=True) == "```python\nprint(1)"  # EOF ends it
    assert read_reply(io.StringIO("Up || Left\nDown\n"), free_form=False) == "Up || Left"
    assert read_reply(io.StringIO("```python\nx\n```\n"), free_form=False) == "```python"  # vocabulary envs: one line
    assert read_reply(io.StringIO(""), free_form=True) is None


def test_a_person_can_paste_a_program_in_play():
    env = DeepCoderEnv()
    seed = next(s for s in range(500) if env.reset(s) == problem_from_row(ROWS[0]).question)
    out = io.StringIO()
    typed = io.StringIO(f"<answer>\n```python\n{SUM}\n```\n</answer>\n")
    result = play(env, seed=seed, agent="human", out=out, inp=typed, rng=make_rng(0))
    # every test passed: the declared pass_reward is 1
    assert result == {"reward": 1.0, "success": True, "actions": 1, "info_metrics": {"pass_reward": 1.0}}
    assert "Correct!" in out.getvalue() and "start with <answer> or ```" in out.getvalue()
    assert split_reply("<answer>a || b</answer>", env) == ["a || b"]  # code is never split on ||


def test_play_says_why_a_program_failed():
    """`ragen env play deepcoder` printed 'Incorrect.' and never the reason in info['detail'] (helper-68's walk)."""
    out = io.StringIO()
    play(DeepCoderEnv(), seed=0, agent="human", out=out, inp=io.StringIO("<answer>\nprint(1\n</answer>\n"), rng=make_rng(0))
    (line,) = [x for x in out.getvalue().splitlines() if x.startswith("  info: ")]
    assert "passed_tests=0" in line and "runnable=False" in line and "detail=\"does not compile: SyntaxError: '(' was never closed" in line
    assert "success=" not in line and "action_is_valid=" not in line  # the play line shows those already


def test_pool_facts_for_the_runner():
    from ragen_core.interfaces.env_pool import EnvFacts

    facts = EnvFacts.of(DeepCoderEnv())
    assert (facts.action_sep, facts.action_names, facts.max_actions_per_episode) == (None, None, 1)
    assert registry.get_spec("env", "deepcoder").async_step is True


