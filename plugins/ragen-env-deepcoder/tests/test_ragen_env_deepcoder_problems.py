"""DeepCoder data: conversion of every public test layout, loading through ``datasets``, splits.

The real-format sample (rows of the rLLM project's DeepCoder files) is read from the shared
data folder through ``datasets`` at test time; it is never copied into the repository. Nothing
here downloads: hub loading is checked against a stand-in for ``datasets.load_dataset``.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest
from ragen_env_deepcoder import problems as problems_mod
from ragen_env_deepcoder.builtin import ROWS, builtin_problems
from ragen_env_deepcoder.env import DeepCoderEnv
from ragen_env_deepcoder.plugin import check_available
from ragen_env_deepcoder.problems import TestCase, convert_tests, load_problems, problem_from_row

from ragen_core.datafiles import hash_rank
from ragen_core.errors import ConfigError

DATA = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "deepcoder-sample"
CODEFORCES = DATA / "deepcoder_codeforces_test_200.json"
LCB = DATA / "livecodebench_test_2408_2501_100.json"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="shared DeepCoder sample data not available")


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    """No test may reach the hub; ``datasets`` caches go to the test's temp dir."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    problems_mod._load_cached.cache_clear()


# ------------------------------------------------------------------------------ conversion
def test_primeintellect_layout():
    tests = json.dumps([
        {"type": "stdin_stdout", "input": "1 2\n", "output": "3\n"},
        {"type": "function_call", "fn_name": "add", "input": [1, 2], "output": [3]},
    ])
    assert convert_tests(tests) == (TestCase("stdin", "1 2\n", "3\n"), TestCase("call", [1, 2], [3], "add", wrapped=True))


def test_lcb_layout_takes_the_function_name_from_metadata_or_starter():
    tests = [{"input": "5\n[1, 2]", "output": "[3]", "testtype": "functional"}, {"input": "x\n", "output": "y\n", "testtype": "stdin"}]
    row = {"problem": "p", "tests": json.dumps(tests), "metadata": json.dumps({"func_name": "solve"}), "starter_code": ""}
    assert problem_from_row(row).tests == (TestCase("call", "5\n[1, 2]", "[3]", "solve"), TestCase("stdin", "x\n", "y\n"))
    starter = "class Solution:\n    def shortestPath(self, n: int) -> int:\n        "
    row = {"problem": "p", "tests": tests, "starter_code": starter}
    problem = problem_from_row(row)
    assert problem.tests[0].fn_name == "shortestPath"
    assert problem.question.startswith("p\n\nComplete this starter code:\n```python\nclass Solution:")


def test_codeforces_layout_defaults_to_stdin():
    assert convert_tests([{"input": "1\n", "output": "2\n"}]) == (TestCase("stdin", "1\n", "2\n"),)


def test_taco_dict_layout_with_and_without_a_function_name():
    stdin = {"inputs": ["1 2\n", ["3 4", "5"]], "outputs": ["3\n", ["7", "5"]]}
    assert convert_tests(json.dumps(stdin)) == (TestCase("stdin", "1 2\n", "3\n"), TestCase("stdin", "3 4\n5", "7\n5"))
    call = {"inputs": [[1, 2]], "outputs": [[3]], "fn_name": "add"}
    assert convert_tests(call) == (TestCase("call", [1, 2], [3], "add", wrapped=True),)


@pytest.mark.parametrize(
    ("tests", "match"),
    [
        ({"inputs": [1]}, "equal length"),
        ({"inputs": [1, 2], "outputs": [1]}, "equal length"),
        ("42", "list or an"),
        ([{"input": "1"}], "'input' and 'output'"),
        ([{"input": "1", "output": "2", "testtype": "functional"}], "without a function name"),
        ([{"input": "1", "output": "2", "type": "interactive"}], "unknown test type"),
        # a null output was read as "": a program that prints nothing passed (helper-68's walk)
        ([{"input": "1", "output": "2"}, {"input": "1", "output": None}], "test 2 has output null"),
        ({"inputs": ["1"], "outputs": [None]}, "test 1 has output null"),
    ],
)
def test_unreadable_tests_name_the_problem(tests, match):
    with pytest.raises(ValueError, match=match):
        convert_tests(tests)


def test_a_function_may_be_expected_to_return_none_and_a_program_to_print_nothing():
    assert convert_tests([{"input": [1], "output": None, "fn_name": "f", "testtype": "functional"}])[0].output is None
    assert convert_tests([{"input": "1", "output": ""}]) == (TestCase("stdin", "1", ""),)


def test_row_without_statement_is_rejected():
    with pytest.raises(ValueError, match="no 'problem'"):
        problem_from_row({"problem": "  ", "tests": []})


def test_builtin_set_covers_every_layout_and_splits_by_fifths():
    train, val = builtin_problems("train"), builtin_problems("val")
    assert (len(train), len(val)) == (32, 8)
    assert {p.source for p in val} == {f"builtin/{i}" for i in range(4, 40, 5)}
    layouts = set()
    for row in ROWS:
        tests = row["tests"]
        layouts.add("taco" if isinstance(tests, dict) else "pi" if "type" in tests[0] else "lcb" if "testtype" in tests[0] else "cf")
    assert layouts == {"taco", "pi", "lcb", "cf"}
    kinds = {t.kind for p in train + val for t in p.tests}
    assert kinds == {"stdin", "call"}
    assert all(p.solution for p in train + val)


# ------------------------------------------------------------------------------ real sample via datasets
@needs_data
def test_codeforces_sample_loads_through_datasets():
    rows = json.loads(CODEFORCES.read_text())
    problems = load_problems(str(CODEFORCES), "train")
    assert len(problems) == len(rows) == 200
    assert problems[0].statement == rows[0]["problem"]
    assert [(t.input, t.output) for t in problems[0].tests] == [(t["input"], t["output"]) for t in rows[0]["tests"]]
    assert all(t.kind == "stdin" for p in problems for t in p.tests)


@needs_data
def test_livecodebench_sample_loads_both_kinds():
    rows = json.loads(LCB.read_text())
    problems = load_problems(str(LCB), "train")
    assert len(problems) == 100
    functional = [p for p in problems if p.tests[0].kind == "call"]
    assert len(functional) == 30 and len(problems) - len(functional) == 70
    snake = next(p for p in functional if "finalPositionOfSnake" in p.starter_code)
    assert {t.fn_name for t in snake.tests} == {"finalPositionOfSnake"}
    raw = next(r for r in rows if "finalPositionOfSnake" in r["starter_code"])
    assert [(t.input, t.output) for t in snake.tests] == [(t["input"], t["output"]) for t in raw["tests"]]


@needs_data
def test_directory_of_sample_files_is_one_split_and_max_problems_caps_it():
    assert len(load_problems(str(DATA), "train")) == 300
    assert len(load_problems(str(DATA), "train", max_problems=7)) == 7


@needs_data
def test_real_problems_are_graded_end_to_end():
    """Correct programs for real rows pass every test: stdin (Codeforces) and function-call (LCB)."""
    env = DeepCoderEnv(dataset=str(DATA))
    problems = env.problems("train") + env.problems("val")
    minmax = next(p for p in problems if p.statement.strip().startswith("You are given two integers $x$ and $y$"))
    snake = next(p for p in problems if "finalPositionOfSnake" in p.starter_code)
    programs = {
        id(minmax): "for _ in range(int(input())):\n    x, y = map(int, input().split())\n    print(min(x, y), max(x, y))\n",
        # a bare def: indented into the starter's class Solution
        id(snake): "```python\ndef finalPositionOfSnake(self, n: int, commands: List[str]) -> int:\n    i = j = 0\n"
                   "    for c in commands:\n        i += {'UP': -1, 'DOWN': 1}.get(c, 0)\n        j += {'LEFT': -1, 'RIGHT': 1}.get(c, 0)\n"
                   "    return i * n + j\n```",
    }
    for problem in (minmax, snake):
        env._problem, env._done, env._message = problem, False, None
        reward, info = env.grade(programs[id(problem)])
        assert (reward, info["success"], info["passed_tests"]) == (1.0, True, len(problem.tests)), info


@needs_data
def test_local_files_in_every_format_load_the_same_rows(tmp_path):
    """JSON, JSONL and parquet files in the hub layout (tests as a JSON string) read the same."""
    import datasets
    rows = [{"problem": r["problem"], "tests": json.dumps(r["tests"]), "starter_code": r["starter_code"]} for r in json.loads(LCB.read_text())[:20]]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "rows.parquet"))
    loaded = [load_problems(str(tmp_path / f"rows.{ext}"), "train") for ext in ("json", "jsonl", "parquet")]
    assert loaded[0] == loaded[1] == loaded[2] and len(loaded[0]) == 20
    assert loaded[0] == load_problems(str(LCB), "train", max_problems=20)


def test_bad_local_files(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(ValueError, match="expected .json, .jsonl or .parquet"):
        load_problems(str(tmp_path / "notes.txt"), "train")
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps({"problem": "p", "tests": json.dumps([{"input": "1"}])}) + "\n")
    with pytest.raises(ValueError, match=r"broken.jsonl\) row 1: each test needs"):
        load_problems(str(broken), "train")
    not_json = tmp_path / "not_json.jsonl"
    not_json.write_text(json.dumps({"problem": "p", "tests": "[{bad"}) + "\n")
    with pytest.raises(ValueError, match=r"row 1: tests is text that is not JSON \('\[\{bad'\)"):
        load_problems(str(not_json), "train")
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n")
    with pytest.raises(ConfigError, match=r"cannot read DeepCoder data file .*blank.jsonl: the file is empty \(no rows\)"):
        load_problems(str(blank), "train")
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps({"problem": "p", "tests": "[]"}) + "\n")
    with pytest.raises(ValueError, match="no DeepCoder problems with tests"):
        load_problems(str(empty), "train")


def test_a_file_without_the_tests_or_problem_column_names_its_columns(tmp_path):
    """Not the first row's missing value ("got NoneType"): the column, and the columns the file has."""
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text(json.dumps({"question": "x", "answer": "y"}) + "\n")
    with pytest.raises(ConfigError, match=r"wrong.jsonl\): no 'tests' column \(its columns: answer, question\)\n") as err:
        load_problems(str(wrong), "train")
    assert "give every row a 'problem' (the statement) and a 'tests' column" in err.value.hints[0]
    neither = tmp_path / "neither.jsonl"
    neither.write_text(json.dumps({"prompt": "x", "completion": "y"}) + "\n")
    with pytest.raises(ConfigError, match=r"no 'problem' or 'tests' column \(its columns: completion, prompt\)"):
        load_problems(str(neither), "train")


def test_a_file_of_bad_json_logs_nothing_beside_our_error(tmp_path):
    """`datasets`' JSON builder logs "Failed to load JSON from file ... ArrowInvalid" before it
    raises; the run must show only our one-line error."""
    import datasets  # sets up its logger's level on import: read that level after

    lines: list[str] = []

    class Records(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    records, logger = Records(logging.DEBUG), logging.getLogger(datasets.__name__)
    level = logger.level
    logger.addHandler(records)
    try:
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"problem": "p", "tests": "[]"\n')
        with pytest.raises(ConfigError, match=r"cannot read DeepCoder data file .*bad.jsonl: line 1 is not JSON"):
            load_problems(str(bad), "train")
    finally:
        logger.removeHandler(records)
    assert lines == [] and logger.level == level


def test_missing_datasets_names_the_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "datasets", None)
    (tmp_path / "rows.jsonl").write_text("{}\n")
    with pytest.raises(ImportError, match="pip install datasets"):
        load_problems(str(tmp_path / "rows.jsonl"), "train")


def _rows_file(path: Path, statements: list[str]) -> Path:
    path.write_text("".join(json.dumps({"problem": s, "tests": json.dumps([{"input": "1\n", "output": "1\n"}])}) + "\n"
                            for s in statements))
    return path


def test_local_file_holds_out_val_fraction_by_hash_never_validating_on_training_problems(tmp_path):
    """A local file without val_dataset: validation is a hash-chosen share, disjoint from training."""
    statements = [f"Problem number {i}: print one." for i in range(200)]
    data = _rows_file(tmp_path / "rows.jsonl", statements)
    env = DeepCoderEnv(dataset=str(data))
    train, val = {p.statement for p in env.problems("train")}, {p.statement for p in env.problems("val")}
    assert not train & val and train | val == set(statements)
    # the share follows val_fraction (200 draws of a 0.1 coin: 20 expected; 5..40 is > 4 sigma either side)
    assert 5 <= len(val) <= 40
    # the split does not depend on row order, nor on spacing or case of the statement
    problems_mod._load_cached.cache_clear()
    _rows_file(tmp_path / "shuffled.jsonl", [s.upper().replace(" ", "  ") for s in reversed(statements)])
    moved = {p.statement.lower().replace("  ", " ") for p in DeepCoderEnv(dataset=str(tmp_path / "shuffled.jsonl")).problems("val")}
    assert moved == {s.lower() for s in val}
    half = DeepCoderEnv(dataset=str(data), val_fraction=0.5)
    assert len(half.problems("val")) > len(val)
    # max_problems caps each side after the split
    assert len(DeepCoderEnv(dataset=str(data), max_problems=3).problems("val")) == 3


def test_a_small_file_still_validates_on_one_problem_and_one_problem_is_refused(tmp_path):
    """A hash share that leaves a side empty: the lowest hash validates, the highest trains."""
    three = ["Print one.", "Print two.", "Print three."]
    env = DeepCoderEnv(dataset=str(_rows_file(tmp_path / "three.jsonl", three)))
    train, val = env.problems("train"), env.problems("val")
    assert len(val) == 1 and len(train) == 2 and {p.statement for p in train + val} == set(three)
    lowest = min(three, key=lambda s: hash_rank(problems_mod.statement_key(problem_from_row(
        {"problem": s, "tests": [{"input": "1", "output": "1"}]}))))
    assert val[0].statement == lowest
    nearly_all = DeepCoderEnv(dataset=str(tmp_path / "three.jsonl"), val_fraction=0.999)
    assert len(nearly_all.problems("train")) == 1
    one = DeepCoderEnv(dataset=str(_rows_file(tmp_path / "one.jsonl", ["Print one."])))
    with pytest.raises(ValueError, match=r"(?s)one.jsonl holds 1 distinct DeepCoder problem\(s\): .*at least two.*env_config.val_dataset"):
        one.problems("train")
    with pytest.raises(ConfigError, match=r"one.jsonl holds 1 distinct"):  # said by the availability check: before a model loads
        check_available(one.config)


def test_val_dataset_removes_its_problems_from_training(tmp_path):
    train_file = _rows_file(tmp_path / "train.jsonl", ["A.", "B.", "C.", "D."])
    val_file = _rows_file(tmp_path / "val.jsonl", ["b.", "  D. "])
    env = DeepCoderEnv(dataset=str(train_file), val_dataset=str(val_file))
    assert [p.statement for p in env.problems("train")] == ["A.", "C."]
    assert [p.statement for p in env.problems("val")] == ["b.", "  D. "]
    problems_mod._load_cached.cache_clear()
    same = DeepCoderEnv(dataset=str(val_file), val_dataset=str(val_file))
    with pytest.raises(ValueError, match="every one is also in env_config.val_dataset"):
        same.problems("train")
    problems_mod._load_cached.cache_clear()
    # max_problems keeps the first N after the overlap is removed, not before
    capped = DeepCoderEnv(dataset=str(train_file), val_dataset=str(val_file), max_problems=1)
    assert [p.statement for p in capped.problems("train")] == ["A."]
    val_first = _rows_file(tmp_path / "val_first.jsonl", ["A.", "B."])
    assert [p.statement for p in DeepCoderEnv(dataset=str(train_file), val_dataset=str(val_first), max_problems=2)
            .problems("train")] == ["C.", "D."]


# ------------------------------------------------------------------------------ hub splits
class _FakeHub:
    """Stands in for ``datasets.load_dataset`` on the hub: records which split of which subset."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    def load_dataset(self, name, subset=None, split=None, cache_dir=None, **_):
        self.calls.append((name, subset, split))
        return [{"problem": f"{subset}/{split}", "tests": json.dumps([{"input": "1\n", "output": "1\n"}])}]


def test_hub_trains_on_train_splits_and_validates_on_test_splits(monkeypatch):
    hub = _FakeHub()
    monkeypatch.setattr(problems_mod, "_datasets", lambda: hub)
    env = DeepCoderEnv(dataset="agentica-org/DeepCoder-Preview-Dataset")
    train = env.problems("train")
    assert [c[1:] for c in hub.calls] == [("primeintellect", "train"), ("taco", "train"), ("lcbv5", "train")]
    assert [p.statement for p in train] == ["primeintellect/train", "taco/train", "lcbv5/train"]
    hub.calls.clear()
    env.problems("val")
    assert [c[1:] for c in hub.calls] == [("codeforces", "test"), ("lcbv5", "test")]
    assert {c[0] for c in hub.calls} == {"agentica-org/DeepCoder-Preview-Dataset"}
    assert env.reset(3) in {"primeintellect/train", "taco/train", "lcbv5/train"}
    hub.calls.clear()
    DeepCoderEnv(dataset="agentica-org/DeepCoder-Preview-Dataset", train_subsets=["taco"]).problems("train")
    assert [c[1:] for c in hub.calls] == [("taco", "train")]


def test_validation_covers_the_held_out_problems_with_consecutive_seeds():
    env = DeepCoderEnv()
    val = env.problems("val")
    shown = {env.reset(123 + i, mode="val") for i in range(len(val))}
    assert shown == {p.question for p in val}


def test_problems_without_tests_are_counted_in_a_warning(tmp_path, caplog):
    path = _rows_file(tmp_path / "some.jsonl", ["Print one.", "Print two."])
    with path.open("a") as f:
        f.write(json.dumps({"problem": "Print nothing.", "tests": "[]"}) + "\n")
    with caplog.at_level(logging.WARNING, logger="ragen_env_deepcoder.problems"):
        problems = load_problems(str(path), "train")
    assert [p.statement for p in problems] == ["Print one.", "Print two."]
    assert [r.getMessage() for r in caplog.records] == [f"{path} (train): 1 problem(s) without tests skipped (2 read)"]
