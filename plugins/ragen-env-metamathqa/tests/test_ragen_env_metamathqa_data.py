"""Loading problems through ``datasets``: the shared real-format samples, layouts, splits, errors.

The samples are read from ``../shared/data`` at test time (never copied into the repository);
derived files (parquet, renamed columns) are written to the test's temporary folder.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import datasets
import pytest
from ragen_env_metamathqa import problems as problems_mod
from ragen_env_metamathqa.config import MetaMathQAConfig
from ragen_env_metamathqa.env import MetaMathQAEnv
from ragen_env_metamathqa.plugin import check_available
from ragen_env_metamathqa.problems import in_validation, label_from_response, read_problems, splits_for

from ragen_core.datafiles import hash_rank
from ragen_core.errors import ConfigError

DATA = Path(__file__).resolve().parents[3] / ".." / "shared" / "data"
MMQA = DATA / "metamathqa-sample" / "metamathqa_gsm_ansaug_200.jsonl"
MMQA_JSON = DATA / "metamathqa-sample" / "metamathqa_gsm_ansaug_200.json"
GSM8K = DATA / "gsm8k-sample" / "gsm8k_test_200.jsonl"
needs_samples = pytest.mark.skipif(
    not (MMQA.is_file() and GSM8K.is_file()), reason="shared MetaMathQA / GSM8K samples not available in ../shared/data"
)


@pytest.fixture()
def cache(tmp_path):
    """A private ``datasets`` cache, so tests neither read nor fill the user's."""
    return str(tmp_path / "hf-cache")


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("response", "label"),
    [
        ("so 4 * 6 = 24\n#### 24\nThe answer is: 24", "24"),
        ("The answer is: 3 and later The answer is: \\frac{1}{2}", "\\frac{1}{2}"),  # the last marker
        ("Janet sells 9 eggs.\n#### 18", "18"),  # GSM8K
        ("#### 2,125", "2,125"),
        ("no label here", None),
        ("The answer is:   ", None),
    ],
)
def test_labels(response, label):
    assert label_from_response(response) == label


@needs_samples
def test_metamathqa_sample_json_and_jsonl_read_the_same_rows(cache):
    from_jsonl, dropped = read_problems(str(MMQA), cache_dir=cache)
    from_json, _ = read_problems(str(MMQA_JSON), cache_dir=cache)
    rows = _rows(MMQA)
    assert dropped == 0 and len(from_jsonl) == len(rows) == 200
    assert from_json == from_jsonl
    for problem, row in zip(from_jsonl, rows):
        assert problem.question == row["query"].strip() and problem.type == row["type"] == "GSM_AnsAug"
        assert problem.answer == row["response"].rsplit("The answer is:", 1)[1].strip()


@needs_samples
def test_parquet_reads_like_jsonl(cache, tmp_path):
    parquet = tmp_path / "metamathqa.parquet"
    datasets.load_dataset("json", data_files=str(MMQA), split="train", cache_dir=cache).to_parquet(str(parquet))
    assert read_problems(str(parquet), cache_dir=cache)[0] == read_problems(str(MMQA), cache_dir=cache)[0]


@needs_samples
def test_gsm8k_layouts(cache, tmp_path):
    metamath_layout, _ = read_problems(str(GSM8K), cache_dir=cache)  # MetaMath's copy: query/response with ####
    rows = _rows(GSM8K)
    assert [p.answer for p in metamath_layout] == [r["response"].rsplit("####", 1)[1].strip() for r in rows]
    assert "2,125" in [p.answer for p in metamath_layout]  # labels keep their thousands separators
    original = tmp_path / "gsm8k_original.jsonl"  # the GSM8K release names: question/answer
    original.write_text("".join(json.dumps({"question": r["query"], "answer": r["response"]}) + "\n" for r in rows))
    assert read_problems(str(original), cache_dir=cache)[0] == metamath_layout


def test_math_layout_and_unlabelled_rows(cache, tmp_path):
    path = tmp_path / "math.jsonl"
    rows = [{"problem": "What is 1/2 + 1/4?", "solution": "We get $\\boxed{\\frac{3}{4}}$."},
            {"problem": "Simplify sqrt 8.", "solution": "It is $\\boxed{2\\sqrt{2}}$."},
            {"problem": "No answer given.", "solution": "We leave it open."}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    found, dropped = read_problems(str(path), cache_dir=cache)
    assert [(p.question, p.answer) for p in found] == [("What is 1/2 + 1/4?", "\\frac{3}{4}"), ("Simplify sqrt 8.", "2\\sqrt{2}")]
    assert dropped == 1


@needs_samples
def test_types_and_max_rows(cache, tmp_path):
    rows = _rows(MMQA)[:10]
    for i, row in enumerate(rows):
        row["type"] = "MATH_FOBAR" if i % 2 else "GSM_AnsAug"
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    only_math, _ = read_problems(str(path), cache_dir=cache, types=["MATH_FOBAR"])
    assert [p.question for p in only_math] == [r["query"] for r in rows[1::2]]
    assert len(read_problems(str(MMQA), cache_dir=cache, max_rows=7)[0]) == 7


@needs_samples
def test_held_out_validation_never_shares_a_question(cache):
    config = MetaMathQAConfig(dataset_path=str(MMQA), cache_dir=cache, val_fraction=0.2)
    splits = splits_for(config)
    train_q, val_q = {p.key for p in splits.train}, {p.key for p in splits.val}
    assert not train_q & val_q
    assert len(splits.train) + len(splits.val) == 200
    # the split depends only on the question text, not on row order or the other rows
    assert all(in_validation(p.key, 0.2) for p in splits.val) and not any(in_validation(p.key, 0.2) for p in splits.train)
    assert 20 <= len(splits.val) <= 60  # binomial(200, 0.2): mean 40, sd 5.7; this band is +-3.5 sd
    env = MetaMathQAEnv(config)
    assert {env.reset(s, mode="val") for s in range(50)} <= {p.question for p in splits.val}
    assert {env.reset(s) for s in range(50)} <= {p.question for p in splits.train}


@needs_samples
def test_separate_validation_source_removes_its_questions_from_training(cache, tmp_path):
    train_file = tmp_path / "train.jsonl"  # 30 MetaMathQA rows plus 5 questions of the GSM8K file
    gsm = _rows(GSM8K)
    rows = _rows(MMQA)[:30] + [{"query": r["query"], "response": r["response"], "type": "GSM_AnsAug"} for r in gsm[:5]]
    train_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    splits = splits_for(MetaMathQAConfig(dataset_path=str(train_file), val_dataset_path=str(GSM8K), cache_dir=cache))
    assert len(splits.val) == 200 and len(splits.train) == 30
    assert not {p.key for p in splits.train} & {p.key for p in splits.val}


def test_hub_names_go_to_load_dataset(monkeypatch, cache):
    calls = []

    def fake_load_dataset(path, name=None, split=None, cache_dir=None, **kwargs):
        calls.append((path, name, split, cache_dir))
        return datasets.Dataset.from_list([{"question": "1 + 1?", "answer": "one and one\n#### 2"}])

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    found, _ = read_problems("openai/gsm8k", subset="main", split="train", cache_dir=cache)
    assert calls == [("openai/gsm8k", "main", "train", cache)]
    assert [(p.question, p.answer) for p in found] == [("1 + 1?", "2")]


def test_load_failures_are_config_errors_with_a_hint(monkeypatch, tmp_path, cache):
    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach the hub\nsecond line")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ConfigError, match="could not load dataset 'meta-math/MetaMathQA'") as info:
        read_problems("meta-math/MetaMathQA", cache_dir=cache)
    assert "built-in problems" in str(info.value) and "second line" not in str(info.value)
    with pytest.raises(ConfigError, match="not found"):
        read_problems(str(tmp_path / "missing.jsonl"), cache_dir=cache)
    csv = tmp_path / "rows.csv"
    csv.write_text("query,response\n")
    with pytest.raises(ConfigError, match="expected .json, .jsonl or .parquet"):
        read_problems(str(csv), cache_dir=cache)


def test_unknown_columns_are_named(tmp_path, cache):
    path = tmp_path / "odd.jsonl"
    path.write_text(json.dumps({"prompt": "1+1", "completion": "2"}) + "\n")
    with pytest.raises(ConfigError, match=r"unknown row layout with columns \['completion', 'prompt'\]"):
        read_problems(str(path), cache_dir=cache)


def test_training_on_a_test_split_is_refused():
    with pytest.raises(ValueError, match="test split"):
        MetaMathQAConfig(dataset_path="openai/gsm8k", split="test")
    assert MetaMathQAConfig(val_dataset_path="openai/gsm8k", val_split="test").val_split == "test"


def test_builtin_set_splits_without_overlap_and_is_stable():
    splits = splits_for(MetaMathQAConfig())
    assert len(splits.train) + len(splits.val) == 240 and splits.val
    assert not {p.key for p in splits.train} & {p.key for p in splits.val}
    bigger = splits_for(MetaMathQAConfig(builtin_size=480))
    assert set(splits.train) <= set(bigger.train) and set(splits.val) <= set(bigger.val)
    assert problems_mod.builtin_problems(3) == problems_mod.builtin_problems(240)[:3]


def _gsm_file(path: Path, count: int, unlabelled: int = 0) -> Path:
    rows = [{"question": f"What is {i} + 1?", "answer": f"#### {i + 1}"} for i in range(count)]
    rows += [{"question": f"Open question {i}?", "answer": "no label"} for i in range(unlabelled)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_few_questions_still_validate_on_one(tmp_path, cache):
    """A hash share of 5 % holds out none of three questions (most likely): the lowest hash is held out
    instead, so validation runs instead of failing at its first reset."""
    env = MetaMathQAEnv(dataset_path=str(_gsm_file(tmp_path / "three.jsonl", 3)), cache_dir=cache, val_fraction=1e-12)
    splits = splits_for(env.config)
    assert len(splits.val) == 1 and len(splits.train) == 2
    assert splits.val[0].key == min((p.key for p in splits.train + splits.val), key=hash_rank)
    assert env.reset(0, mode="val") == splits.val[0].question
    builtin = MetaMathQAEnv(builtin_size=20, val_fraction=1e-12)
    assert builtin.reset(0, mode="val")
    assert len(splits_for(MetaMathQAConfig(builtin_size=20, val_fraction=0.999999)).train) == 1  # and one trains


def test_one_question_cannot_be_split_and_says_so_before_a_run(tmp_path, cache):
    one = _gsm_file(tmp_path / "one.jsonl", 1)
    config = MetaMathQAConfig(dataset_path=str(one), cache_dir=cache)
    with pytest.raises(ConfigError, match=r"(?s)one.jsonl holds 1 distinct question\(s\): holding one out .*env_config.val_dataset_path"):
        check_available(config)  # the availability check reads local data: before a run loads its model
    assert check_available(config.model_copy(update={"dataset_path": str(_gsm_file(tmp_path / "two.jsonl", 2))})) == []


def test_unlabelled_rows_are_counted_in_a_warning(tmp_path, cache, caplog):
    path = _gsm_file(tmp_path / "some.jsonl", 4, unlabelled=3)
    with caplog.at_level(logging.WARNING, logger="ragen_env_metamathqa.problems"):
        splits = splits_for(MetaMathQAConfig(dataset_path=str(path), cache_dir=cache))
    assert len(splits.train) + len(splits.val) == 4
    assert [r.getMessage() for r in caplog.records] == [f"{path}: 3 row(s) without a label skipped (4 question(s) read)"]


def test_a_validation_source_without_labels_is_refused(tmp_path, cache):
    train = _gsm_file(tmp_path / "train.jsonl", 4)
    val = _gsm_file(tmp_path / "val.jsonl", 0, unlabelled=2)
    with pytest.raises(ConfigError, match=r"no validation problems in env_config.val_dataset_path .*val.jsonl: 2 row\(s\) without a label"):
        check_available(MetaMathQAConfig(dataset_path=str(train), val_dataset_path=str(val), cache_dir=cache))


def test_no_training_problems_left_names_the_cause(tmp_path, cache):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"question": f"{i} + 1?", "answer": f"#### {i + 1}"}) + "\n" for i in range(4)))
    with pytest.raises(ConfigError, match=r"no training problems left in .*rows.jsonl: 4 question\(s\) read; every one is also in "
                                          r"env_config.val_dataset_path") as err:
        splits_for(MetaMathQAConfig(dataset_path=str(rows), val_dataset_path=str(rows), cache_dir=cache))
    assert "not the training one" in err.value.hints[0]
    assert len(splits_for(MetaMathQAConfig(dataset_path=str(rows), val_fraction=0.999999, cache_dir=cache)).train) == 1


def test_types_no_row_has_name_the_rows_read_and_the_types_the_file_has(tmp_path, cache):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"query": f"{i} + 1?", "response": f"The answer is: {i + 1}", "type": kind}) + "\n"
                            for i, kind in enumerate(["GSM_AnsAug", "GSM_AnsAug", "GSM_Rephrased"])))
    with pytest.raises(ConfigError, match=r"rows.jsonl: 3 row\(s\) read, none of a type in types=\['GSM_Foo'\] "
                                          r"\(its types: GSM_AnsAug, GSM_Rephrased\)") as err:
        splits_for(MetaMathQAConfig(dataset_path=str(rows), types=["GSM_Foo"], cache_dir=cache))
    assert err.value.hints == ["set env_config.types to types the data has, or drop it"]
    gsm = tmp_path / "gsm.jsonl"
    gsm.write_text(json.dumps({"question": "1 + 1?", "answer": "#### 2"}) + "\n")
    with pytest.raises(ConfigError, match=r"1 row\(s\) read, but it has no type column, so types=\['GSM_Foo'\] keeps none") as err:
        splits_for(MetaMathQAConfig(dataset_path=str(gsm), types=["GSM_Foo"], cache_dir=cache))
    assert err.value.hints == ["drop env_config.types (only MetaMathQA rows have a type)"]
    unlabelled = tmp_path / "unlabelled.jsonl"  # a type that matches, on rows without a label: not a types problem
    unlabelled.write_text(json.dumps({"query": "1 + 1?", "response": "two", "type": "GSM_AnsAug"}) + "\n")
    with pytest.raises(ConfigError, match=r"0 question\(s\) read, types=\['GSM_AnsAug'\], 1 row\(s\) without a label"):
        splits_for(MetaMathQAConfig(dataset_path=str(unlabelled), types=["GSM_AnsAug"], cache_dir=cache))


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_bad_json_and_a_folder_readme_log_nothing_beside_our_error(tmp_path, cache):
    """`datasets` logs "Failed to load JSON from file ..." (ERROR) before raising, and
    huggingface_hub warns about a data folder's README without metadata: the run shows only our line."""
    records = _Records()
    loggers = [logging.getLogger("datasets"), logging.getLogger("huggingface_hub")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(records)
    try:
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"query": "1+1?", "response": "The answer is: 2"\n')
        with pytest.raises(ConfigError, match="line 1 is not JSON"):
            read_problems(str(bad), cache_dir=cache)
        folder = tmp_path / "folder"
        folder.mkdir()
        (folder / "train.jsonl").write_text(json.dumps({"query": "1+1?", "response": "The answer is: 2"}) + "\n")
        (folder / "README.md").write_text("# my data\n")
        assert len(read_problems(str(folder), cache_dir=cache)[0]) == 1
    finally:
        for logger in loggers:
            logger.removeHandler(records)
    assert records.lines == []
    assert [logger.level for logger in loggers] == levels  # restored after the loads


def test_a_folder_with_files_of_other_columns_names_the_cast_and_the_fix(tmp_path, cache):
    """A GSM8K-column *_test_* file beside MetaMathQA train.jsonl: the error was "DatasetGenerationError:
    An error occurred while generating the dataset", the cause (a column cast) only under -v."""
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "train.jsonl").write_text(json.dumps({"query": "1+1?", "response": "The answer is: 2", "type": "GSM_AnsAug"}) + "\n")
    (folder / "foo_test_1.jsonl").write_text(json.dumps({"question": "q", "answer": "#### 3"}) + "\n")
    with pytest.raises(ConfigError) as info:
        read_problems(str(folder), cache_dir=cache)
    first, hint = str(info.value).splitlines()[:2]
    assert "DatasetGenerationError" not in first and "CastError" in first
    assert hint.startswith("hint: datasets reads every data file of a folder with one set of columns")


def test_a_folder_without_a_train_file_names_its_files_not_a_column_cast(tmp_path, cache):
    """A folder holding only gsm8k_test.jsonl: 'Unknown split "train"', with the hint about mixed columns."""
    folder = tmp_path / "only-test"
    folder.mkdir()
    (folder / "gsm8k_test.jsonl").write_text(json.dumps({"question": "1+1?", "answer": "#### 2"}) + "\n")
    with pytest.raises(ConfigError) as info:
        read_problems(str(folder), cache_dir=cache)
    assert info.value.hints == [f"datasets takes the 'train' split from files named after it and {folder} holds gsm8k_test.jsonl: "
                                f"give one file itself (dataset_path={folder / 'gsm8k_test.jsonl'})"]


def test_one_question_with_two_labels_is_warned_about(tmp_path, cache, caplog):
    """Kept twice without a word: an episode drawing the wrong row pays for the wrong answer."""
    rows = [{"question": "What is 1 + 2?", "answer": "#### 3"}, {"question": "what is  1 + 2?", "answer": "#### 4"},
            {"question": "What is 2 + 2?", "answer": "#### 4"}, {"question": "What is 2 + 2?", "answer": "#### 4"},
            {"question": "What is 3 + 3?", "answer": "#### 6"}]
    path = tmp_path / "dup.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="ragen_env_metamathqa.problems"):
        splits_for(MetaMathQAConfig(dataset_path=str(path), cache_dir=cache))
    said = [r.getMessage() for r in caplog.records]
    assert said == [f"{path}: 1 question(s) appear with different labels (e.g. 'What is 1 + 2?': '3' and '4'); every row is kept "
                    "as given, so the reward of such a question depends on the row drawn"], said
