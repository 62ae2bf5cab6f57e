"""Local data files read through ``datasets``: a broken file is named with what is wrong in it."""

from __future__ import annotations

import json

import pytest

from ragen_core.datafiles import describe_bad_file, load_local_file
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
