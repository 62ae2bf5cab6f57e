"""``ragen plugins show`` prints field types as they are written in code."""

from __future__ import annotations

import pathlib
from typing import Annotated, Literal, Optional

import pytest
from pydantic import Field

from ragen_core.cli.plugins import type_name


@pytest.mark.parametrize(("annotation", "shown"), [
    (int, "int"), (float, "float"), (bool, "bool"), (pathlib.Path, "Path"), (list[str], "list[str]"), (int | None, "int | None"),
    (Optional[int], "Optional[int]"), (dict[str, float], "dict[str, float]"), (tuple[int, int], "tuple[int, int]"),  # noqa: UP045 - the old spelling is shown as written
    (Literal["grid", "a.b"], "Literal['grid', 'a.b']"), (list[pathlib.Path] | None, "list[Path] | None"),
    # the collapse diagnostic's num_samples showed as "Union[Annotated[int, FieldInfo(annotation=NoneType, required=True, ..."
    (Annotated[int, Field(ge=2)] | Literal["all"], "int | Literal['all']"), (Annotated[float, Field(gt=0)], "float"),
    (Annotated[int, Field(ge=1)] | None, "int | None"),
])
def test_type_names(annotation, shown):
    assert type_name(annotation) == shown


def test_plugins_show_prints_no_class_reprs(capsys, monkeypatch):
    from ragen_core.cli.main import main

    monkeypatch.setenv("COLUMNS", "200")  # the table layout

    assert main(["plugins", "show", "env", "bandit"]) == 0
    out = capsys.readouterr().out
    assert "<class" not in out
    row = next(line.split() for line in out.splitlines() if line.startswith("max_turns "))
    assert row[1] == "int"


def test_nested_settings_are_shown_field_by_field_as_overrides_name_them(capsys, monkeypatch):
    from pydantic import BaseModel, Field

    from ragen_core.cli.plugins import field_rows
    from ragen_core.specs import PluginConfig

    class Inner(PluginConfig):
        port: int = 8000
        """Where it listens."""

    class Outer(PluginConfig):
        name: str = "x"
        server: Inner = Field(default_factory=Inner)
        """The server."""

    rows = field_rows(Outer)
    assert [r[:3] for r in rows] == [["name", "str", "'x'"], ["server.port", "int", "8000"]]
    assert rows[1][3] == "Where it listens." and all(not isinstance(r[2], BaseModel) for r in rows)
    from ragen_core.cli.main import main

    for columns in (80, 60, 40):  # a table, then name: type = default with the description below
        monkeypatch.setenv("COLUMNS", str(columns))
        assert main(["plugins", "show", "env", "bandit"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert max(len(line) for line in lines[lines.index("config fields:"):]) <= columns
    assert "max_turns: int = 5" in lines or any(line.startswith("max_turns: int = ") for line in lines)


def test_an_installed_envs_nested_settings_are_listed():
    from ragen_core import registry
    from ragen_core.cli.plugins import field_rows

    if "deepcoder" not in registry.names("env"):
        pytest.skip("ragen-env-deepcoder is not installed")
    names = [r[0] for r in field_rows(registry.get_spec("env", "deepcoder").config_model)]
    assert "sandbox.memory_mb" in names and "sandbox" not in names


def test_every_kind_gets_the_same_layout_on_the_same_terminal(capsys, monkeypatch):
    """An algorithm's settings were a FIELD/TYPE/DEFAULT/DESCRIPTION table only from ~175 columns on
    (its loss_agg_mode type is 93 characters wide), an env's from ~110 and an estimator's from ~90:
    on one terminal the kinds came out in different layouts (helper-80's walk). The terminal's
    width alone now picks the layout; a long type wraps in its column."""
    from ragen_core import registry
    from ragen_core.cli.main import main

    shown = [(kind, name) for kind, name in [("algorithm", "grpo"), ("filter", "snr-topp"), ("env", "sokoban"), ("estimator", "gae"),
                                             ("pool", "local"), ("diagnostic", "collapse")] if name in registry.names(kind)]
    if not any(kind == "algorithm" for kind, _ in shown):
        pytest.skip("no algorithm installed")
    for columns, table in ((200, True), (120, True), (119, False), (80, False)):
        monkeypatch.setenv("COLUMNS", str(columns))
        for kind, name in shown:
            assert main(["plugins", "show", kind, name]) == 0
            lines = capsys.readouterr().out.splitlines()
            fields = lines[lines.index("config fields:") + 1:]
            assert fields[0].startswith("FIELD ") is table, (columns, kind, name)
            assert max(len(line) for line in fields) <= columns, (columns, kind, name)
    monkeypatch.setenv("COLUMNS", "120")
    assert main(["plugins", "show", "algorithm", "grpo"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("loss_agg_mode "))
    start = lines[at].index("Literal[")  # the type wraps in its own column, every choice shown
    assert [line[start:].split()[0] for line in lines[at + 1:at + 4]] == ["'seq-mean-token-mean',", "'seq-mean-token-sum',",
                                                                         "'seq-mean-token-sum-norm']"]
