"""Statement splitting, proof text, the tactic parser and theorem-set loading (no Lean needed).

The miniF2F sample is read from the shared data folder (never copied into the repository)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ragen_env_lean.builtin import BUILTIN, builtin_theorems
from ragen_env_lean.config import DEFAULT_IMPORTS, DEFAULT_PREAMBLE, LeanConfig
from ragen_env_lean.statements import COMMAND_WORDS, body_text, make_theorem, parse_tactic, proof_text, split_statement
from ragen_env_lean.theorems import in_validation, informal_text, theorem_set

from ragen_core.errors import ConfigError

SAMPLE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "minif2f-sample"
needs_sample = pytest.mark.skipif(not (SAMPLE / "minif2f.jsonl").is_file(), reason=f"miniF2F sample not found at {SAMPLE}")
HEADER = "import Mathlib\nimport Aesop\n\nset_option maxHeartbeats 0\n\nopen BigOperators Real Nat Topology Rat\n\n"


def _rows() -> list[dict]:
    return [json.loads(line) for line in (SAMPLE / "minif2f.jsonl").read_text(encoding="utf-8").splitlines()]


@needs_sample
def test_every_jsonl_sample_theorem_splits_into_header_parts_and_statement():
    rows = _rows()
    assert len(rows) == 488
    for row in rows:
        imports, preamble, statement = split_statement(row["header"] + row["formal_statement"])
        assert imports == "import Mathlib\nimport Aesop", row["name"]
        assert preamble == "set_option maxHeartbeats 0\n\nopen BigOperators Real Nat Topology Rat", row["name"]
        assert statement == row["formal_statement"].rstrip(), row["name"]  # already ends in ':= by'
        assert statement.startswith(f"theorem {row['name']}") and statement.endswith(":= by")


@needs_sample
def test_every_lean_file_sample_splits_and_loses_its_sorry():
    files = sorted((SAMPLE / "lean").glob("*.lean"))
    assert len(files) == 17
    for path in files:
        text = path.read_text(encoding="utf-8")
        imports, preamble, statement = split_statement(text)
        assert imports == "import Mathlib", path.name
        assert preamble == "set_option maxHeartbeats 0\n\nopen BigOperators Real Nat Topology Rat", path.name
        assert statement.startswith(f"theorem {path.stem}") and statement.endswith(":= by"), path.name
        assert "sorry" not in statement
        assert statement == text[text.index("theorem"):].rstrip().removesuffix("sorry").rstrip()


def test_split_rules_on_written_examples():
    assert split_statement("theorem t : 1 = 1 := by sorry") == ("", "", "theorem t : 1 = 1 := by")
    assert split_statement("theorem t : 1 = 1 :=") == ("", "", "theorem t : 1 = 1 := by")
    text = "import Mathlib\n-- a note\nopen Nat\n\n\n\nlemma l (n : ℕ) :\n  n = n := by\n"
    assert split_statement(text) == ("import Mathlib", "-- a note\nopen Nat", "lemma l (n : ℕ) :\n  n = n := by")
    # the body starts at the first declaration line; later lines are all statement
    assert split_statement("def f := 1\ntheorem t : f = 1 := by")[2] == "def f := 1\ntheorem t : f = 1 := by"
    for bad in ("open Nat", "theorem t : 1 = 1 := rfl", ""):
        with pytest.raises(ValueError):
            split_statement(bad)


def test_proof_text_layout_and_defaults():
    bare = make_theorem("t", "theorem t (x : ℕ) : x = x := by", default_imports=DEFAULT_IMPORTS, default_preamble=DEFAULT_PREAMBLE)
    assert bare.imports == DEFAULT_IMPORTS and bare.preamble == DEFAULT_PREAMBLE
    text = proof_text(bare, ["intro", "cases h with\n| inl => rfl"])
    assert text == (
        "import Mathlib\nimport Aesop\n\nset_option maxHeartbeats 0\n\nopen BigOperators Real Nat Topology Rat\n\n"
        "theorem t (x : ℕ) : x = x := by\n  intro\n  cases h with\n  | inl => rfl"
    )
    assert text == f"{bare.imports}\n\n{body_text(bare, ['intro', 'cases h with', '| inl => rfl'])}"
    own = make_theorem("u", "import Mathlib\n\ntheorem u : True := by", default_imports="import Other", default_preamble="open X")
    assert (own.imports, own.preamble) == ("import Mathlib", "")  # a statement with imports keeps its (empty) preamble
    assert proof_text(own, []) == "import Mathlib\n\ntheorem u : True := by"


def test_tactic_parser():
    assert parse_tactic("  simp [h₀]  ", 100) == ("simp [h₀]", None)
    assert parse_tactic("\tnorm_num\n\tlinarith", 100) == ("norm_num\nlinarith", None)
    assert parse_tactic("\n  cases h with\n  | inl h => simp  \n\n", 100) == ("cases h with\n| inl h => simp", None)
    assert parse_tactic("constructor\n  · simp\n  · rfl", 100) == ("constructor\n  · simp\n  · rfl", None)
    assert parse_tactic("", 100) == ("", "empty tactic")
    assert parse_tactic(" \n ", 100) == ("", "empty tactic")
    assert parse_tactic("x" * 101, 100)[1] == "tactic longer than 100 characters"
    assert parse_tactic("simp\x00", 100)[1] == "tactic contains a NUL character"
    assert parse_tactic("rfl\naxiom cheat : False", 100)[1] == "'axiom' starts a Lean command, not a tactic"
    assert parse_tactic("exact foo.theorem_name", 100)[1] is None  # a word inside a name is not a command
    assert parse_tactic("have h := Nat.lt_irrefl", 100)[1] is None
    assert parse_tactic("exact absurd h (by decide)", 100)[1] is None
    assert parse_tactic("#eval 1", 100)[1] == "'#eval' starts a Lean command, not a tactic"


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_tactic_parser_takes_any_text(text):
    tactic, problem = parse_tactic(text, 200)
    assert isinstance(tactic, str) and len(tactic) <= 200
    assert problem is None or isinstance(problem, str)
    if problem is None:
        assert tactic.strip() and "\x00" not in tactic and "\t" not in tactic
        assert not any(f"\n{w} " in f"\n{tactic} " for w in COMMAND_WORDS)


def test_builtin_set_is_fixed_and_complete():
    found = builtin_theorems()
    assert [t.name for t in found.train + found.val] == [b[0] for b in BUILTIN]
    assert [t.name for t in found.val] == ["ragen_abs_bound", "ragen_sum_sq"]
    for theorem in found.train + found.val:
        assert theorem.statement.startswith(f"theorem {theorem.name} ") and theorem.statement.endswith(":= by")
        assert theorem.proof and theorem.informal and theorem.imports == DEFAULT_IMPORTS
        assert all(parse_tactic(t, 2000)[1] is None for t in theorem.proof)


def test_informal_text_unwraps_doc_comments():
    assert informal_text({"informal_prefix": "/-- Show that 1 = 1.-/\n"}) == "Show that 1 = 1."
    assert informal_text({"natural_language_statement": " Prove it. ", "informal_prefix": "/-- other -/"}) == "Prove it."
    assert informal_text({}) == ""


@needs_sample
def test_jsonl_loader_uses_the_fixed_split_column():
    found = theorem_set(LeanConfig(dataset=str(SAMPLE / "minif2f.jsonl")))
    assert (len(found.train), len(found.val), found.skipped) == (244, 244, 0)
    valid = {r["name"] for r in _rows() if r["split"] == "valid"}
    assert {t.name for t in found.train} == valid and not valid & {t.name for t in found.val}
    first = found.train[0]
    assert first.name == "amc12a_2019_p21" and first.informal.startswith("Let $z=\\frac{1+i}{\\sqrt{2}}.$")
    swapped = theorem_set(LeanConfig(dataset=str(SAMPLE / "minif2f.jsonl"), train_split="test", val_split="valid", max_theorems=3))
    assert [t.name for t in swapped.val] == [t.name for t in found.train[:3]]


@needs_sample
def test_lean_folder_loader_hashes_names_into_a_fixed_validation_share():
    found = theorem_set(LeanConfig(dataset=str(SAMPLE / "lean"), val_fraction=0.3))
    names = sorted(p.stem for p in (SAMPLE / "lean").glob("*.lean"))
    assert sorted(t.name for t in found.train + found.val) == names
    assert {t.name for t in found.val} == {n for n in names if in_validation(n, 0.3)}
    assert all(t.imports == "import Mathlib" for t in found.train)


def test_loader_errors_name_the_problem(tmp_path):
    with pytest.raises(ConfigError, match="lean dataset not found"):
        theorem_set(LeanConfig(dataset=str(tmp_path / "missing.jsonl")))
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="cannot read it"):
        theorem_set(LeanConfig(dataset=str(bad)))
    none = tmp_path / "none.jsonl"
    none.write_text(json.dumps({"name": "x", "formal_statement": "no declaration here", "split": "valid"}) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="none of its 1 training rows holds a formal_statement that splits.*first: no line starts") as info:
        theorem_set(LeanConfig(dataset=str(none)))
    assert "train_split" not in str(info.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no .lean"):
        theorem_set(LeanConfig(dataset=str(tmp_path / "empty")))


@pytest.mark.parametrize(("name", "text", "where"), [("rows.jsonl", '{"name": "a", "formal_statement": "theorem a : True := by"}\n\n[1, 2]\n',
                                                     "line 3 is not a JSON object (it is [1, 2])"),
                                                    ("num.jsonl", "5\n", "line 1 is not a JSON object (it is 5)"),
                                                    ("rows.json", '[{"name": "a"}, "theorem b : True := by"]',
                                                     'row 2 is not a JSON object (it is "theorem b : True := by")')])
def test_a_row_that_is_not_an_object_is_named_by_its_line(tmp_path, name, text, where):
    """[1, 2] or 5 on a line was an AttributeError (or a TypeError) at the first reset."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        theorem_set(LeanConfig(dataset=str(path)))
    assert info.value.message == f"lean dataset {path} {where}"
    assert info.value.hints and info.value.hints[0].startswith("give miniF2F-style rows")


def test_a_broken_jsonl_line_is_named_by_its_line_in_the_file(tmp_path):
    """json's position is within the one line it parsed: line 3 was reported as "line 1 column 1"."""
    path = tmp_path / "broken.jsonl"
    path.write_text('{"name": "a", "formal_statement": "theorem a : True := by"}\n\n{oops\n', encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        theorem_set(LeanConfig(dataset=str(path)))
    assert str(info.value) == (f"lean dataset {path}: cannot read it "
                               "(line 3 is not JSON: Expecting property name enclosed in double quotes, column 2)")


def test_a_json_file_of_one_object_or_an_empty_list_says_what_it_holds(tmp_path):
    """Both were reported as "has no rows (the file is empty)"."""
    one = tmp_path / "one.json"
    one.write_text(json.dumps({"name": "t1", "formal_statement": "theorem t1 : True := by"}), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        theorem_set(LeanConfig(dataset=str(one)))
    assert str(info.value).splitlines()[0] == f"lean dataset {one} holds one JSON object with no 'data' or 'rows' list"
    assert '{"data": [...]}' in info.value.hints[0]
    (tmp_path / "wrapped.json").write_text(json.dumps({"rows": [{"name": "t1", "formal_statement": "theorem t1 : True := by",
                                                                 "split": "valid"}]}), encoding="utf-8")
    assert [t.name for t in theorem_set(LeanConfig(dataset=str(tmp_path / "wrapped.json"))).train] == ["t1"]
    (tmp_path / "none.json").write_text("[]", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"has no rows \(its JSON list is empty\)"):
        theorem_set(LeanConfig(dataset=str(tmp_path / "none.json")))


def test_rows_whose_statement_does_not_split_are_counted_in_one_warning(tmp_path, caplog):
    """They were dropped without a word (TheoremSet.skipped was never read)."""
    rows = [{"name": n, "formal_statement": f, "split": s} for n, f, s in (
        ("a", "theorem a : True := by", "valid"), ("b", "no declaration here", "valid"),
        ("c", "theorem c : True", "test"), ("d", "theorem d : True := by", "test"))]
    path = tmp_path / "some.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with caplog.at_level("WARNING", logger="ragen_env_lean.theorems"):
        for _ in range(2):  # loads are cached: one warning
            found = theorem_set(LeanConfig(dataset=str(path)))
    assert (len(found.train), len(found.val), found.skipped) == (1, 1, 2)
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: 2 row(s) whose formal_statement does not split into imports, preamble and a declaration skipped (2 theorem(s) read)"]


def test_no_training_theorem_names_the_real_cause_and_a_hint_that_fits(tmp_path):
    """An empty file, rows without formal_statement and a split the data lacks are three causes with
    three hints; only the wrong split points at train_split."""
    def error(name: str, text: str, **kw) -> str:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        with pytest.raises(ConfigError) as info:
            theorem_set(LeanConfig(dataset=str(path), **kw))
        return str(info.value)

    empty = error("empty.jsonl", "")
    assert "has no rows (the file is empty)" in empty and "train_split" not in empty
    wrong = error("wrong.jsonl", json.dumps({"name": "t1", "statement": "theorem t1 : True := by"}) + "\n")
    assert "no row has a non-empty formal_statement column (1 rows; their columns: name, statement)" in wrong
    assert "train_split" not in wrong and "hint: give each row the Lean theorem in a formal_statement column" in wrong
    rows = [{"name": n, "formal_statement": f"theorem {n} : True := by", "split": s} for n, s in (("a", "test"), ("b", "train"))]
    split = error("split.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    assert "has no row whose split is 'valid' (its splits: test, train)" in split
    assert "hint: set env_config.train_split to a split the data has" in split
    assert theorem_set(LeanConfig(dataset=str(tmp_path / "split.jsonl"), train_split="train")).train[0].name == "b"
