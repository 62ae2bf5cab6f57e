"""Configuration loading: YAML files plus dotted command-line overrides, validated by pydantic.

``load_config(RunConfig, ["base.yaml", "exp.yaml"], ["rollout.group_size=8", "env_config.num_boxes=2"])``
merges the files in order (later wins, dicts merge deeply), applies the overrides, and validates.
Every failure is a :class:`ragen_core.errors.ConfigError` whose first line names the file or the
field path, e.g. ``invalid config: rollout.group_size: Input should be greater than 0 (got -1)``.

Override values are parsed as YAML scalars (``8`` -> int, ``true`` -> bool, ``[1,2]`` -> list,
``null`` -> None); quote them to force a string. A later override of the same key wins
(the CLI warns: :func:`repeated_overrides`).

Trust. Config files travel between people, so reading one must stay cheap and unambiguous:
YAML aliases (``*name``) are refused, because a few hundred bytes of nested aliases expand into
gigabytes when validated or echoed (the "billion laughs" file); anchors alone are harmless and
accepted. A key given twice in one mapping is an error instead of "the last one wins". Error
messages echo a bad value in a bounded form (:func:`short_repr`), never whole.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from ragen_core.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


MAX_CONFIG_BYTES = 2**20
"""Largest config file :func:`read_yaml` reads (PyYAML's safe loader takes about 3 s per MiB)."""


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read one YAML mapping; a missing file, bad YAML or a non-mapping is a ConfigError."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"config file {p} is a folder", ["pass a YAML file to --config"])
    if not p.exists():
        raise ConfigError(f"config file not found: {p}", ["check the path passed to --config"])
    try:
        size = p.stat().st_size
        if size > MAX_CONFIG_BYTES:  # read as YAML, 28 MB took 88 s before any error
            raise ConfigError(f"config file {p} holds {size / 2**20:.1f} MiB; a config file is a few KiB "
                              f"(at most {MAX_CONFIG_BYTES // 2**20} MiB is read)", ["pass the run's YAML config to --config, not a data file"])
        data = safe_load(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {p} is not UTF-8 text (byte {exc.start}: {exc.reason})",
                          ["save it as UTF-8 (YAML files are text)"]) from None
    except RecursionError:
        raise ConfigError(f"config file {p} is nested too deeply to read", ["a config nests a few levels of sections"]) from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {p} ({exc.strerror or type(exc).__name__})", ["check the path passed to --config"]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        hint = getattr(exc, "hint", None) or "fix the YAML syntax (indentation, colons, quotes)"
        raise ConfigError(f"malformed YAML in {p}{where}: {problem}", [hint]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p} must contain a mapping at the top level, got {type(data).__name__}")
    return data


class RefusedYAML(yaml.YAMLError):
    """YAML that parses but is refused (an alias, a duplicate key); carries a mark like PyYAML's errors."""

    def __init__(self, problem: str, mark: Any, hint: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = mark
        self.hint = hint


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader without aliases and without duplicate keys (see the module docstring)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]  # unannotated in PyYAML's stubs
            raise RefusedYAML(f"YAML aliases (*{short_text(str(event.anchor), 40)}) are not allowed in config files",
                              event.start_mark, "write the repeated values out (aliases can expand a small file into gigabytes)")
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node.start_mark)
                except TypeError:
                    continue  # an unhashable key: PyYAML's own error follows
                if first is not key_node.start_mark:
                    raise RefusedYAML(f"duplicate key {short_repr(key)} (first given at line {first.line + 1})", key_node.start_mark,
                                      "give each key once; a repeated key would silently replace the first value")
        return super().construct_mapping(node, deep=deep)


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` that refuses aliases and duplicate keys (raises :class:`RefusedYAML`)."""
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass


def short_text(text: str, limit: int = 120) -> str:
    """``text`` cut to about ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def short_repr(value: Any, limit: int = 120) -> str:
    """A bounded ``repr`` of ``value`` for error messages: a few items of each container, a few
    levels deep, at most about ``limit`` characters; computed without walking the whole value."""
    import reprlib

    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxtuple, r.maxdict, r.maxset = 3, 6, 6, 4, 6
    r.maxstring, r.maxother, r.maxlong = limit, limit, 40
    return short_text(r.repr(value), limit)


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """Return ``base`` updated by ``update``; nested dicts merge, everything else is replaced."""
    out = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def parse_override(text: str, example: str = "rollout.group_size=8") -> tuple[list[str], Any]:
    """``"a.b.c=1"`` -> ``(["a", "b", "c"], 1)`` (``example``: the hint's example of a good one)."""
    key, sep, raw = text.partition("=")
    key = key.strip().lstrip("-")
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"bad override {short_repr(text)}: expected dotted.key=value", [f"example: {example}"])
    try:
        value = safe_load(raw) if raw.strip() else ""
    except RefusedYAML as exc:
        raise ConfigError(f"bad override {short_repr(text)}: {exc.problem}", [exc.hint]) from None
    except RecursionError:
        raise ConfigError(f"bad override {short_repr(text)}: its value is nested too deeply to read") from None
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


def repeated_overrides(overrides: Iterable[str]) -> list[str]:
    """One sentence per key given more than once among ``overrides`` (a later one wins), for the
    CLI to warn with: a base list of overrides extended by later ones is a normal way to script
    runs, but a key typed twice by mistake must not be replaced in silence."""
    seen: dict[str, list[str]] = {}
    for text in overrides:
        seen.setdefault(".".join(parse_override(text)[0]), []).append(short_text(text.strip(), 60))
    return [f"{key} is given {len(given)} times ({', then '.join(given)}): the last one is used"
            for key, given in seen.items() if len(given) > 1]


def apply_overrides(data: dict[str, Any], overrides: Iterable[str], *, example: str = "rollout.group_size=8") -> dict[str, Any]:
    out = copy.deepcopy(data)
    for text in overrides:
        path, value = parse_override(text, example)
        node = out
        for part in path[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif not isinstance(child, dict):
                raise ConfigError(f"bad override {short_repr(text)}: {'.'.join(path[:-1])} is not a section")
            node = child
        old = node.get(path[-1])
        # a section's value is merged into it, as a --config file's is ('algo_config={entropy_coeff: 0.002}' dropped the
        # recipe's other algo_config settings); a value that is not a section replaces what was there
        node[path[-1]] = deep_merge(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
    return out


def _near_key(model_cls: type[BaseModel] | None, loc: tuple[Any, ...], prefix: str = "") -> str:
    """`` (did you mean 'optim.lr'?)`` for an unknown key ``loc`` of ``model_cls``, or ``""``: a
    close field name at the same level, else a field of that name (or close to it) one level down,
    named by its whole path as typed (``optim.lrr`` -> ``'optim.lr'``, ``env_config.memory_mb`` ->
    ``'env_config.sandbox.memory_mb'``)."""
    import difflib
    import typing

    def settings_model(field: Any) -> type[BaseModel] | None:
        options = [field.annotation, *typing.get_args(field.annotation)]
        return next((c for c in options if isinstance(c, type) and issubclass(c, BaseModel)), None)

    cls = model_cls
    for part in loc[:-1]:
        field = cls.model_fields.get(str(part)) if cls is not None else None
        if field is None:
            return ""
        cls = settings_model(field)
    if cls is None or not loc:
        return ""
    head, _, rest = str(loc[-1]).partition(".")
    if rest and head in cls.model_fields:  # a dotted key in a mapping ({"rollout.group_size": 2}): dots are for overrides
        parts = str(loc[-1]).split(".")
        nested = "".join(f"{{{part!r}: " for part in parts) + "..." + "}" * len(parts)
        return f" (in a mapping, nest it: {nested}; dotted keys are for command-line overrides)"
    typed = "" if "[" in prefix else prefix  # a path a user types (not a spec's presets['Short']): the suggestion pastes back
    ours = getattr(cls, "OTHER_NAMES", {}).get(str(loc[-1]))  # another trainer's name for one of our settings
    if ours:
        return f" (did you mean {'.'.join(str(p) for p in (typed, *loc[:-1], ours) if p)!r}?)"
    close = difflib.get_close_matches(str(loc[-1]), list(cls.model_fields), n=1, cutoff=0.7)
    if close:  # its whole path, as the unknown key's is given
        return f" (did you mean {'.'.join(str(p) for p in (typed, *loc[:-1], close[0]) if p)!r}?)"
    for name, field in cls.model_fields.items():
        inner = settings_model(field)
        close = difflib.get_close_matches(str(loc[-1]), list(inner.model_fields), n=1, cutoff=0.7) if inner is not None else []
        if close:
            return f" (did you mean {'.'.join(str(p) for p in (typed, *loc[:-1], name, close[0]) if p)!r}?)"
    return ""


def validation_message(exc: ValidationError, prefix: str = "", model_cls: type[BaseModel] | None = None) -> str:
    """``invalid config: a.b: <what is wrong> (got <value>)`` for the first three errors.

    The value is echoed with :func:`short_repr`, so a huge or deeply nested input costs a few
    dozen characters of the line, not its whole size. With ``model_cls`` (the validated class),
    an unknown key that is close to a field's name suggests it.
    """
    errors = exc.errors(include_url=False)
    parts = []
    for err in errors[:3]:
        loc = error_path(err)
        path = ".".join(p for p in (prefix, loc) if p) or "(root)"
        if err.get("type") == "extra_forbidden":
            parts.append(f"{path}: unknown key{_near_key(model_cls, tuple(err.get('loc', ())), prefix)}")
        elif err.get("type") == "value_error" and not loc:  # a rule across settings: its own sentence names them
            text = short_text(str(err.get("msg")).removeprefix("Value error, "), 300)
            parts.append(f"{prefix}: {text}" if prefix else text)
        else:  # a field validator's own words, without pydantic's "Value error, " in front
            got = err.get("input")
            for key in _bool_at(err):  # the boolean itself, not the dict or list holding it
                got = got[key]
            parts.append(f"{path}: {short_text(str(err.get('msg')).removeprefix('Value error, '), 200)} (got {short_repr(got)})")
    extra = len(errors) - 3
    return "invalid config: " + "; ".join(parts) + (f" (+{extra} more)" if extra > 0 else "")


def error_path(err: Mapping[str, Any]) -> str:
    """The dotted path of one pydantic error (``weights.a``): its ``loc``, and for a boolean given
    for a number inside a dict or list field the keys from the field to it (pydantic's loc ends at the field)."""
    return ".".join(str(x) for x in (*err.get("loc", ()), *_bool_at(err)))


def _bool_at(err: Mapping[str, Any]) -> tuple[Any, ...]:
    """The keys and indices from the field to a boolean given for a number (``()`` for other errors)."""
    from ragen_core.specs import BOOL_FOR_A_NUMBER

    return tuple((err.get("ctx") or {}).get("at", ())) if err.get("type") == BOOL_FOR_A_NUMBER else ()


def list_hints(exc: ValidationError, prefix: str = "") -> list[str]:
    """For a list setting given one bare word (``diagnostics=collapse``): how a list is written,
    with the key's whole path as typed (``prefix`` is where the validated settings sit)."""
    out = []
    for err in exc.errors(include_url=False, include_context=False):
        if err.get("type") == "list_type" and isinstance(err.get("input"), str):
            key = ".".join(str(x) for x in (prefix, *err.get("loc", ())) if x)
            out.append(f"{key} takes a list: write {key}=[{err['input']}] (several: [a,b])")
    return out[:1]


def validate(model_cls: type[M], data: dict[str, Any], prefix: str = "") -> M:
    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        unknown = any(e.get("type") == "extra_forbidden" for e in exc.errors())
        hints = ["check the key spelling: 'ragen run --print-config' shows every field, 'ragen plugins show KIND NAME' a plugin's fields"]
        raise ConfigError(validation_message(exc, prefix, model_cls), list_hints(exc, prefix) + (hints if unknown else [])) from None


def merge_layers(layers: Iterable[dict[str, Any]], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """``base`` with each layer merged over it in order (:func:`deep_merge`; not associative: a
    layer's dict merges into the one below it, so layers are merged over ``base`` one by one)."""
    data: dict[str, Any] = dict(base or {})
    for layer in layers:
        data = deep_merge(data, layer)
    return data


def merge_files(files: Iterable[str | Path], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """``base`` with each YAML file merged over it in order (unvalidated)."""
    return merge_layers((read_yaml(f) for f in files), base)


def load_config(model_cls: type[M], files: Iterable[str | Path] = (), overrides: Iterable[str] = (), base: dict[str, Any] | None = None) -> M:
    """Merge ``base``, then each YAML file, then dotted overrides; validate into ``model_cls``."""
    data = apply_overrides(merge_files(files, base), overrides)
    return validate(model_cls, data)


def dump_yaml(model: BaseModel, path: str | Path) -> None:
    """Write a validated config as YAML (JSON-compatible values only, so it round-trips)."""
    import yaml

    Path(path).write_text(yaml.safe_dump(model.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
