"""Every ``pip install X`` hint names a distribution that exists.

The plugin hints are built from one table (:mod:`ragen_core.distributions`); these tests check
that table against the entry points the repository's ``pyproject.toml`` files declare, check every
hint the table can produce, and scan the sources of every package for ``pip install`` strings
(plain and f-strings, found with :mod:`ast`) so a hand-written hint naming a package nobody
ships fails here.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from ragen_core import distributions
from ragen_core.errors import PluginNotFoundError
from ragen_core.registry import Registry
from ragen_core.specs import GROUPS

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
PYPROJECTS = sorted(p for p in [ROOT / "pyproject.toml", *ROOT.glob("ragen-*/pyproject.toml"), *ROOT.glob("plugins/*/pyproject.toml")])
SOURCES = [ROOT / "ragen_core", *ROOT.glob("ragen-*/src"), *ROOT.glob("plugins/*/src")]

#: f-string hints whose ``pip install {...}`` argument is filled in at run time: (file, argument with
#: ``{}`` fields) -> the test that checks what it becomes.
DYNAMIC = {
    ("ragen_core/distributions.py", "{}"): "test_every_hint_the_table_builds_names_a_distribution_of_this_repository",
    ("ragen_core/registry.py", "{}"): "test_import_hint_maps_first_party_modules_to_their_distribution",
    ("ragen_core/trainer/loggers.py", "ragen-core[{}]"): "test_logger_hints_name_existing_extras",
    ("ragen_core/cli/plugins.py", "{}"): "test_every_hint_the_table_builds_names_a_distribution_of_this_repository (distribution_of)",
}


@functools.cache
def _projects() -> dict[str, dict]:
    """Distribution name -> its ``[project]`` table, for every pyproject.toml of the repository."""
    out = {}
    for path in PYPROJECTS:
        project = tomllib.loads(path.read_text(encoding="utf-8"))["project"]
        out[canonicalize_name(project["name"])] = {**project, "_folder": path.parent.relative_to(ROOT).as_posix()}
    return out


@functools.cache
def _declared_anywhere() -> frozenset[str]:
    """Distributions the repository's packages depend on (dependencies or extras): installable by name."""
    names = set()
    for project in _projects().values():
        reqs = list(project.get("dependencies", []))
        for extra in project.get("optional-dependencies", {}).values():
            reqs += extra
        names |= {canonicalize_name(Requirement(r).name) for r in reqs}
    return frozenset(names)


def _dist_named(text: str) -> str:
    """The distribution a ``pip install`` argument names (quotes and ``[extras]`` removed)."""
    return canonicalize_name(text.strip("'\"").split("[")[0])


def test_the_table_lists_exactly_the_plugins_the_pyproject_files_declare():
    kinds = {group: kind for kind, group in GROUPS.items()}
    declared: dict[str, dict[str, str]] = {kind: {} for kind in distributions.PLUGINS}
    commands: dict[str, str] = {}
    for dist, project in _projects().items():
        for group, entries in project.get("entry-points", {}).items():
            if group == "ragen_core.commands":
                commands.update(dict.fromkeys(entries, dist))
            elif dist != distributions.CORE:  # the core's own engines and pools need no install hint
                declared.setdefault(kinds[group], {}).update(dict.fromkeys(entries, dist))
    assert declared == distributions.PLUGINS, "update ragen_core/distributions.PLUGINS to match the entry points of the pyproject.toml files"
    assert commands == distributions.COMMANDS
    assert distributions.ALL_DISTRIBUTIONS == set(_projects())


def test_the_defaults_are_core_dependencies_and_provide_the_default_algorithm_and_filter():
    from ragen_core.trainer.config import RunConfig

    core = _projects()[distributions.CORE]
    deps = {canonicalize_name(Requirement(r).name) for r in core["dependencies"]}
    assert set(distributions.DEFAULTS) <= deps
    defaults = RunConfig.model_fields
    assert distributions.distribution_of("algorithm", defaults["algo"].default) in distributions.DEFAULTS
    assert distributions.distribution_of("filter", defaults["filter"].default) in distributions.DEFAULTS
    # the default algorithm's estimator comes with it
    assert distributions.distribution_of("estimator", "grpo") == distributions.distribution_of("algorithm", "grpo")


def _hint_distributions(hint: str) -> set[str]:
    """Every ``ragen-*`` distribution name and every ``pip install`` argument in ``hint``."""
    names = {canonicalize_name(m) for m in re.findall(r"\bragen-[a-z0-9-]*[a-z0-9]", hint)}
    for arg in re.findall(r"pip install (?:--\S+ )*(?:-e )?(\S+)", hint):
        if "/" not in arg:  # a folder of this repository is checked separately
            names.add(_dist_named(arg))
    return names


@pytest.mark.parametrize("kind", [*GROUPS])
def test_every_hint_the_table_builds_names_a_distribution_of_this_repository(kind):
    dists = set(_projects())
    names = [*distributions.PLUGINS.get(kind, {}), "no-such-plugin"]
    for name in names:
        hint = distributions.install_hint(kind, name)
        assert "<" not in hint, hint  # no placeholder such as ragen-<kind>-<name>: it names nothing real
        assert _hint_distributions(hint) <= dists, hint
    if kind in distributions.PLUGINS:
        shipped = next(iter(distributions.PLUGINS[kind]))
        assert f"pip install {distributions.PLUGINS[kind][shipped]}" in distributions.install_hint(kind, shipped)
    for command in distributions.COMMANDS:
        hint = distributions.command_hint(command)
        assert _hint_distributions(hint) <= dists
        for folder in re.findall(r"-e (\S+)\)?", hint):
            assert (ROOT / folder.rstrip(")")).joinpath("pyproject.toml").is_file(), hint


def test_an_install_without_the_default_algorithm_or_filter_names_their_real_distributions():
    """The user's report: 'no algorithm named grpo' hinted 'pip install ragen-algorithm-<name>', which does not exist."""
    empty = Registry(source=lambda group: [])
    for kind, name, dist in [("algorithm", "grpo", "ragen-algo-grpo"), ("filter", "none", "ragen-filters"), ("env", "sokoban", "ragen-env-sokoban")]:
        with pytest.raises(PluginNotFoundError) as err:
            empty.get_spec(kind, name)
        hints = [line for line in str(err.value).splitlines() if line.startswith("hint:")]
        assert any(f"pip install {dist}" in h for h in hints), hints
        assert all(_hint_distributions(h) <= set(_projects()) for h in hints), hints


def test_import_hint_maps_first_party_modules_to_their_distribution():
    from ragen_core.registry import _import_hint

    missing = ModuleNotFoundError("no module", name="ragen_algo_grpo.losses")
    assert _import_hint(missing, "other_pkg.plugin:SPEC", "some-dist").startswith("pip install ragen-algo-grpo ")
    third = ModuleNotFoundError("no module", name="gymnasium.spaces")
    assert _import_hint(third, "ragen_env_frozenlake.plugin:SPEC", "ragen-env-frozenlake").startswith("pip install gymnasium ")


def test_logger_hints_name_existing_extras():
    from ragen_core.trainer.loggers import LOGGERS

    extras = _projects()[distributions.CORE]["optional-dependencies"]
    assert set(LOGGERS) <= set(extras)


def _strings(path: Path) -> list[tuple[int, str]]:
    """``(line, text)`` of every string in ``path``; an f-string's fields become ``{}``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    inside_f = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
            out.append((node.lineno, text))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in inside_f:
            out.append((node.lineno, node.value))
    return out


def _bad_pip_installs(rel: str, text: str) -> tuple[int, list[str]]:
    """``(count, problems)`` of the ``pip install`` arguments in one string of file ``rel``.

    An argument counts when it is a distribution of this repository or one that a pyproject.toml
    here depends on (so it is installable by that name), with an extra that exists; ``-e`` with a
    folder is a local install; ``{}`` fields are allowed only where :data:`DYNAMIC` lists them.
    """
    projects = _projects()
    installable = set(projects) | _declared_anywhere()
    bad, seen = [], 0
    for match in re.finditer(r"pip install((?: +-[-\w]+)*) +(\S+)", text):
        flags, arg = match.group(1).split(), re.sub(r"^['\"`]+|['\"`),;]+$", "", match.group(2))
        seen += 1
        if "-e" in flags or arg.startswith("-"):
            continue  # a local folder (pip install -e <its folder>): no distribution name
        if "<" in arg:
            bad.append(f"{rel}: 'pip install {arg}' is a pattern, not a distribution")
            continue
        if "{" in arg:
            if (rel, arg) not in DYNAMIC:
                bad.append(f"{rel}: 'pip install {arg}' is filled in at run time; add a test and list it in DYNAMIC")
            continue
        dist = _dist_named(arg)
        if dist not in installable:
            bad.append(f"{rel}: 'pip install {arg}' names {dist!r}, which no pyproject.toml here provides or depends on")
        extra = re.search(r"\[(.+)\]", arg)
        if extra and dist in projects and extra.group(1) not in projects[dist].get("optional-dependencies", {}):
            bad.append(f"{rel}: {dist} has no extra {extra.group(1)!r}")
    return seen, bad


def test_the_source_scan_rejects_the_hints_users_were_given():
    assert _bad_pip_installs("ragen_core/registry.py", "third-party algorithms install as 'pip install ragen-{}-<name>'")[1]
    assert _bad_pip_installs("ragen_core/x.py", "pip install ragen-algorithm-grpo")[1]
    assert _bad_pip_installs("ragen_core/x.py", "pip install 'ragen-core[nosuchextra]'")[1]
    assert _bad_pip_installs("ragen_core/x.py", "pip install {}")[1]  # a run-time field outside DYNAMIC
    assert _bad_pip_installs("ragen_core/x.py", "pip install 'ragen-core[gym]' or pip install ragen-filters") == (2, [])


def test_every_pip_install_string_in_the_sources_names_a_real_distribution():
    """Scans ragen_core and every plugin's sources (messages, hints, docstrings) with :func:`_bad_pip_installs`."""
    bad, seen = [], 0
    for base in SOURCES:
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for line, text in _strings(path):
                count, problems = _bad_pip_installs(rel, text)
                seen += count
                bad += [f"{p} (line {line})" for p in problems]
    assert seen >= 10  # the scan finds the hints at all (ragen_core alone has more than ten)
    assert not bad, "\n".join(bad)
