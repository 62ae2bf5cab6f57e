"""``ragen plugins``: list, check and describe installed plugins.

``ragen plugins`` reads entry-point metadata only: it never imports a plugin, so it is fast and
keeps working when plugins are broken (it is the recovery path). ``ragen plugins check`` imports
every plugin's spec and validates it (its factory's module and name read from source, without
importing the implementation; defaults; presets; recipes); a name that two distributions provide
is a failure too (``ragen run`` would refuse it). Any failure exits 1. ``--strict`` (or
``RAGEN_STRICT_PLUGINS=1``) also imports every implementation, as a run would (heavier: torch and
the env's own dependencies), and builds the estimators, algorithms, filters and diagnostics with
their default settings (:data:`BUILT_BY_STRICT`), for CI. ``ragen plugins show KIND NAME`` prints a plugin's config fields
(and of an algorithm, built with its default settings, whether it has a ``token_loss`` of its own and which metrics of its
own it logs; of an env, the info metrics a run logs for it).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from ragen_core.distributions import DEFAULTS, distribution_of
from ragen_core.errors import RagenError
from ragen_core.specs import GROUPS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", nargs="?", choices=["list", "check", "show"], default="list", help="list (default), check, or show")
    parser.add_argument("target", nargs="*", help="for 'show': KIND NAME (e.g. env sokoban)")
    parser.add_argument("--kind", choices=[*GROUPS, "command"], help="only this kind ('command': subcommands plugins add to ragen)")
    parser.add_argument("--strict", action="store_true",
                        help="'check': also import every plugin's implementation, as a run would, and build the estimators, "
                             "algorithms, filters and diagnostics with their default settings (any failure exits 1 either way)")
    parser.add_argument("--paths", action="store_true", help="show where each distribution is installed")


def _metadata_status(reg: Any, entry: Any, counts: Counter[tuple[str, str]]) -> str:
    if not reg.enabled(entry):
        return "disabled"
    if counts[(entry.kind, entry.name)] > 1:
        return "duplicate"
    try:
        reg._check_compat(entry)
    except RagenError:
        return "incompatible"
    return "ok"


def _rows(reg: Any, kinds: list[str]) -> list[tuple[Any, str]]:
    rows = []
    for kind in kinds:
        entries = reg.entries(kind, include_disabled=True)
        distinct = {(e.kind, e.name, e.dist_name, e.value) for e in entries if reg.enabled(e)}
        counts = Counter((k, n) for (k, n, _, _) in distinct)
        for e in sorted(entries, key=lambda e: (e.name, e.dist_name)):
            rows.append((e, _metadata_status(reg, e, counts)))
    return rows


def _command_rows() -> list[tuple[Any, str]]:
    """Subcommands plugin distributions add to ``ragen`` (entry-point metadata only, as ``ragen --help`` reads them)."""
    from ragen_core.cli.main import plugin_commands

    return [(entry, "duplicate" if len(offers) > 1 else "ok")
            for name, offers in sorted(plugin_commands().items()) for entry in sorted(offers, key=lambda e: e.dist_name)]


def _print_table(header: list[str], rows: list[list[str]], *, wrap_last: bool = False, wrap: dict[int, int] | None = None) -> None:
    """Columns padded to their widest cell. ``wrap_last`` wraps the last column to the terminal's
    width (continuation lines under its start) instead of letting the terminal cut or fold it;
    ``wrap`` maps other columns to the width their cells wrap at, between words."""
    import shutil
    import textwrap

    at = wrap or {}

    def lines(column: int, cell: str) -> list[str]:
        if column in at and len(cell) > at[column]:
            return textwrap.wrap(cell, at[column], break_long_words=False, break_on_hyphens=False) or [""]
        return [cell]

    cells = [[lines(i, str(c)) for i, c in enumerate(r)] for r in rows]
    widths = [max(len(line) for cell in col for line in cell) for col in zip([[h] for h in header], *cells)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    print(fmt.format(*header).rstrip())
    indent = sum(widths[:-1]) + 2 * (len(widths) - 1)
    room = max(20, shutil.get_terminal_size().columns - indent - 1)
    for r in cells:
        text = r[-1][0]
        last = textwrap.wrap(text, room) if wrap_last and len(text) > room else [text]
        for k in range(max(len(last), *(len(c) for c in r[:-1]))):
            print(fmt.format(*(c[k] if k < len(c) else "" for c in r[:-1]), last[k] if k < len(last) else "").rstrip())


def list_plugins(args: argparse.Namespace) -> int:
    from ragen_core import registry

    reg = registry.default_registry()
    kinds = [args.kind] if args.kind else list(GROUPS)
    rows = _rows(reg, [k for k in kinds if k != "command"])
    if not args.kind or args.kind == "command":
        rows += _command_rows()
    header = ["KIND", "NAME", "DISTRIBUTION", "VERSION", "STATUS", "ENTRY POINT"] + (["LOCATION"] if args.paths else [])
    table = [[e.kind, e.name, e.dist_name, e.dist_version, status, e.value] + ([e.location] if args.paths else []) for e, status in rows]
    if not table:
        print(f"no plugins installed (an env, e.g.: pip install {distribution_of('env', 'bandit')}; ragen-core brings "
              f"{' and '.join(DEFAULTS)} unless they were removed)")
        return 0
    _print_table(header, table)
    return 0


#: The run setting that picks a preset of each kind (``ragen run ... algo_preset=constant-norm``).
PRESET_KEYS = {"env": "--preset", "algorithm": "algo_preset", "estimator": "algo_config.estimator_preset", "filter": "filter_preset"}


#: Seconds a spec module may take to import before ``ragen plugins check`` remarks on it (ours take
#: milliseconds; a spec module that imports torch or a dataset takes seconds).
SLOW_SPEC_S = 2.0


def check_plugins(args: argparse.Namespace) -> int:
    from ragen_core import registry

    reg = registry.default_registry()
    strict = args.strict or os.environ.get("RAGEN_STRICT_PLUGINS") == "1"
    kinds = [args.kind] if args.kind else list(GROUPS)
    table, failures, disabled, unavailable = [], 0, 0, 0
    rows = _rows(reg, kinds)
    heavy, import_s = _import_specs(reg, [e for e, status in rows if status not in ("disabled", "duplicate")])
    for e, status in rows:
        if status == "disabled":
            disabled += 1
            table.append([e.kind, e.name, e.dist_name, e.dist_version, "disabled", f"not checked (hidden by {reg.disabled_by(e)})"])
            continue
        if status == "duplicate":  # 'ragen run --env NAME' would refuse it: a failure, whatever each copy holds
            failures += 1
            table.append([e.kind, e.name, e.dist_name, e.dist_version, "DUPLICATE",
                          f"another distribution also provides {e.kind} {e.name!r}; select one as '{e.dist_name}:{e.name}' "
                          f"or hide the other with RAGEN_DISABLE_PLUGINS"])
            continue
        try:
            spec = reg.get_spec(e.kind, f"{e.dist_name}:{e.name}")  # (imported and timed by _import_specs)
            took = import_s.get(e.qualified, 0.0)
            notes = [f"its spec module took {took:.1f} s to import: every command that lists plugins pays it; import heavy "
                     "modules in the factory's module"] if took > SLOW_SPEC_S else []
            if heavy.get(e.qualified):
                notes.append(f"its spec module imports {' and '.join(heavy[e.qualified])} (every command that lists plugins pays "
                             "for it): import it in the factory's module")
            notes += (_check_factory(spec, load=strict) + _check_defaults(spec) + _check_default_estimator(spec, strict=strict)
                     + _check_field_typos(spec))
            for preset in spec.presets:
                reg.make_config(e.kind, f"{e.dist_name}:{e.name}", preset=preset)
            notes += [n for recipe in getattr(spec, "recipes", {}) for n in _check_recipe(spec, recipe)]
            if not spec.summary.strip():  # 'ragen plugins show' and the listing would have nothing to say
                notes.append("no summary: give the spec a one-line summary=...")
            missing = _unavailable(reg, e, spec)
            if missing is not None:  # a sound plugin whose dependency is not here (vllm, a Lean toolchain): not a failure
                unavailable += 1
                table.append([e.kind, e.name, e.dist_name, e.dist_version, "unavailable", clip(missing, 160)])
                continue
            if strict:
                _build(reg, e, spec)
            table.append([e.kind, e.name, e.dist_name, e.dist_version, "ok", "; ".join(notes) if notes else spec.summary[:60]])
        except Exception as exc:  # noqa: BLE001 - report every plugin's failure on its own row
            failures += 1
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            # the first line whole up to 300 characters: a load error's own words come after ~130 of prefix
            table.append([e.kind, e.name, e.dist_name, e.dist_version, "FAILED", clip(f"{type(exc).__name__}: {first}", 300)])
    for stray in registry.stray_entry_points() if not args.kind else []:  # a misspelt group: its plugin is never found
        failures += 1
        table.append(["?", stray.name, stray.dist_name, "", "FAILED", f"entry-point group {stray.group!r} is not one RAGEN reads"
                      + (f": did you mean {stray.meant!r}?" if stray.meant else "")])
    _print_table(["KIND", "NAME", "DISTRIBUTION", "VERSION", "CHECK", "DETAIL"], table)
    print(f"\n{len(table) - failures - disabled - unavailable} ok, {failures} failed" + (f", {disabled} disabled" if disabled else "")
          + (f", {unavailable} unavailable here (their runs are refused until what they need is installed)" if unavailable else ""))
    return 1 if failures else 0


#: Modules a spec module must not import (README: the entry points' targets import no torch).
HEAVY_MODULES = ("torch", "transformers", "vllm", "ray")


def _import_specs(reg: Any, entries: list[Any]) -> tuple[dict[str, list[str]], dict[str, float]]:
    """Import every spec before any implementation: ``qualified name -> heavy modules`` its spec
    module imported (a module already imported cannot be blamed on a later spec: the first spec
    that pulls one in is named, and the next one after it is fixed), and the seconds each import took."""
    import sys

    heavy: dict[str, list[str]] = {}
    took: dict[str, float] = {}
    for e in entries:
        before = {m for m in HEAVY_MODULES if m in sys.modules}
        started = time.perf_counter()
        try:
            reg.get_spec(e.kind, f"{e.dist_name}:{e.name}")
        except Exception:  # noqa: BLE001 - reported on the plugin's own row
            continue
        took[e.qualified] = time.perf_counter() - started
        pulled = [m for m in HEAVY_MODULES if m in sys.modules and m not in before]
        if pulled:
            heavy[e.qualified] = pulled
    return heavy, took


#: Kinds ``check --strict`` builds with their default settings: building one reads its config only
#: (the shipped ones take milliseconds, all of them together about 0.2 s). An env may load its data
#: or start a server, an engine loads a model and a pool starts workers: those are not built.
BUILT_BY_STRICT = ("estimator", "algorithm", "filter", "diagnostic")


def _build(reg: Any, entry: Any, spec: Any) -> None:
    """Build a plugin of a :data:`BUILT_BY_STRICT` kind with its default settings, as a run would
    (an algorithm's ``agg_kwargs`` and ``metric_names`` checked as the trainer checks them); nothing for other kinds or
    for a plugin with settings that have no default (a run names them).

    Raises:
        RagenError: the factory raised, built the wrong thing, or the algorithm's agg_kwargs or metric_names are refused.
    """
    if entry.kind not in BUILT_BY_STRICT or any(f.is_required() for f in spec.config_model.model_fields.values()):
        return
    built = reg.make(entry.kind, entry.qualified)
    if entry.kind == "algorithm":
        from ragen_core.interfaces.algorithm import check_agg_kwargs, check_metric_names

        check_agg_kwargs(built)
        check_metric_names(built)


def _unavailable(reg: Any, entry: Any, spec: Any) -> str | None:
    """Why a run of this plugin with its default settings would be refused here (its spec's
    availability check: a dependency not installed), or None when it would start."""
    from ragen_core.errors import RagenError

    if getattr(spec, "availability", None) is None:
        return None
    try:
        config = reg.make_config(entry.kind, f"{entry.dist_name}:{entry.name}")
    except RagenError:  # no default settings (a required field): a run names its own, and is checked then
        return None
    try:
        spec.check_available(config)
    except RagenError as exc:
        return exc.message
    return None


def _check_factory(spec: Any, *, load: bool = False) -> list[str]:
    """The factory's module exists and defines its name (read from the module's source without
    importing it: the check stays light); with ``load``, the implementation is imported, as a run does.

    Raises:
        PluginLoadError: no such module, no such name in it, or (``load``) its import fails.
    """
    import importlib.util

    from ragen_core.errors import PluginLoadError

    module, _, attr = spec.factory.partition(":")
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:
        raise PluginLoadError(f"factory {spec.factory!r}: cannot look up module {module!r} ({type(exc).__name__}: {exc})") from exc
    if found is None:
        raise PluginLoadError(f"factory {spec.factory!r}: no module named {module!r} (fix the spec's factory string)")
    name = attr.split(".")[0]
    if name and found.origin and found.origin.endswith(".py") and not _may_define(found.origin, name):
        raise PluginLoadError(f"factory {spec.factory!r}: module {module!r} defines no {name!r} (fix the spec's factory string)")
    if load:
        try:
            factory = spec.load_factory()
        except Exception as exc:  # any import failure is this plugin's row
            raise PluginLoadError(f"factory {spec.factory!r} failed to import: {type(exc).__name__}: {exc}") from exc
        from ragen_core.registry import interface_of

        base = interface_of(spec.kind)
        if isinstance(factory, type) and base is not None and not issubclass(factory, base):  # a function is only known when called
            raise PluginLoadError(f"factory {spec.factory!r} is a class that does not subclass {base.__module__}.{base.__name__}: "
                                  f"a run would refuse what it builds")
    return []


def _check_default_estimator(spec: Any, *, strict: bool) -> list[str]:
    """An algorithm's default estimator is installed: a note (an algorithm installed without it is
    still whole), a failure with ``strict`` (a run of it would stop at once)."""
    from ragen_core import registry
    from ragen_core.errors import PluginNotFoundError

    if spec.kind != "algorithm":
        return []
    name = getattr(spec.config_model(), "estimator", None)
    if not isinstance(name, str) or name in registry.names("estimator"):
        return []
    what = f"its default estimator {name!r} is not installed (ragen plugins --kind estimator lists those that are)"
    if strict:
        raise PluginNotFoundError(what)
    return [what]


def _may_define(path: str, name: str) -> bool:
    """Whether the module source at ``path`` may define ``name``, read without importing it: the
    identifier occurs in it (however it is bound: def, assignment, import, loop, ``globals()``), or
    the module can bind names it never spells (a star import, a module ``__getattr__``), or the
    source cannot be read or parsed (the import then says what is wrong)."""
    import ast

    try:
        text = Path(path).read_text(encoding="utf-8")
        tree = ast.parse(text, path)
    except (OSError, SyntaxError, ValueError):
        return True
    if re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", text):
        return True

    def module_level(node: ast.AST) -> Any:  # the module's statements, not those inside a def or class
        for child in ast.iter_child_nodes(node):
            yield child
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                yield from module_level(child)

    return any((isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names))
               or (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "__getattr__")
               or (isinstance(n, ast.Name) and n.id == "__getattr__" and isinstance(n.ctx, ast.Store)) for n in module_level(tree))


def _check_defaults(spec: Any) -> list[str]:
    """The config model's defaults pass its own validation (pydantic does not check defaults);
    settings without a default are a note: a run has to set them."""
    from ragen_core.errors import PluginConfigError

    model = spec.config_model
    required = [name for name, info in model.model_fields.items() if info.is_required()]
    if required:
        return [f"no default for {', '.join(required)}: a run sets {'them' if len(required) > 1 else 'it'}"]
    from ragen_core.registry import default_fault

    fault = default_fault(model, model())
    if fault is not None:
        raise PluginConfigError(f"the default of {fault[0]} fails its own validation: {fault[1]}")
    return []


def _check_field_typos(spec: Any) -> list[str]:
    """A note for a field the plugin's config adds whose name is close to one it inherits from its
    kind's base config (``estimater`` beside ``estimator``): a misspelt override adds a new field
    and leaves the inherited default in force, without an error anywhere."""
    import difflib

    from ragen_core.specs import import_string

    if spec.config_base is None:
        return []
    inherited = list(import_string(spec.config_base).model_fields)
    notes = []
    for name in spec.config_model.model_fields:
        close = difflib.get_close_matches(name, inherited, n=1, cutoff=0.8) if name not in inherited else []
        if close:
            notes.append(f"field {name!r} is close to the inherited {close[0]!r}: a misspelt override adds a field and leaves "
                         f"{close[0]}'s default in force")
    return notes


def _check_recipe(spec: object, recipe: str) -> list[str]:
    """Validate an env recipe against the run config and the plugins it names.

    Raises on a bad field; a plugin the recipe needs but that is not installed is a note (an env
    installed alone next to the core is still healthy), returned as text.
    """
    from ragen_core.config import load_config
    from ragen_core.errors import ConfigError, PluginNotFoundError
    from ragen_core.trainer.config import RunConfig, check_plugin_configs

    try:
        check_plugin_configs(load_config(RunConfig, base=spec.recipe(recipe)))  # type: ignore[attr-defined]
    except PluginNotFoundError as exc:
        return [f"recipe {recipe!r} needs a plugin that is not installed: {str(exc).splitlines()[0]}"]
    except Exception as exc:
        raise ConfigError(f"recipe {recipe!r}: {str(exc).splitlines()[0]}") from exc
    return []


def type_name(annotation: Any) -> str:
    """A field's type as written in code: ``int``, ``list[str]``, ``int | None``, ``Literal['a', 'b']``.

    ``str()`` of a plain class gives ``<class 'int'>``; generic aliases and unions already print
    as code, apart from the ``typing.`` prefix.
    """
    import types
    import typing

    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:  # its constraints are pydantic's metadata, not the type (a FieldInfo repr)
        return type_name(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType) and any(typing.get_origin(a) is typing.Annotated for a in typing.get_args(annotation)):
        # `Annotated[int, Field(ge=2)] | Literal["all"]` is a typing.Union: shown as written, with `|`
        return " | ".join("None" if a is type(None) else type_name(a) for a in typing.get_args(annotation))
    if isinstance(annotation, type) and not getattr(annotation, "__args__", None):
        return annotation.__name__
    text = re.sub(r"<class '([\w.]+)'>", lambda m: m.group(1).rsplit(".", 1)[-1], str(annotation))
    parts = re.split(r"('[^']*')", text)  # quoted Literal values stay as they are
    return "".join(p if i % 2 else re.sub(r"\b(?:[a-z_]\w*\.)+(?=[A-Za-z_])", "", p) for i, p in enumerate(parts))  # typing.X, pathlib.Path


def show_plugin(args: argparse.Namespace) -> int:
    from ragen_core import registry
    from ragen_core.specs import GROUPS

    if len(args.target) == 1:  # a name one kind alone has: 'ragen plugins show snr-topp'
        (name,) = args.target
        kinds = [kind for kind in GROUPS if name in registry.names(kind)]
        if len(kinds) != 1:
            said = f"'{name}' is the name of {' and '.join(registry.article(k) for k in kinds)}" if kinds else f"no plugin is named '{name}'"
            example = f"ragen plugins show {kinds[0]} {name}" if kinds else "ragen plugins show env sokoban"
            raise RagenError(f"'ragen plugins show' needs KIND and NAME: {said}", [f"example: {example}"])
        args.target = [kinds[0], name]
    if len(args.target) != 2:
        raise RagenError("'ragen plugins show' needs KIND and NAME", ["example: ragen plugins show env sokoban"])
    kind, name = args.target
    spec = registry.get_spec(kind, name)
    entry = registry.find(kind, name)
    print(f"{spec.kind} {spec.name} — {spec.summary}")
    print(f"distribution: {entry.origin}   entry point: {entry.value}   factory: {spec.factory}")
    if spec.aliases:
        print(f"aliases: {', '.join(spec.aliases)}")
    if spec.presets:
        how = PRESET_KEYS.get(spec.kind)
        print(f"presets: {', '.join(spec.presets)}" + (f"   (choose one with {how}=NAME)" if how else ""))
    for name, recipe in getattr(spec, "recipes", {}).items():
        print(f"recipe {name}: {recipe.summary}" + (f" (measured: {recipe.measured})" if recipe.measured else ""))
        print(f"  ragen run --env {spec.name} --recipe {name}")
    if spec.kind == "algorithm":
        for line in algorithm_notes(entry):
            print(line)
    if spec.kind == "filter":
        print(filter_signal_note())
    if spec.kind == "env":
        for line in env_notes(spec):
            print(line)
    if not spec.config_model.model_fields:  # an empty FIELD/TYPE/DEFAULT/DESCRIPTION table said nothing
        print(f"\nconfig fields: none ({spec.kind} {spec.name} takes no settings)")
        return 0
    print("\nconfig fields:")
    print_fields(spec.config_model)
    return 0


def filter_signal_note() -> str:
    """What ``plugins show`` says of every filter: the run setting that picks the rewards it ranks
    (``filter_signal``, a setting of the run, not of the filter: it is not among the fields)."""
    from typing import get_args

    from ragen_core.trainer.config import RunConfig

    field = RunConfig.model_fields["filter_signal"]
    choices = " | ".join(map(str, get_args(field.annotation)))
    return (f"rewards it sees: the run's filter_signal ({choices}; default {field.default}): the episode score "
            "(env reward + format penalty, after reward.normalization) or the env reward alone")


def algorithm_notes(entry: Any) -> list[str]:
    """What ``plugins show`` says of an algorithm besides its settings: that it has a ``token_loss``
    of its own (the ``clip_ratio_*`` settings are read only by the built-in clipped surrogate, so
    for it they may do nothing), and the metrics it logs. Read from the algorithm built with its
    default settings, as ``check --strict`` builds it; nothing when it cannot be built (a run says why)."""
    from ragen_core import registry
    from ragen_core.interfaces.algorithm import Algorithm

    try:
        built = registry.make("algorithm", entry.qualified)
    except RagenError:
        return []
    notes = []
    if type(built).token_loss is not Algorithm.token_loss:
        notes.append("token_loss: its own, not the built-in clipped surrogate; clip_ratio_low, clip_ratio_high and clip_ratio_c are read "
                     "only by that surrogate, so they do nothing unless its token_loss reads them")
    names = getattr(built, "metric_names", ())
    if names:
        notes.append(f"metrics of its own: {', '.join(f'actor/algo/{n}' for n in names)}")
    return notes


def env_notes(spec: Any) -> list[str]:
    """What ``plugins show`` says of an env besides its settings: the info metrics a run logs for it
    (its class's ``info_metrics``, read from the class without building an env). Nothing when the
    class cannot be imported (a run says why)."""
    from ragen_core.errors import RagenError
    from ragen_core.interfaces.env import checked_info_metrics

    try:
        declared = checked_info_metrics(spec.load_factory())
    except (ImportError, AttributeError, RagenError):
        return []
    if not declared:
        return ["info metrics: none (the env declares no info_metrics)"]
    keys = ", ".join(f"{key} ({mode})" for key, mode in declared)
    return [f"info metrics: {keys}: logged as train/TAG/info/KEY, TAG the run's preset or else {spec.name} "
            "(val-env/TAG/info/KEY in validation, info/KEY in ragen eval)"]


#: Terminal width from which ``ragen plugins show`` prints settings as a table: the width alone
#: picks the layout, so every plugin (an algorithm's long ``Literal`` types, a filter's, an env's)
#: comes out the same way on one terminal.
TABLE_COLUMNS = 120


def print_fields(model: Any) -> None:
    """A config model's fields for the terminal: on a terminal of at least :data:`TABLE_COLUMNS`
    columns a table (FIELD, TYPE wrapped in its column when long, DEFAULT, the description's first
    sentence wrapped in its column); on a narrower one each field as ``name: type = default`` with
    its whole first sentence wrapped below, indented by four."""
    import shutil
    import textwrap

    columns = shutil.get_terminal_size().columns
    rows = field_rows(model)
    if columns >= TABLE_COLUMNS:
        name_w, type_w, default_w = (max(len(r[i]) for r in rows) for i in range(3))
        room = columns - 1 - name_w - default_w - 6  # for TYPE and DESCRIPTION; the description keeps 40 or more
        _print_table(["FIELD", "TYPE", "DEFAULT", "DESCRIPTION"], rows, wrap_last=True, wrap={1: min(type_w, max(room - 40, 12))})
        return
    for name, type_, default, description in field_rows(model, default_limit=max(12, columns - 12), description_limit=None):
        print(clip(f"{name}: {type_} = {default}", max(20, columns - 1)))
        for line in textwrap.wrap(description, max(20, columns - 5)):
            print("    " + line)


def field_rows(model: Any, prefix: str = "", *, default_limit: int = 30, description_limit: int | None = 100,
               defaults: Any = None) -> list[list[str]]:
    """``[name, type, default, description]`` rows of a config model's fields (the default's repr cut
    at ``default_limit``, the description's first sentence at ``description_limit``; None: whole);
    a field that is itself a settings model (DeepCoder's ``sandbox``, WebShop's ``catalog``) is shown
    as its own fields, named ``parent.child`` as ``--set`` and ``env_config.`` overrides spell them,
    with the defaults of the parent's default (SearchQA's ``server.ready_timeout_s`` is 600, not the
    settings class's 120)."""
    from pydantic import BaseModel

    rows = []
    for field_name, field in model.model_fields.items():
        default = getattr(defaults, field_name) if defaults is not None else field.get_default(call_default_factory=True)
        if isinstance(default, BaseModel) and isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            rows += field_rows(field.annotation, f"{prefix}{field_name}.", default_limit=default_limit, description_limit=description_limit,
                               defaults=default)
            continue
        described = first_sentence(field_description(model, field_name), description_limit if description_limit is not None else 10**9)
        rows.append([prefix + field_name, type_name(field.annotation), clip(repr(default), default_limit), described])
    return rows


def field_description(model: Any, name: str) -> str:
    """The description of ``model``'s field ``name``: its own, else that of the nearest base class
    that documents the field (a plugin's ``estimator: str = "rloo"`` overrides the default of
    AlgorithmConfig's documented ``estimator`` and means the same setting); ``""`` when none does."""
    for cls in getattr(model, "__mro__", (model,)):
        field = getattr(cls, "model_fields", {}).get(name) if isinstance(cls, type) else None
        if field is not None and field.description:
            return str(field.description)
    return ""


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, ending in ``…`` when something was cut."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def first_sentence(text: str, limit: int = 100) -> str:
    """The first sentence of a (possibly wrapped) description, on one line, at most ``limit`` long."""
    flat = " ".join(text.split())
    # a full stop followed by a space ends the sentence, except after an abbreviation ("e.g. gae's")
    found = next((m for m in re.finditer(r"\. ", flat) if not re.search(r"(?:\b(?:e\.g|i\.e|etc|vs|cf)|\b[A-Za-z])$", flat[: m.start()])), None)
    sentence = flat[: found.start() + 1] if found is not None else flat
    if len(sentence) <= limit:
        return sentence
    cut = sentence[: limit - 1]
    return (cut.rsplit(" ", 1)[0] if " " in cut else cut).rstrip(",;:") + "…"


def run(args: argparse.Namespace) -> int:
    if args.action == "check":
        return check_plugins(args)
    if args.action == "show":
        return show_plugin(args)
    if args.target:
        print(f"unexpected arguments: {' '.join(args.target)}", file=sys.stderr)
        return 2
    return list_plugins(args)
