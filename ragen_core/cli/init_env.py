"""``ragen init-env NAME``: scaffold a third-party environment package.

Copies ``ragen_core/templates/ragen-env-template`` into ``./ragen-env-NAME`` with the names
filled in. The result installs with ``pip install -e ragen-env-NAME``, is listed by
``ragen plugins``, passes the conformance kit and can be played with ``ragen env play NAME``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from ragen_core.errors import RagenError
from ragen_core.specs import NAME_PATTERN, NAME_RULE

TEMPLATE = Path(__file__).resolve().parent.parent / "templates" / "ragen-env-template"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="env name, lower case, e.g. mygrid")
    parser.add_argument("--dir", default=".", help="parent folder of the new package (default: current folder)")
    parser.add_argument("--force", action="store_true",
                        help="start over in an existing folder: it is moved aside to ragen-env-NAME.old-N, then the package is written fresh")


def scaffold(name: str, parent: str | Path = ".", *, force: bool = False) -> Path:
    """Create ``<parent>/ragen-env-<name>`` from the template and return its path."""
    if not re.match(NAME_PATTERN, name):
        raise RagenError(f"invalid env name {name!r}: use {NAME_RULE}",
                         ["example: ragen init-env mygrid"])
    if name.endswith("-") or "--" in name:  # ragen-env-grid- is no valid distribution; my--grid installs as my-grid
        raise RagenError(f"invalid env name {name!r}: a '-' must sit between letters or digits (not at the end, not doubled): "
                         f"the package is named ragen-env-{name}", [f"example: ragen init-env {'-'.join(p for p in name.split('-') if p)}"])
    if name.startswith("ragen-env-"):
        raise RagenError(f"invalid env name {name!r}: give the env's own name; the package gets the ragen-env- prefix itself",
                         [f"ragen init-env {name[len('ragen-env-'):] or 'mygrid'}"])
    dist = f"ragen-env-{name}"
    target = Path(parent) / dist
    taken = installed_env_named(name)
    here, scaffolded = _installed_from(dist, target)
    if taken is not None and here and not scaffolded:
        raise RagenError(f"{target} is the editable install of env {name!r}, but not a package 'ragen init-env' wrote (its "
                         f"pyproject.toml does not start with '{SCAFFOLD_MARK}'), so init-env does not start it over",
                         ["move the folder away yourself to start over, or choose another name"])
    if taken is not None and not here:  # your own editable install of a scaffolded folder is no clash
        raise RagenError(f"env name {name!r} is taken: {taken}; a second package registering it would clash "
                         "(ragen plugins would show a duplicate and runs could not pick one)",
                         [f"choose another name, e.g. ragen init-env my-{name}"])
    from ragen_core import __version__

    major = int(__version__.split(".")[0])
    minor = ".".join(__version__.split(".")[:2])
    values = {
        "name": name,
        "dist": dist,
        "pkg": f"ragen_env_{name.replace('-', '_')}",
        "Class": "".join(part.capitalize() for part in name.split("-")),
        "core_min": minor,
        "core_next": str(major + 1),
    }
    if (target.exists() or target.is_symlink()) and not force:
        raise RagenError(f"{target} already exists", ["choose another name, or pass --force to start over (the folder is kept, moved aside)"])
    try:
        if target.exists() or target.is_symlink():  # --force: a fresh package, not the template merged into your files
            aside = _set_aside(target)
            print(f"moved the existing {target} to {aside}", file=sys.stderr)
        _write_template(target, values)
    except OSError as exc:  # --dir a file, a read-only or system folder: one line, not a traceback
        raise RagenError(f"cannot create the package in {target}: {exc.strerror or exc}: {exc.filename}",
                         ["pass --dir a folder you can write to"]) from None
    return target


def _set_aside(target: Path) -> Path:
    """Rename ``target`` to the first free ``<target>.old-N`` and return that path (nothing is deleted)."""
    n = 1
    while (aside := target.with_name(f"{target.name}.old-{n}")).exists() or aside.is_symlink():
        n += 1
    target.rename(aside)
    return aside


#: The first line of a scaffolded package's pyproject.toml (``pyproject.toml.tmpl``).
SCAFFOLD_MARK = "# Scaffolded by `ragen init-env"


def _installed_from(dist: str, target: Path) -> tuple[bool, bool]:
    """Whether distribution ``dist`` is an editable install of the folder ``target``, and whether
    this command scaffolded that folder (not, say, a shipped env's folder in a checkout of RAGEN)."""
    from importlib import metadata

    from ragen_core.registry import editable_source

    try:
        source = editable_source(metadata.distribution(dist))
    except metadata.PackageNotFoundError:
        return False, False
    if source is None or Path(source).resolve() != target.resolve():
        return False, False
    try:
        return True, (target / "pyproject.toml").read_text(encoding="utf-8").startswith(SCAFFOLD_MARK)
    except (OSError, UnicodeDecodeError):
        return True, False


def _write_template(target: Path, values: dict[str, str]) -> None:
    for src in sorted(TEMPLATE.rglob("*")):
        if src.is_dir() or "__pycache__" in src.parts:
            continue
        rel = str(src.relative_to(TEMPLATE)).replace("__pkg__", values["pkg"])
        text = src.read_text(encoding="utf-8")
        if rel.endswith(".tmpl"):
            rel = rel[: -len(".tmpl")]
            for key, value in values.items():
                text = text.replace("{{" + key + "}}", value)
        dest = target / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text, encoding="utf-8")


def installed_env_named(name: str) -> str | None:
    """Who already uses env name ``name`` here (an installed env or alias, or a distribution named
    ``ragen-env-NAME``), or None when it is free."""
    from importlib import metadata

    from ragen_core import registry
    from ragen_core.errors import PluginNotFoundError

    try:
        entry = registry.find("env", name)
        return f"installed env {name!r} comes from {entry.origin}"
    except PluginNotFoundError:
        pass
    try:
        return f"distribution ragen-env-{name} {metadata.version(f'ragen-env-{name}')} is installed"
    except metadata.PackageNotFoundError:
        return None


def run(args: argparse.Namespace) -> int:
    target = scaffold(args.name, args.dir, force=args.force)
    print(f"created {target}")
    print("next steps:")
    print(f"  pip install -e {target}")
    print(f"  ragen plugins              # lists '{args.name}'")
    print(f"  ragen env play {args.name}")
    print(f"  pytest {target}/tests")
    print(f"  ragen run --env {args.name} --steps 1   # the first run warm-starts the tiny model on it (minutes), later runs reuse that")
    return 0
