"""Local data files read through ``datasets``: a broken file is named with what is wrong in it."""

from __future__ import annotations

import json

import pytest

from ragen_core.datafiles import describe_bad_file, hash_rank, in_hash_share, load_local_file, not_an_object
from ragen_core.errors import ConfigError

pytest.importorskip("datasets")

ROWS = [{"question": f"q{i}", "answer": str(i)} for i in range(5)]


def test_a_good_file_loads_and_is_not_described(tmp_path):
    path = tmp_path / "ok.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    assert describe_bad_file(path) is None
    assert [row["answer"] for row in load_local_file("json", path, cache_dir=str(tmp_path / "cache"))] == ["0", "1", "2", "3", "4"]


@pytest.mark.parametrize(("name", "content", "says"), [
    ("cut.json", json.dumps(ROWS)[:-20], "not valid JSON: "),
    ("bad.jsonl", json.dumps(ROWS[0]) + "\nnot json at all\n", "line 2 is not JSON: Expecting value (column 1)"),
])
def test_a_broken_file_is_one_line_naming_the_file_and_the_fault(tmp_path, capsys, name, content, says):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ConfigError) as err:
        load_local_file("json", path, cache_dir=str(tmp_path / "cache"), what="test data file")
    first = str(err.value).splitlines()[0]
    assert first.startswith(f"cannot read test data file {path}: ") and says in first, first
    if name == "cut.json":
        assert first.endswith("(the file ends early: cut short?)")
    assert "Generating train split" not in capsys.readouterr().err  # datasets' progress bars stay off


def test_a_file_that_is_not_utf8_is_described_so(tmp_path):
    path = tmp_path / "latin.jsonl"
    path.write_bytes(b'{"question": "caf\xe9"}\n')
    assert describe_bad_file(path) == "not UTF-8 text (byte 17)"  # the 0xe9 after {"question": "caf


def test_hash_holdout_keeps_a_key_on_one_side_and_one_key_on_each_side():
    from ragen_core.datafiles import hash_holdout

    items = [f"q{i}" for i in range(6)] + ["q0", "Q0"]  # a repeated key; keys are the lower-cased text
    train, val = hash_holdout(items, str.lower, 1e-12, source="f.jsonl", what="question", val_setting="val_path")
    lowest = min({i.lower() for i in items}, key=hash_rank)
    assert {i.lower() for i in val} == {lowest} and len(val) == sum(i.lower() == lowest for i in items)
    assert len(train) + len(val) == len(items)
    train, val = hash_holdout(items, str.lower, 0.999999, source="f.jsonl", what="question", val_setting="val_path")
    assert {i.lower() for i in train} == {max({i.lower() for i in items}, key=hash_rank)}
    share = [f"question {i}" for i in range(2000)]
    train, val = hash_holdout(share, str, 0.25, source="f", what="question", val_setting="v")
    assert set(val) == {q for q in share if in_hash_share(q, 0.25)} and 400 < len(val) < 600  # binomial(2000, 0.25): 500 +- 19
    with pytest.raises(ConfigError, match=r"^f.jsonl holds 1 distinct question\(s\)") as err:
        hash_holdout(["a", "A"], str.lower, 0.5, source="f.jsonl", what="question", val_setting="val_path")
    assert err.value.hints == ["add questions, or name a validation source with val_path"]


@pytest.mark.parametrize(("row", "said"), [({"a": 1}, None), ([1, 2], "row 2 is not a JSON object (it is [1, 2])"),
                                           ("x" * 50, f'row 2 is not a JSON object (it is "{"x" * 39}...)'),
                                           (None, "row 2 is not a JSON object (it is null)")])
def test_not_an_object_names_the_row_and_shows_it_clipped(row, said):
    """One phrase for SearchQA's and Lean's row checks (each kept its own copy)."""
    assert not_an_object(row, "row 2") == said
