"""Plugin registry: find plugins from metadata, load only the one asked for.

Two phases, kept apart (flake8's finder, stevedore's named loading):

* **find** reads entry-point metadata only (``importlib.metadata``), once per process, and never
  imports plugin code. ``ragen plugins`` uses only this phase, so it is fast and keeps working
  when every plugin is broken.
* **load** imports exactly the requested entry point, after checking the name, duplicates and
  the distribution's declared ``ragen-core`` requirement. Plugins the user did not select are
  never imported, so they cannot break a command.

Errors name the kind, the plugin, the distribution and its version, and add ``hint:`` lines
(see :mod:`ragen_core.errors`).

Environment variables: ``RAGEN_DISABLE_PLUGINS=name-or-dist,...`` hides plugins;
``RAGEN_LOAD_PLUGINS=name-or-dist,...`` hides everything else (entries of the distribution
``ragen-core`` itself are always kept).

Tests build an isolated :class:`Registry` with an injected entry-point source instead of
patching global state (stevedore's ``make_test_instance``).
"""

from __future__ import annotations

import difflib
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, overload

from ragen_core.distributions import ALL_DISTRIBUTIONS, install_hint
from ragen_core.errors import (
    DuplicatePluginError,
    IncompatiblePluginError,
    PluginConfigError,
    PluginError,
    PluginLoadError,
    PluginNotFoundError,
    RagenError,
    RegistryError,
    UsageError,
)
from ragen_core.specs import (
    COMMAND_GROUP,
    GROUPS,
    NAME_PATTERN,
    NAME_RULE,
    SPEC_CLASSES,
    EnvSpec,
    EstimatorSpec,
    PluginConfig,
    PluginSpec,
    normalize_name,
)

IN_PROCESS = "<in-process>"
CORE_DIST = "ragen-core"

#: A source returns the entry points of one group: objects with ``name``, ``value``, ``load()``
#: and optionally ``dist`` (``importlib.metadata.EntryPoint`` qualifies).
EntryPointSource = Callable[[str], Iterable[Any]]


def _importlib_source(group: str) -> Iterable[Any]:
    from importlib.metadata import entry_points

    return entry_points(group=group)


@dataclass(frozen=True)
class PluginEntry:
    """What is known about a plugin without importing it."""

    kind: str
    name: str
    value: str
    dist_name: str
    dist_version: str
    requires: tuple[str, ...] = ()
    location: str = ""
    entry_point: Any = None
    spec: PluginSpec | None = None  # set for in-process registrations

    @property
    def origin(self) -> str:
        return f"{self.dist_name} {self.dist_version}".strip()

    @property
    def qualified(self) -> str:
        return f"{self.dist_name}:{self.name}"


_KIND_ALIASES = {"algo": "algorithm"}  # as --algo and algo_config spell it


def _kind_of(kind: str) -> str:
    if not isinstance(kind, str):
        raise UsageError(f"a plugin kind is a string, not {type(kind).__name__} {kind!r}", [f"kinds: {', '.join(GROUPS)}"])
    k = kind.rstrip("s") if kind.rstrip("s") in GROUPS else kind
    k = _KIND_ALIASES.get(k, k)
    if k not in GROUPS:
        raise PluginNotFoundError(f"unknown plugin kind {kind!r}", [f"kinds: {', '.join(GROUPS)}"])
    return k


def _env_list(var: str) -> set[str]:
    return {normalize_name(x) for x in os.environ.get(var, "").split(",") if x.strip()}


class Registry:
    """Finds and loads plugins of every kind. Thread-safe; caches metadata in memory."""

    def __init__(self, source: EntryPointSource | None = None) -> None:
        self._source = source or _importlib_source
        self._found: dict[str, list[PluginEntry]] = {}
        self._local: dict[str, list[PluginEntry]] = {k: [] for k in GROUPS}
        self._loaded: dict[tuple[str, str, str], PluginSpec] = {}
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ find
    def _discover(self, kind: str) -> list[PluginEntry]:
        if kind in self._found:
            return self._found[kind]
        entries: list[PluginEntry] = []
        seen: set[tuple[str, str, str]] = set()
        for ep in self._source(GROUPS[kind]):
            dist = getattr(ep, "dist", None)
            dist_name = normalize_name(getattr(dist, "name", None) or (dist.metadata["Name"] if dist else "") or "unknown")
            dist_version = getattr(dist, "version", "") or ""
            key = (dist_name, normalize_name(ep.name), ep.value)
            if key in seen:  # the same dist seen twice (lib/lib64, editable metadata): merge silently
                continue
            seen.add(key)
            entries.append(
                PluginEntry(
                    kind=kind,
                    name=normalize_name(ep.name),
                    value=ep.value,
                    dist_name=dist_name,
                    dist_version=dist_version,
                    requires=tuple(getattr(dist, "requires", None) or ()),
                    location=dist_location(dist),
                    entry_point=ep,
                )
            )
        self._found[kind] = entries
        return entries

    def entries(self, kind: str, *, include_disabled: bool = False) -> list[PluginEntry]:
        """All known plugins of ``kind`` (installed and registered in-process), metadata only."""
        kind = _kind_of(kind)
        with self._lock:
            items = self._discover(kind) + self._local[kind]
        if include_disabled:
            return list(items)
        return [e for e in items if self.enabled(e)]

    @staticmethod
    def enabled(entry: PluginEntry) -> bool:
        return Registry.disabled_by(entry) is None

    @staticmethod
    def disabled_by(entry: PluginEntry) -> str | None:
        """The environment variable that hides ``entry``: ``RAGEN_DISABLE_PLUGINS`` names it, or
        ``RAGEN_LOAD_PLUGINS`` is set and does not; None when it is enabled."""
        ids = {entry.name, entry.dist_name, normalize_name(entry.qualified)}
        if ids & _env_list("RAGEN_DISABLE_PLUGINS"):
            return "RAGEN_DISABLE_PLUGINS"
        allow = _env_list("RAGEN_LOAD_PLUGINS")
        if allow and entry.dist_name != CORE_DIST and not ids & allow:
            return "RAGEN_LOAD_PLUGINS"
        return None

    def names(self, kind: str) -> list[str]:
        """Sorted unique names of the enabled plugins of ``kind``."""
        return sorted({e.name for e in self.entries(kind)})

    def find(self, kind: str, name: str) -> PluginEntry:
        """Resolve ``name`` or ``dist:name`` to exactly one entry, or raise with hints."""
        kind = _kind_of(kind)
        if not isinstance(name, str) or not name:
            from ragen_core.config import short_repr

            raise UsageError(f"{article(kind)} name is a non-empty string, not {short_repr(name)}", [f"'ragen plugins' lists the installed {kind}s"])
        dist_sel: str | None = None
        raw = name
        if ":" in name:
            dist_sel, _, name = name.partition(":")
            dist_sel = normalize_name(dist_sel)
        name = normalize_name(name)
        all_entries = self.entries(kind, include_disabled=True)
        matches = [e for e in all_entries if e.name == name and (dist_sel is None or e.dist_name == dist_sel)]
        enabled = [e for e in matches if self.enabled(e)]
        if not enabled:
            if matches:
                by = self.disabled_by(matches[0])
                change = (f"remove it from {by}" if by == "RAGEN_DISABLE_PLUGINS" else
                          f"add '{matches[0].name}' or '{matches[0].dist_name}' to {by}, or unset it")
                raise PluginNotFoundError(f"{kind} {name!r} from {matches[0].origin} is hidden by {by}", [f"{change} to enable it"])
            available = self.entries(kind)
            names = sorted({e.name for e in available})
            hints: list[str] = []
            close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
            if close:
                hints.append(f"did you mean {close[0]!r}?")
            if names:
                listing = ", ".join(f"{e.name} ({e.origin})" for e in sorted(available, key=lambda e: e.name))
                hints.append(f"installed {kind}s: {listing}")
            else:
                hints.append(f"no {kind} plugins are installed")
            hints.append(install_hint(kind, name))
            elsewhere = sorted({e.dist_name for e in all_entries if e.name == name and self.enabled(e)})
            if dist_sel is not None and elsewhere:  # the name is right, the distribution part is not
                hints = [f"{kind} {name!r} comes from {', '.join(elsewhere)}, not {dist_sel!r}: write {name!r} or "
                         f"'{elsewhere[0]}:{name}'"]
            strays = [e for e in stray_entry_points() if e.name == name]
            if strays:  # installed, but under a group RAGEN does not read: that is the fix, not an install
                hints = [stray.hint() for stray in strays]
            raise PluginNotFoundError(f"no {kind} named {raw!r} (entry-point group {GROUPS[kind]})", hints)
        # Entries with the same dist and value are one plugin; anything else is a true conflict.
        distinct = {(e.dist_name, e.value): e for e in enabled}
        if len(distinct) > 1:
            listing = ", ".join(f"{e.origin} ({e.value})" for e in distinct.values())
            first = next(iter(distinct.values()))
            raise DuplicatePluginError(
                f"{kind} {name!r} is provided by {len(distinct)} distributions: {listing}",
                [
                    f"select one with '{first.qualified}', or set RAGEN_DISABLE_PLUGINS="
                    + ",".join(e.dist_name for e in list(distinct.values())[1:])
                ],
            )
        return next(iter(distinct.values()))

    # ------------------------------------------------------------------ load
    def _check_compat(self, entry: PluginEntry) -> None:
        """Compare the dist's ``Requires-Dist: ragen-core...`` with the installed core (before import)."""
        from packaging.requirements import InvalidRequirement, Requirement
        from packaging.version import Version

        from ragen_core import __version__ as core_version

        for line in entry.requires:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            if normalize_name(req.name) != CORE_DIST or req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            if req.specifier and not req.specifier.contains(Version(core_version), prereleases=True):
                raise IncompatiblePluginError(
                    f"{entry.kind} {entry.name!r}: {entry.origin} requires ragen-core{req.specifier}; installed ragen-core is {core_version}",
                    [f"upgrade {entry.dist_name}, or install 'ragen-core{req.specifier}'"],
                )

    def get_spec(self, kind: str, name: str) -> PluginSpec:
        """Import and validate the light spec of one plugin (never its heavy implementation)."""
        entry = self.find(kind, name)
        key = (entry.kind, entry.dist_name, entry.name)
        with self._lock:
            if key in self._loaded:
                return self._loaded[key]
        if entry.spec is not None:
            spec = entry.spec
        else:
            self._check_compat(entry)
            try:
                spec = entry.entry_point.load()
            except Exception as exc:  # any import-time failure of the requested plugin is fatal for it
                invalid = _invalid_at_load(entry, exc)
                if invalid is not None:  # its module imported, but a model it builds as it loads refused a value
                    raise invalid from exc
                raise PluginLoadError(
                    f"{entry.kind} {entry.name!r} from {entry.origin} failed to import: {type(exc).__name__}: {exc}",
                    [f"{_import_hint(exc, entry.value, entry.dist_name)}   (entry point: {entry.value})"],
                ) from exc
            spec = self._validate_spec(entry, spec)
        with self._lock:
            self._loaded[key] = spec
        return spec

    @staticmethod
    def _validate_spec(entry: PluginEntry, spec: Any) -> PluginSpec:
        from ragen_core import API_VERSION

        expected = SPEC_CLASSES[entry.kind]
        if not isinstance(spec, expected):
            raise PluginLoadError(
                f"{entry.kind} {entry.name!r} from {entry.origin}: entry point {entry.value} is "
                f"{article(type(spec).__name__)}, expected {article(expected.__name__)}",
                [f"point the entry point at a module-level {expected.__name__} instance"],
            )
        if spec.api_version != API_VERSION:
            raise IncompatiblePluginError(
                f"{entry.kind} {entry.name!r} from {entry.origin} targets plugin API {spec.api_version}; this ragen-core provides API {API_VERSION}",
                [f"upgrade {entry.dist_name} or install a ragen-core with API {spec.api_version}"],
            )
        if entry.name != spec.name and entry.name not in spec.aliases:
            raise PluginLoadError(
                f"{entry.kind} {entry.name!r} from {entry.origin}: entry-point name differs from spec name {spec.name!r}",
                [f"rename the entry point to {spec.name!r} or list {entry.name!r} in the spec's aliases"],
            )
        return spec

    def make_config(self, kind: str, name: str, config: dict[str, Any] | PluginConfig | None = None, *, preset: str | None = None,
                    where: str | None = None) -> PluginConfig:
        """Validate ``config`` against the plugin's config model (errors name the field path).

        ``where`` is where the settings were given in a run config (``env_config``,
        ``rollout.pool_config``): errors then name keys as the user typed them
        (``env_config.max_turns``) and say which plugin read them; without it keys are named
        ``KIND.NAME.key``.
        """
        spec = self.get_spec(kind, name)
        if preset is not None and not isinstance(preset, str):
            raise UsageError(f"a preset is named by a string, not {type(preset).__name__} {preset!r}",
                             [f"'ragen plugins show {kind} {spec.name}' lists its presets"])
        if isinstance(config, PluginConfig):
            if preset is None and isinstance(config, spec.config_model):
                return config
            config = config.model_dump()
        elif config is not None and not isinstance(config, dict):  # the caller's mistake, not a plugin bug
            raise PluginConfigError(f"{where or f'{kind} {spec.name!r}'} settings must be a mapping of setting names to values, "
                                    f"got a {type(config).__name__}", [f"'ragen plugins show {kind} {spec.name}' lists the settings"])
        if preset is not None and preset not in spec.presets:
            close = difflib.get_close_matches(preset, list(spec.presets), n=1, cutoff=0.5)
            hints = [f"did you mean {close[0]!r}?"] if close else []
            hints.append(f"presets of {kind} {spec.name!r}: {', '.join(spec.presets) or '(none)'}")
            raise PluginConfigError(f"{kind} {spec.name!r} has no preset {preset!r}", hints)
        from pydantic import ValidationError

        if preset is not None:  # the preset's own keys first: an error in it is the plugin's, not the user's settings
            try:
                spec.make_config({}, preset=preset)
            except ValidationError as exc:
                inner = config_error_from_validation(exc, prefix=f"presets[{preset!r}]", model_cls=spec.config_model, show=f"{kind} {spec.name}")
                entry = self.find(kind, name)
                raise PluginConfigError(f"{kind} {spec.name!r} from {entry.origin}: its preset {preset!r} is broken: "
                                        f"{inner.message.removeprefix('invalid config: ')}",
                                        [f"the preset is the plugin's own: report it to {entry.dist_name}, and run without it meanwhile"]) from None
        try:
            made = spec.make_config(dict(config or {}), preset=preset)
        except ValidationError as exc:
            error = config_error_from_validation(exc, prefix=where or f"{kind}.{spec.name}", model_cls=spec.config_model,
                                                 show=f"{kind} {spec.name}")
            if kind == "filter" and spec.name == "none" and "unknown key" in error.message:  # settings for a filter not chosen
                error.hints.insert(0, "the filter is 'none' (the default, it keeps every group): choose one with --filter NAME "
                                      "(ragen plugins --kind filter lists them)")
            raise error from None
        except RagenError:
            raise
        except Exception as exc:  # a validator of the plugin raised something pydantic does not wrap: a plugin bug
            raise self._validator_bug(kind, name, spec, exc) from exc
        try:  # pydantic does not validate defaults: one that breaks its own rule is said here, not deep in the env
            fault = default_fault(spec.config_model, made)
        except Exception:  # noqa: BLE001 - a validator that cannot read its own output back: the first validation stands
            fault = None
        if fault is not None:
            entry = self.find(kind, name)
            raise PluginConfigError(f"{kind} {spec.name!r} from {entry.origin}: the default of {fault[0]} fails its own validation: "
                                    f"{fault[1]}",
                                    [f"set {fault[0]} explicitly, and report it to {entry.dist_name} ('ragen plugins check' finds these)"])
        return made

    def _validator_bug(self, kind: str, name: str, spec: Any, exc: Exception) -> PluginConfigError:
        """The one-line error for a config validator that raised something other than ValueError."""
        entry = self.find(kind, name)
        text = str(exc).strip()
        return PluginConfigError(
            f"{kind} {spec.name!r} from {entry.origin}: validating its config raised {type(exc).__name__}"
            + (f": {text.splitlines()[0]}" if text else ""),
            [f"check the settings given to {kind} {spec.name!r}; if they look right, report it to {entry.dist_name} "
             "(config validators should raise ValueError, which names the field); -v shows the traceback"],
        )

    def make(self, kind: str, name: str, config: dict[str, Any] | PluginConfig | None = None, *, preset: str | None = None, **kwargs: Any) -> Any:
        """Build a plugin: validate its config, import its factory, call ``factory(config)``."""
        from ragen_core.interfaces.env_pool import EnvRef

        if _kind_of(kind) == "pool" and not isinstance(kwargs.get("env"), EnvRef):  # the factory's TypeError blamed the plugin
            raise UsageError(f"registry.make('pool', {name!r}, ...) needs env=EnvRef(...) (the env its episodes run), "
                             f"not {kwargs.get('env')!r:.80}", ["registry.make('pool', 'local', env=EnvRef(name='sokoban'))"])
        cfg = self.make_config(kind, name, config, preset=preset)
        spec = self.get_spec(kind, name)
        entry = self.find(kind, name)
        try:
            factory = spec.load_factory()
        except Exception as exc:
            raise PluginLoadError(
                f"{kind} {spec.name!r} from {entry.origin} failed to import its implementation {spec.factory}: {type(exc).__name__}: {exc}",
                [_factory_hint(exc, spec.factory, entry.dist_name)],
            ) from exc
        label = f"{spec.kind} {spec.name!r} ({entry.origin})"
        with plugin_call(label, f"its factory {spec.factory}"):
            obj = factory(cfg, **kwargs)
        base = interface_of(spec.kind)
        if base is not None and not isinstance(obj, base):
            raise PluginError(f"{label}: its factory {spec.factory} returned {article(type(obj).__name__)}, not {article(base.__name__)}",
                              [f"make {spec.factory} build a subclass of {base.__module__}.{base.__name__}"])
        try:
            obj.ragen_plugin = label  # what plugin_call names when this object raises during a run
        except (AttributeError, TypeError):
            pass
        return obj

    def register(self, spec: PluginSpec, *, dist: str = IN_PROCESS, version: str = "") -> PluginEntry:
        """Register a spec in-process (notebooks, tests). Takes part in the duplicate check."""
        kind = getattr(spec, "kind", None) if isinstance(spec, PluginSpec) else None
        if kind not in GROUPS:
            kinds = ", ".join(cls.__name__ for cls in SPEC_CLASSES.values())
            raise UsageError(f"cannot register {article(type(spec).__name__)}: register takes a plugin spec ({kinds})")
        if not re.fullmatch(NAME_PATTERN, spec.name):  # model_copy(update=...) skips the spec's own validation
            raise RegistryError(f"cannot register {kind} {spec.name!r}: a plugin name is {NAME_RULE}", [f"register it as {normal_form(spec.name)!r}"])
        entry = PluginEntry(kind=kind, name=spec.name, value=f"{dist}:{spec.name}", dist_name=normalize_name(dist), dist_version=version, spec=spec)
        with self._lock:
            self._local[kind] = [e for e in self._local[kind] if not (e.name == spec.name and e.dist_name == entry.dist_name)]
            self._local[kind].append(entry)
            self._loaded.pop((kind, entry.dist_name, entry.name), None)
        return entry

    def unregister(self, kind: str, name: str, *, dist: str = IN_PROCESS) -> None:
        kind = _kind_of(kind)
        name, dist = normalize_name(name), normalize_name(dist)
        with self._lock:
            self._local[kind] = [e for e in self._local[kind] if not (e.name == name and e.dist_name == dist)]
            self._loaded.pop((kind, dist, name), None)

    def clear_cache(self) -> None:
        """Forget discovered metadata and loaded specs (after installing a plugin in-process)."""
        with self._lock:
            self._found.clear()
            self._loaded.clear()


#: The class a built plugin of these kinds must be an instance of (the trainer calls its methods).
INTERFACES = {
    "env": "ragen_core.interfaces.env:Env",
    "filter": "ragen_core.interfaces.rollout_filter:RolloutFilter",
    "algorithm": "ragen_core.interfaces.algorithm:Algorithm",
    "estimator": "ragen_core.interfaces.advantage:AdvantageEstimator",
    "engine": "ragen_core.interfaces.engine:Engine",
    "pool": "ragen_core.interfaces.env_pool:EnvPool",
}
"""The base class a plugin kind's factory must return an instance of (:meth:`Registry.make`)."""


def article(name: str) -> str:
    """``a dict``, ``an Env``."""
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def interface_of(kind: str) -> Any:
    """The class :data:`INTERFACES` names for ``kind`` (imported), or None for a kind without one."""
    from ragen_core.specs import import_string

    return import_string(INTERFACES[kind]) if kind in INTERFACES else None


def plugin_label(obj: Any) -> str:
    """``filter 'snr-topp' (ragen-filters 0.1.0)`` for an object :meth:`Registry.make` built, else its class."""
    if isinstance(obj, str):
        return obj
    label = getattr(obj, "ragen_plugin", None)
    return label if isinstance(label, str) else f"plugin {type(obj).__name__}"


@contextmanager
def plugin_call(obj: Any, what: str) -> Iterator[None]:
    """Turn an exception a plugin raises inside the block into a one-line :class:`PluginError`.

    ``obj`` is the plugin object (or its label); ``what`` names the call (``"select"``). A
    :class:`RagenError` the plugin raises on purpose passes through unchanged.
    """
    try:
        yield
    except RagenError:
        raise
    except Exception as exc:
        raise PluginError(f"{plugin_label(obj)} raised in {what}: {type(exc).__name__}: {exc}",
                          ["fix the plugin, or run without it; 'ragen -v ...' shows its traceback"]) from exc


@dataclass(frozen=True)
class StrayEntryPoint:
    """An entry point in a group named like RAGEN's (``ragen...``) that RAGEN does not read: a
    misspelt group (``ragen_core.env``) leaves its plugin unseen, without a word otherwise."""

    group: str
    name: str
    value: str
    dist_name: str

    @property
    def meant(self) -> str | None:
        """The group it most likely meant (None: nothing close)."""
        close = difflib.get_close_matches(self.group, [*GROUPS.values(), COMMAND_GROUP], n=1, cutoff=0.6)
        return close[0] if close else None

    def hint(self) -> str:
        fix = f"rename the group to {self.meant!r}" if self.meant else f"use one of {', '.join(GROUPS.values())}"
        return (f"{self.dist_name} declares {self.name!r} under entry-point group {self.group!r}, which RAGEN does not read: "
                f"{fix} in its pyproject.toml and reinstall it (pip install -e ...)")


def stray_entry_points() -> list[StrayEntryPoint]:
    """Every :class:`StrayEntryPoint` installed here (reads metadata only; never imports a plugin)."""
    from importlib.metadata import entry_points

    known = {*GROUPS.values(), COMMAND_GROUP}
    found: dict[tuple[str, str, str], StrayEntryPoint] = {}
    everything = entry_points()
    for group in sorted(everything.groups):
        if group in known or not normalize_name(group).startswith("ragen"):
            continue
        for ep in everything.select(group=group):
            dist = getattr(ep, "dist", None)
            stray = StrayEntryPoint(group, normalize_name(ep.name), ep.value, normalize_name(getattr(dist, "name", None) or "unknown"))
            found.setdefault((group, stray.name, stray.dist_name), stray)  # one dist seen twice (editable metadata)
    return list(found.values())


def normal_form(name: str) -> str:
    """The closest valid plugin name to ``name`` (for the errors that refuse one)."""
    cleaned = re.sub(r"[^a-z0-9-]+", "-", normalize_name(name)).strip("-")
    return cleaned if re.fullmatch(NAME_PATTERN, cleaned) else f"plugin-{cleaned}".rstrip("-")


def editable_source(dist: Any) -> str | None:
    """The source folder of an editable install (``pip install -e``, from PEP 610's
    ``direct_url.json``), or None for any other install (or an unreadable record)."""
    if dist is None:
        return None
    try:
        import json
        from urllib.parse import unquote, urlparse

        direct = json.loads(dist.read_text("direct_url.json") or "{}")
        url = urlparse(str(direct.get("url", "")))
        return unquote(url.path) if direct.get("dir_info", {}).get("editable") and url.scheme == "file" else None
    except Exception:  # noqa: BLE001 - a damaged record: not known to be editable
        return None


def dist_location(dist: Any) -> str:
    """Where a distribution lives: its source folder for an editable install (:func:`editable_source`),
    else the folder holding its files; ``""`` if unknown."""
    if dist is None:
        return ""
    source = editable_source(dist)
    if source is not None:
        return source + " (editable)"
    try:
        return str(dist.locate_file(""))
    except Exception:  # noqa: BLE001 - some finders cannot locate files; the path is only informative
        return ""


def _invalid_at_load(entry: PluginEntry, exc: BaseException) -> PluginLoadError | None:
    """The error for a plugin module whose spec (or another pydantic model it builds at module
    level) fails validation as the module loads: one line naming the plugin, its distribution,
    the model and the field, not "failed to import" with a hint to reinstall. None for any other failure."""
    from pydantic import ValidationError

    from ragen_core.config import validation_message

    found = exc if isinstance(exc, ValidationError) else getattr(exc, "validation", None)
    if not isinstance(found, ValidationError) or not found.errors():
        return None
    known = entry.dist_name != "unknown"
    origin = f" from {entry.origin}" if known else ""
    module = entry.value.partition(":")[0]
    dist, hide = (entry.dist_name, entry.dist_name) if known else ("the plugin", entry.name)
    what = validation_message(found, found.title).removeprefix("invalid config: ")
    return PluginLoadError(
        f"{entry.kind} {entry.name!r}{origin} fails validation as module {module} loads: {what}",
        [f"fix {found.title}(...) in {module}, or upgrade {dist}; meanwhile RAGEN_DISABLE_PLUGINS={hide} hides it"],
    )


def _factory_hint(exc: BaseException, factory: str, dist: str) -> str:
    """:func:`_import_hint`, except when the factory string itself names nothing (its module, or
    its name in the module): a typo in the spec, which no reinstall fixes."""
    module, _, attr = factory.partition(":")
    no_module = isinstance(exc, ModuleNotFoundError) and exc.name == module
    if no_module or (isinstance(exc, AttributeError) and getattr(exc, "name", None) in attr.split(".")):
        return f"fix the factory string of {dist}'s spec ({factory!r}): 'ragen plugins check' names what it lacks"
    return _import_hint(exc, factory, dist)


def _import_hint(exc: BaseException, target: str, dist: str) -> str:
    """One concrete action for an import failure: install the missing dependency or reinstall."""
    missing = getattr(exc, "name", None) if isinstance(exc, ImportError) else None
    if not missing:
        return f"fix or reinstall {dist}; run with -v for the traceback"
    own = target.partition(":")[0].split(".")[0]
    top = missing.split(".")[0]
    if top == own:
        return f"reinstall {dist}: its own module {missing!r} is missing (after editing entry points run 'pip install -e' again)"
    if top.startswith("ragen_") and top.replace("_", "-") in ALL_DISTRIBUTIONS:  # a plugin of this project needing another
        return f"pip install {top.replace('_', '-')}   (a dependency of {dist})"
    # a third-party module: its distribution usually has the same name (the test of hints lists this one)
    return f"pip install {top}   (a dependency of {dist}; check its extras)"


def config_error_from_validation(exc: Any, prefix: str = "", model_cls: Any = None, show: str | None = "KIND NAME") -> PluginConfigError:
    """Turn a pydantic ValidationError into a one-line error naming the first bad field path
    (and, with ``model_cls``, the field an unknown key was probably meant to be); ``show`` is
    the ``ragen plugins show`` argument that lists the plugin's fields (None: list ``model_cls``'s)."""
    from ragen_core.config import list_hints, validation_message

    errors = exc.errors()
    hint = ""
    unknown = [e for e in errors if e.get("type") == "extra_forbidden"]
    if unknown and (show is not None or model_cls is None):
        hint = f"check the spelling against 'ragen plugins show {show}'"
    elif unknown and len(unknown[0].get("loc", ())) == 1:  # a nested section's key: model_cls's own fields would mislead
        hint = f"{model_cls.__name__} takes: {', '.join(model_cls.model_fields)}"
    return PluginConfigError(validation_message(exc, prefix, model_cls), [*list_hints(exc, prefix), hint])


# ---------------------------------------------------------------------- module-level API
_default: Registry | None = None
_default_lock = threading.Lock()


def default_registry() -> Registry:
    """The process-wide registry, built lazily on first use (importing this module finds nothing)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Registry()
        return _default


def names(kind: str) -> list[str]:
    return default_registry().names(kind)


def entries(kind: str, *, include_disabled: bool = False) -> list[PluginEntry]:
    return default_registry().entries(kind, include_disabled=include_disabled)


def find(kind: str, name: str) -> PluginEntry:
    return default_registry().find(kind, name)


# The loader checks each spec's class against SPEC_CLASSES[kind], so these return types hold.
@overload
def get_spec(kind: Literal["env"], name: str) -> EnvSpec: ...
@overload
def get_spec(kind: Literal["estimator"], name: str) -> EstimatorSpec: ...
@overload
def get_spec(kind: str, name: str) -> PluginSpec: ...
def get_spec(kind: str, name: str) -> PluginSpec:
    return default_registry().get_spec(kind, name)


def default_fault(model: type[PluginConfig], made: PluginConfig) -> tuple[str, str] | None:
    """``(field path, why)`` when ``made`` (defaults included) does not pass ``model``'s own
    validation when read back, else None. Pydantic never validates defaults, so a default that
    breaks its field's rule shows up only here. Other exceptions of the model's validators propagate."""
    from pydantic import ValidationError

    from ragen_core.config import error_path

    try:
        model.model_validate(made.model_dump())
    except ValidationError as exc:
        errors = exc.errors()
        where = error_path(errors[0]) if errors else "?"
        return where, (errors[0]["msg"] if errors else str(exc).splitlines()[0])
    return None


def make_config(kind: str, name: str, config: dict[str, Any] | PluginConfig | None = None, *, preset: str | None = None,
                where: str | None = None) -> PluginConfig:
    return default_registry().make_config(kind, name, config, preset=preset, where=where)


def make(kind: str, name: str, config: dict[str, Any] | PluginConfig | None = None, *, preset: str | None = None, **kwargs: Any) -> Any:
    return default_registry().make(kind, name, config, preset=preset, **kwargs)


def make_env(name: str, *, preset: str | None = None, **config: Any) -> Any:
    """Build an environment by name: ``make_env("sokoban", preset="CoordSokoban", max_turns=3)``."""
    return default_registry().make("env", name, config, preset=preset)


def register(spec: PluginSpec, *, dist: str = IN_PROCESS, version: str = "") -> PluginEntry:
    return default_registry().register(spec, dist=dist, version=version)


def unregister(kind: str, name: str, *, dist: str = IN_PROCESS) -> None:
    default_registry().unregister(kind, name, dist=dist)
