"""Configuration loading: YAML files plus dotted command-line overrides, validated by pydantic.

``load_config(RunConfig, ["base.yaml", "exp.yaml"], ["rollout.group_size=8", "env_config.num_boxes=2"])``
merges the files in order (later wins, dicts merge deeply), applies the overrides, and validates.
Every failure is a :class:`ragen_core.errors.ConfigError` whose first line names the file or the
field path, e.g. ``invalid config: rollout.group_size: Input should be greater than 0 (got -1)``.

Override values are parsed as YAML scalars (``8`` -> int, ``true`` -> bool, ``[1,2]`` -> list,
``null`` -> None); quote them to force a string.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ragen_core.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read one YAML mapping; a missing file, bad YAML or a non-mapping is a ConfigError."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}", ["check the path passed to --config"])
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"malformed YAML in {p}{where}: {problem}", ["fix the YAML syntax (indentation, colons, quotes)"]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p} must contain a mapping at the top level, got {type(data).__name__}")
    return data


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """Return ``base`` updated by ``update``; nested dicts merge, everything else is replaced."""
    out = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"a.b.c=1"`` -> ``(["a", "b", "c"], 1)``."""
    import yaml

    key, sep, raw = text.partition("=")
    key = key.strip().lstrip("-")
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"bad override {text!r}: expected dotted.key=value", ["example: rollout.group_size=8"])
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


def apply_overrides(data: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    out = copy.deepcopy(data)
    for text in overrides:
        path, value = parse_override(text)
        node = out
        for part in path[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif not isinstance(child, dict):
                raise ConfigError(f"bad override {text!r}: {'.'.join(path[:-1])} is not a section")
            node = child
        node[path[-1]] = value
    return out


def validation_message(exc: ValidationError, prefix: str = "") -> str:
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(x) for x in err.get("loc", ()))
        path = ".".join(p for p in (prefix, loc) if p) or "(root)"
        if err.get("type") == "extra_forbidden":
            parts.append(f"{path}: unknown key")
        else:
            parts.append(f"{path}: {err.get('msg')} (got {err.get('input')!r})")
    extra = len(exc.errors()) - 3
    return "invalid config: " + "; ".join(parts) + (f" (+{extra} more)" if extra > 0 else "")


def validate(model_cls: type[M], data: dict[str, Any], prefix: str = "") -> M:
    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        unknown = any(e.get("type") == "extra_forbidden" for e in exc.errors())
        raise ConfigError(validation_message(exc, prefix), ["check the key spelling: 'ragen run --print-config' shows every field, 'ragen plugins show KIND NAME' a plugin's fields"] if unknown else []) from None


def merge_files(files: Iterable[str | Path], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """``base`` with each YAML file merged over it in order (unvalidated)."""
    data: dict[str, Any] = dict(base or {})
    for f in files:
        data = deep_merge(data, read_yaml(f))
    return data


def load_config(model_cls: type[M], files: Iterable[str | Path] = (), overrides: Iterable[str] = (), base: dict[str, Any] | None = None) -> M:
    """Merge ``base``, then each YAML file, then dotted overrides; validate into ``model_cls``."""
    data = apply_overrides(merge_files(files, base), overrides)
    return validate(model_cls, data)


def dump_yaml(model: BaseModel, path: str | Path) -> None:
    """Write a validated config as YAML (JSON-compatible values only, so it round-trips)."""
    import yaml

    Path(path).write_text(yaml.safe_dump(model.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
