"""``ragen plugins show`` prints field types as they are written in code."""

from __future__ import annotations

import pathlib
from typing import Literal, Optional

import pytest

from ragen_core.cli.plugins import type_name


@pytest.mark.parametrize(("annotation", "shown"), [
    (int, "int"), (float, "float"), (bool, "bool"), (pathlib.Path, "Path"), (list[str], "list[str]"), (int | None, "int | None"),
    (Optional[int], "Optional[int]"), (dict[str, float], "dict[str, float]"), (tuple[int, int], "tuple[int, int]"),  # noqa: UP045 - the old spelling is shown as written
    (Literal["grid", "a.b"], "Literal['grid', 'a.b']"), (list[pathlib.Path] | None, "list[Path] | None"),
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
