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


def test_plugins_show_prints_no_class_reprs(capsys):
    from ragen_core.cli.main import main

    assert main(["plugins", "show", "env", "bandit"]) == 0
    out = capsys.readouterr().out
    assert "<class" not in out
    row = next(line.split() for line in out.splitlines() if line.startswith("max_turns "))
    assert row[1] == "int"
