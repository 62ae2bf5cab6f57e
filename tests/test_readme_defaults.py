"""The default column of every README table of settings equals what the plugin's config model
gives (spec 17 L38: the reference's docs and code disagreed on defaults; the config models are
the one source of truth, and these hand-written tables must follow them).

A table of settings is a markdown table with a ``default`` column (rows ``| `field` | default |
meaning |``), a ``plugin`` column naming the plugin(s) of each row, or one column per plugin
(the hard filters' table). A cell naming several fields or plugins (``a`` / ``b``) pairs its
values in order (``3 / 4``, ``1.0, true``). The default of a plugin is its config made with no
settings (``spec.make_config()``), so fields derived by a validator compare as a run sees them.
"""

from __future__ import annotations

import ast
import enum
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ragen_core import registry

ROOT = Path(__file__).resolve().parents[1]

#: README -> (kind, plugins its tables describe when a row or heading does not name one)
READMES: dict[str, tuple[str, tuple[str, ...]]] = {
    "plugins/ragen-algo-grpo/README.md": ("estimator", ()),
    "plugins/ragen-algo-ppo/README.md": ("estimator", ()),
    "plugins/ragen-diagnostics/README.md": ("diagnostic", ("collapse",)),
    "plugins/ragen-engine-vllm/README.md": ("engine", ("vllm",)),
    "plugins/ragen-workers-ray/README.md": ("pool", ("ray",)),
    "plugins/ragen-env-bandit/README.md": ("env", ("bandit",)),
    "plugins/ragen-env-countdown/README.md": ("env", ("countdown",)),
    "plugins/ragen-env-deepcoder/README.md": ("env", ("deepcoder",)),
    "plugins/ragen-env-frozenlake/README.md": ("env", ("frozenlake",)),
    "plugins/ragen-env-metamathqa/README.md": ("env", ("metamathqa",)),
    "plugins/ragen-env-sudoku/README.md": ("env", ("sudoku",)),
    "ragen-env-sokoban/README.md": ("env", ("sokoban",)),
    "ragen-env-webshop/README.md": ("env", ("webshop",)),
    "ragen-filters/README.md": ("filter", ()),  # headings name the plugins; "shared by every filter": all of them
}

#: (README, field cell) -> why its default cell is words, not a value to compare
PROSE: dict[tuple[str, str], str] = {
    ("plugins/ragen-algo-ppo/README.md", "all of `gae`, plus `high_level_gamma`"): "checked on its own row below",
    ("plugins/ragen-algo-ppo/README.md", "other fields"): "points at AlgorithmConfig",
    ("plugins/ragen-workers-ray/README.md", "`local_cpus`"): "None in the model: the pool then takes this machine's cores",
    ("plugins/ragen-workers-ray/README.md", "`step_timeout_s`"): "None in the model: the run's rollout.pool_config sets 600",
    ("plugins/ragen-workers-ray/README.md", "`reset_timeout_s`"): "None in the model: the run's rollout.pool_config sets 600",
    ("plugins/ragen-env-sudoku/README.md", "`max_actions_per_episode`"): "derived from the blank count (checked below)",
    ("plugins/ragen-env-sudoku/README.md", "`max_turns`"): "derived from the action budget (checked below)",
    ("ragen-env-sokoban/README.md", "`grid_vocab`"): "abbreviated with '...'",
    ("ragen-env-webshop/README.md", "`server.*`"): "a nested model, described in words",
}

FIELD = re.compile(r"`([a-z_][a-z0-9_.]*)`")
SEPARATORS = (" / ", ", ")


@dataclass
class Row:
    readme: str
    line: int
    plugins: list[tuple[str, str]]  # (kind, name)
    fields: str  # the field cell as written
    default: str

    def where(self) -> str:
        return f"{self.readme}:{self.line}"


def split_cells(line: str) -> list[str]:
    """The cells of a table row, split as GitHub does: on every ``|`` not escaped as ``\\|``
    (also inside backticks)."""
    cells = re.split(r"(?<!\\)\|", line.strip())
    return [c.strip().replace("\\|", "|") for c in cells[1:-1]]


def canonical_names(kind: str) -> list[str]:
    """The plugins of ``kind`` by their own names (not their aliases)."""
    return [n for n in registry.names(kind) if registry.get_spec(kind, n).name == n]


def plugin_names(cell: str, kind: str) -> list[tuple[str, str]]:
    """``grpo`` / ``drgrpo`` -> estimators (an ``(algorithm)`` mark, or a name with no estimator:
    the algorithm)."""
    kinds = ["algorithm"] if "(algorithm)" in cell else [kind, "algorithm"] if kind == "estimator" else [kind]
    out = []
    for name in re.findall(r"`([a-z0-9-]+)`", cell):
        found = next((k for k in kinds if name in registry.names(k)), None)
        assert found is not None, f"no {' or '.join(kinds)} named {name!r}"
        out.append((found, name))
    return out


def table_rows(readme: str) -> list[Row]:
    kind, default_plugins = READMES[readme]
    lines = (ROOT / readme).read_text(encoding="utf-8").splitlines()
    rows: list[Row] = []
    heading = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line
        if not (line.startswith("|") and i + 1 < len(lines) and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[i + 1].strip())):
            i += 1
            continue
        header = [c.lower() for c in split_cells(line)]
        j = i + 2
        body = []
        while j < len(lines) and lines[j].startswith("|"):
            body.append((j + 1, split_cells(lines[j])))
            j += 1
        i = j
        per_plugin = [n for n, c in enumerate(header) if re.fullmatch(r"`[a-z0-9-]+`", c) and c.strip("`") in registry.names(kind)]
        if "default" not in header and not (per_plugin and "field" in header):
            continue  # not a table of settings
        for number, cells in body:
            assert len(cells) == len(header), (f"{readme}:{number} has {len(cells)} cells, its header {len(header)}: "
                                               "escape a | inside a cell as \\|")
        field_col = header.index("field") if "field" in header else header.index("key")
        for number, cells in body:
            if "default" in header:
                if "plugin" in header:
                    plugins = plugin_names(cells[header.index("plugin")], kind)
                else:
                    named = [(kind, n) for n in re.findall(r"`([a-z0-9-]+)`", heading) if n in registry.names(kind)]
                    names = named or [(kind, n) for n in default_plugins] or [(kind, n) for n in canonical_names(kind)]
                    plugins = names
                rows.append(Row(readme, number, plugins, cells[field_col], cells[header.index("default")]))
            else:  # one column per plugin; an empty cell: the plugin has no such field
                for col in per_plugin:
                    if cells[col]:
                        rows.append(Row(readme, number, plugin_names(header[col], kind), cells[field_col], cells[col]))
    return rows


def value_of(text: str) -> Any:
    """A default cell as a value: None, booleans, numbers, quoted strings, lists, tuples and
    dicts as Python literals; anything else is a bare word (a string)."""
    text = text.strip()
    if re.fullmatch(r"`[^`]*`", text):
        text = text[1:-1]
    if text.lower() == "none":
        return None
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def same(doc: Any, actual: Any) -> bool:
    if isinstance(actual, enum.Enum):
        actual = actual.value
    if isinstance(actual, bool) or isinstance(doc, bool):
        return doc is actual
    if isinstance(actual, (int, float)) and isinstance(doc, (int, float)):
        return float(doc) == float(actual)
    if isinstance(actual, (list, tuple)):
        if isinstance(doc, str):
            doc = [value_of(part) for part in doc.split(", ")] if doc else []
        return isinstance(doc, (list, tuple)) and len(doc) == len(actual) and all(map(same, doc, actual))
    if isinstance(actual, dict):
        return isinstance(doc, dict) and doc == actual
    return doc == actual


def split_values(text: str, count: int) -> list[str]:
    if count == 1:
        return [text]
    for sep in SEPARATORS:
        if text.count(sep) == count - 1:
            return text.split(sep)
    raise AssertionError(f"{text!r} does not give {count} values (separated by ' / ' or ', ')")


def config_value(kind: str, name: str, field: str) -> Any:
    value: Any = registry.get_spec(kind, name).make_config()
    for part in field.split("."):
        assert hasattr(value, part), f"{kind} {name!r} has no setting {field!r}"
        value = getattr(value, part)
    return value


def checks(row: Row) -> list[tuple[str, str, str, str]]:
    """(kind, plugin, field, documented default) of every value the row states."""
    fields = FIELD.findall(row.fields)
    assert fields and re.fullmatch(r"`[^`]+`((\s*/\s*|,\s*)`[^`]+`)*", row.fields), \
        f"{row.where()}: field cell {row.fields!r} is not a list of `field` names (add it to PROSE with a reason)"
    if len(fields) > 1:
        return [(k, n, f, v) for f, v in zip(fields, split_values(row.default, len(fields))) for k, n in row.plugins]
    values = split_values(row.default, len(row.plugins)) if " / " in row.default and len(row.plugins) > 1 else [row.default] * len(row.plugins)
    return [(k, n, fields[0], v) for (k, n), v in zip(row.plugins, values)]


def all_rows() -> list[Row]:
    return [row for readme in READMES for row in table_rows(readme)]


def test_every_readme_default_matches_the_config_model():
    drift = []
    for row in all_rows():
        if (row.readme, row.fields) in PROSE:
            continue
        for kind, name, field, text in checks(row):
            actual = config_value(kind, name, field)
            if not (same(value_of(text), actual) or isinstance(actual, str) and text.strip("`\"'") == actual):  # the word none
                drift.append(f"{row.where()}: {kind} {name} {field}: README {text!r}, config {actual!r}")
    assert not drift, "README defaults that differ from the config models:\n" + "\n".join(drift)


def test_the_tables_are_found_and_the_prose_list_is_current():
    rows = all_rows()
    assert {row.readme for row in rows} == set(READMES), "a README in READMES has no table of settings any more"
    assert len(rows) > 150
    cells = {(row.readme, row.fields) for row in rows}
    assert not set(PROSE) - cells, f"PROSE names rows no README has: {sorted(set(PROSE) - cells)}"


def test_the_rows_left_to_prose_say_what_the_config_gives():
    ray = registry.get_spec("pool", "ray").make_config()
    assert ray.local_cpus is None and ray.step_timeout_s is None and ray.reset_timeout_s is None  # type: ignore[attr-defined]
    sudoku = registry.get_spec("env", "sudoku").make_config()
    blanks = 32  # 9x9 easy: 0.4 of 81 cells
    assert sudoku.max_actions_per_episode == 2 * blanks  # type: ignore[attr-defined]
    assert sudoku.max_turns == -(-sudoku.max_actions_per_episode // sudoku.max_actions_per_turn)  # type: ignore[attr-defined]
    vocab = registry.get_spec("env", "sokoban").make_config().grid_vocab  # type: ignore[attr-defined]
    assert list(vocab.items())[:3] == [("#", "wall"), ("_", "empty"), ("O", "target")]


@pytest.mark.parametrize(("text", "value"), [("`None`", None), ("true", True), ("1e-6", 1e-6), ('`""`', ""), ("(6, 6)", (6, 6)),
                                             ("`token-mean`", "token-mean"), ("[]", [])])
def test_cells_read_as_values(text, value):
    assert value_of(text) == value and type(value_of(text)) is type(value)


#: a setting's default named in prose: "`optim.max_skipped_steps` (20)", "(600 s by default)", "(10%)", "(−0.1)", "(20,000)"
PROSE_DEFAULT = re.compile(r"`([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*)`\s+\(([−-]?[0-9][0-9.e-]*(?:,[0-9]{3})*)( ?%)?(?: s)?(?: by default)?[,;)]")
#: settings the main README names by their last part, in a section that says which
SHORT_NAMES = {"buckets": "grad_analysis.buckets"}
#: plugin READMEs whose prose names their settings' defaults -> (kind, plugin)
PROSE_READMES = {readme: (kind, names[0]) for readme, (kind, names) in READMES.items() if len(names) == 1} | {
    "plugins/ragen-env-searchqa/README.md": ("env", "searchqa"),
    "ragen-env-lean/README.md": ("env", "lean"),
}


def prose_value(number: str, percent: str | None) -> float:
    value = float(number.replace(",", "").replace("−", "-"))
    return value / 100 if percent else value


def run_default(dotted: str) -> Any:
    """The default of a RunConfig setting; ``filter_config.*``: the default filter's config."""
    from ragen_core.config import load_config
    from ragen_core.trainer.config import RunConfig

    value: Any = load_config(RunConfig, [], [])
    parts = SHORT_NAMES.get(dotted, dotted).split(".")
    if parts[0] == "filter_config":
        value, parts = registry.get_spec("filter", value.filter).make_config(), parts[1:]
    for part in parts:
        assert (part in value) if isinstance(value, dict) else hasattr(value, part), f"the README names {dotted!r}: no such setting"
        value = value[part] if isinstance(value, dict) else getattr(value, part)
    return value


def prose_drift(readme: str, default_of: Any) -> list[str]:
    text = (ROOT / readme).read_text(encoding="utf-8")
    found = [(text.count("\n", 0, m.start()) + 1, m.group(1), prose_value(m.group(2), m.group(3))) for m in PROSE_DEFAULT.finditer(text)]
    assert found, f"{readme}: no default named in prose any more (drop it from the list)"
    return [f"{readme}:{line}: {name} ({value:g}), config {default_of(name)!r}" for line, name, value in found
            if not same(value, default_of(name))]


def test_the_main_readme_names_run_defaults_as_the_config_has_them():
    drift = prose_drift("README.md", run_default)
    assert not drift, "README defaults that differ from RunConfig:\n" + "\n".join(drift)


def test_plugin_readmes_name_defaults_in_prose_as_their_config_has_them():
    drift = []
    for readme, (kind, name) in PROSE_READMES.items():
        text = (ROOT / readme).read_text(encoding="utf-8")
        if PROSE_DEFAULT.search(text):
            drift += prose_drift(readme, lambda field, kind=kind, name=name: config_value(kind, name, field))
    assert not drift, "README defaults that differ from the config models:\n" + "\n".join(drift)
