"""Plugin specs: the light, importable description of every plugin.

An entry point targets a module-level spec instance (``ragen_env_sokoban.plugin:SPEC``), never
the heavy implementation. A spec names the plugin, documents it, carries its pydantic config
model and a ``"package.module:attr"`` factory string that is imported only when the plugin is
built. Loading a spec must therefore never import torch, transformers, vllm or ray.

Specs and configs round-trip through JSON and pickle, so a plugin can be rebuilt in another
process (a Ray worker, an HTTP env server) from ``(kind, name, config JSON)``.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_serializer, field_validator, model_validator

#: Entry-point group owned by the core for each plugin kind.
GROUPS: dict[str, str] = {
    "env": "ragen_core.envs",
    "estimator": "ragen_core.advantage_estimators",
    "algorithm": "ragen_core.algorithms",
    "filter": "ragen_core.rollout_filters",
    "diagnostic": "ragen_core.diagnostics",
    "engine": "ragen_core.engines",
    "pool": "ragen_core.env_pools",
}

#: Entry-point group of ``ragen`` subcommands (plugins that add a CLI command).
COMMAND_GROUP = "ragen_core.commands"

Kind = Literal["env", "estimator", "algorithm", "filter", "diagnostic", "engine", "pool"]

NAME_PATTERN = r"^[a-z][a-z0-9-]*$"
NAME_RULE = "lower-case letters, digits and '-', starting with a letter"
""":data:`NAME_PATTERN` in words, for the errors that refuse a name."""


def normalize_name(name: str) -> str:
    """User-facing plugin names are case-insensitive and treat ``_`` like ``-``."""
    return name.strip().lower().replace("_", "-")


def normalize_choice(value: str) -> str:
    """A plugin choice (``name`` or ``dist:name``) in the form the registry resolves it to: what
    a run's config.yaml records, whatever spelling was typed (``GRPO``, ``snr_topp``)."""
    dist, sep, name = value.partition(":")
    return f"{normalize_name(dist)}:{normalize_name(name)}" if sep else normalize_name(value)


C = TypeVar("C", bound="PluginConfig")


def with_overrides(config_class: type[C], config: C | Mapping[str, Any] | None, overrides: dict[str, Any]) -> C:
    """The config a plugin object is built with: ``config_class(**overrides)`` without a config,
    else ``config`` with ``overrides`` on top, validated again (keyword overrides beside a config
    were dropped, or copied in without validation). A mapping, or another plugin's config (a
    filter given the base ``FilterConfig``), is validated as ``config_class``.

    Raises:
        PluginConfigError: a setting breaks the config's rules (one line naming the field and the class).
        ConfigError: ``config`` is neither a config nor a mapping.
    """
    from pydantic import ValidationError

    from ragen_core.errors import ConfigError

    if isinstance(config, config_class) and not overrides:
        return config
    if config is None:
        model, data = config_class, dict(overrides)
    elif isinstance(config, PluginConfig):
        model = type(config) if isinstance(config, config_class) else config_class
        data = {**config.model_dump(exclude_unset=True), **overrides}
    elif isinstance(config, Mapping):
        model, data = config_class, {**config, **overrides}
    else:
        from ragen_core.registry import article

        raise ConfigError(f"expected {article(config_class.__name__)} or a dict of its settings, got {type(config).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _one_line_error(model, exc) from None


def import_string(target: str) -> Any:
    """Import ``"package.module:attr.sub"`` and return the attribute."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ValueError(f"expected 'package.module:attribute', got {target!r}")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


class CheckedModel(BaseModel):
    """Base of RAGEN's pydantic models: a bad value given to the constructor (``RunConfig(steps=0)``,
    ``EnvRef(name=5)``) or assigned to a validated field is refused with a one-line
    :class:`~ragen_core.errors.ConfigError` (a ``ValueError``, as pydantic's is) that names the class
    and the field, and lists the fields for an unknown key: pydantic's own ValidationError spans
    lines and ends in a documentation link. ``model_validate`` is left alone: its callers (the
    registry, ``load_config``) word the error with the path the settings came from."""

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _one_line_error(type(self), exc) from None

    # pydantic calls a model's own __init__ from model_validate and for nested models, where a
    # ConfigError would become a "Value error" losing the field path; this marks it as the base's
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    def __setattr__(self, name: str, value: Any) -> None:
        try:
            super().__setattr__(name, value)
        except ValidationError as exc:
            raise _one_line_error(type(self), exc) from None

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: Any, info: Any) -> Any:
        """A number field refuses ``true``/``false``: pydantic's lax mode took ``group_size=true`` as
        1 and ``lr=true`` as 1.0 (YAML also reads ``on``/``off``/``yes``/``no`` as booleans). Strict
        mode would also refuse ``"8"`` and a YAML list for a tuple, so only booleans are singled out."""
        from pydantic_core import PydanticCustomError

        field = cls.model_fields.get(info.field_name or "")
        at = _bool_for_a_number(field.annotation, value) if field is not None else None
        if at is not None:  # the key or index inside the field, for the message's path (config.error_path)
            raise PydanticCustomError(BOOL_FOR_A_NUMBER, "takes a number, not true/false", {"at": at})
        return value


BOOL_FOR_A_NUMBER = "bool_for_a_number"
"""The pydantic error type of a boolean given for a number; its context's ``at`` holds the keys
and indices from the field to the boolean (``("a",)`` for ``weights.a=true``)."""


def _bool_for_a_number(annotation: Any, value: Any) -> tuple[Any, ...] | None:
    """Where ``value`` holds a boolean that ``annotation`` asks to be an int or a float (no bool
    among its options), as the keys and indices that lead to it (``()``: ``value`` itself), else
    None: directly, or at any depth as an item of a list or tuple, or a value of a dict, whose
    declared type there is a number (``dict[str, float]``, ``list[dict[str, int]]``). A nested
    model is left to its own validator; where several options could hold the value, each must
    refuse it (the path is the first option's)."""
    import types
    import typing
    from collections.abc import Mapping, Sequence

    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    options = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) else (annotation,)
    options = tuple(typing.get_args(o)[0] if typing.get_origin(o) is typing.Annotated else o for o in options)
    if bool in options or Any in options:
        return None
    if isinstance(value, bool):
        return () if any(option in (int, float) for option in options) else None
    found: list[tuple[Any, ...] | None] = []
    if isinstance(value, Mapping):
        kinds = [o for o in options if typing.get_origin(o) in (dict, Mapping) and len(typing.get_args(o)) == 2]
        found = [_first_bool(((k, typing.get_args(o)[1], v) for k, v in value.items())) for o in kinds]
    elif isinstance(value, (list, tuple)):
        kinds = [o for o in options if typing.get_origin(o) in (list, tuple, Sequence) and typing.get_args(o)]
        found = [_first_bool(((i, _item_type(o, i), v) for i, v in enumerate(value))) for o in kinds]
    return found[0] if found and all(at is not None for at in found) else None


def _first_bool(items: Any) -> tuple[Any, ...] | None:
    """The path to the first boolean-for-a-number among ``(key, declared type, value)`` items, or None."""
    for key, annotation, value in items:
        at = _bool_for_a_number(annotation, value)
        if at is not None:
            return (key, *at)
    return None


def _item_type(annotation: Any, index: int) -> Any:
    """The declared type of item ``index`` of a list, sequence or tuple annotation (Any past a fixed tuple's end)."""
    import typing

    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is not tuple or (len(args) == 2 and args[1] is Ellipsis):
        return args[0]
    return args[index] if index < len(args) else Any


def _one_line_error(cls: type[BaseModel], exc: ValidationError) -> Exception:
    from ragen_core.errors import ConfigError
    from ragen_core.registry import config_error_from_validation

    errors = exc.errors()
    if errors and errors[0]["type"] == "frozen_instance":  # the value is fine: the object cannot change
        field = ".".join(str(p) for p in errors[0]["loc"])
        made = ConfigError(f"{cls.__name__} cannot be changed once built (setting {field})",
                           [f"build a new one: {cls.__name__}(...), or .model_copy(update={{{field!r}: ...}})"])
    else:
        error = config_error_from_validation(exc, model_cls=cls, show=None)
        kind = type(error) if issubclass(cls, PluginConfig) else ConfigError
        made = kind(f"{cls.__name__}: {error.message}", error.hints)
    made.validation = exc
    return made


class PluginConfig(CheckedModel):
    """Base of every plugin config: typed fields, defaults, attribute docstrings, no extras.

    ``extra="forbid"`` makes a misspelt key an error that names the field path instead of a
    silently ignored setting. An inf or NaN value is refused, as in the run's own sections
    (``algo_config.kl_loss_coef=.nan`` trained with a NaN loss); a plugin that means one sets
    ``allow_inf_nan=True`` in its own ``model_config``.
    """

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True, allow_inf_nan=False)


class PluginSpec(CheckedModel):
    """What the registry knows about one plugin before building it."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    kind: ClassVar[str] = "plugin"

    name: str
    """User-visible name (``sokoban``, ``grpo``, ``snr-topp``); must be in normal form (:data:`NAME_RULE`)."""
    summary: str = ""
    """One line shown by ``ragen plugins``."""
    config_model: type[PluginConfig] = PluginConfig
    """Pydantic model of the plugin's settings."""
    factory: str
    """``"package.module:attr"`` of the class or function that builds the plugin from its config."""
    api_version: int = 1
    """The core ``API_VERSION`` this plugin was written against."""
    aliases: tuple[str, ...] = ()
    """Other accepted names (e.g. the reference's config spelling)."""
    presets: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Named config overrides (e.g. the reference's env tags ``CoordSokoban``)."""

    config_base: ClassVar[str | None] = None
    """``"module:Class"`` every config model of this kind must subclass (and the default one):
    the trainer reads that class's fields (an algorithm's ``estimator``, a filter's
    ``empty_stop_steps``). None: any :class:`PluginConfig`."""
    availability: str | None = None
    """``"package.module:function"`` that says whether this machine can run the plugin with a
    config: called as ``function(config)`` before anything is built (``ragen run`` checks the env,
    the engine and the env pool; ``ragen env play`` the env), it raises a
    :class:`~ragen_core.errors.RagenError` naming what to install or configure (a missing toolchain
    or package, no server URL, a cluster address that does not answer). It may return a list of
    one-sentence warnings about settings that run but probably do not do what was meant (a
    training file named as a test split); ``ragen run`` and ``ragen eval`` print them. It must be
    cheap and import nothing heavy. None: always available."""

    def check_available(self, config: PluginConfig) -> list[str]:
        """Run the :attr:`availability` check on a validated config; the warnings it returned (none
        when there is no check or it returned None)."""
        if self.availability is None:
            return []
        found = import_string(self.availability)(config)
        return [str(w) for w in found] if found else []

    @field_validator("name")
    @classmethod
    def _name_in_normal_form(cls, value: str) -> str:
        if not re.fullmatch(NAME_PATTERN, value):  # in words: a regex (the Field pattern's error) tells a user little
            from ragen_core.registry import normal_form

            raise ValueError(f"a plugin name is {NAME_RULE}, e.g. {normal_form(value)!r}")  # "(got ...)" follows
        return value

    @model_validator(mode="before")
    @classmethod
    def _default_config_model(cls, data: Any) -> Any:
        if isinstance(data, dict) and "config_model" not in data and cls.config_base is not None:
            data = {**data, "config_model": cls.config_base}
        return data

    @field_validator("config_model", mode="before")
    @classmethod
    def _resolve_config_model(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = import_string(value)
            except (ImportError, AttributeError, ValueError) as exc:  # a ValueError: not 'module:attr'
                raise ValueError(f"cannot be imported: {type(exc).__name__}: {exc}") from None
        return value

    @field_validator("config_model")
    @classmethod
    def _check_config_base(cls, value: Any) -> Any:
        if cls.config_base is not None:
            base = import_string(cls.config_base)
            if not (isinstance(value, type) and issubclass(value, base)):
                from ragen_core.registry import article

                raise ValueError(f"{article(cls.kind)}'s config_model must subclass {base.__module__}.{base.__name__} "
                                 "(the trainer reads its fields)")  # pydantic's "(got ...)" follows
        return value

    @field_serializer("config_model")
    def _serialize_config_model(self, value: type[PluginConfig]) -> str:
        return f"{value.__module__}:{value.__qualname__}"

    def make_config(self, values: dict[str, Any] | None = None, preset: str | None = None) -> PluginConfig:
        """Validate ``values`` (over an optional preset) into this plugin's config model."""
        merged: dict[str, Any] = {}
        if preset is not None:
            merged.update(self.presets[preset])
        merged.update(values or {})
        return self.config_model.model_validate(merged)

    def load_factory(self) -> Any:
        """Import the heavy implementation. Only the registry's ``make`` path calls this."""
        return import_string(self.factory)


class Recipe(CheckedModel):
    """A named set of run settings an env ships for a task (``ragen run --env E --recipe NAME``).

    ``config`` is a fragment of the run config, nested as in a YAML file (``{"sampling": {"train":
    {"temperature": 0.6}}}``); it is the lowest layer, under ``--config`` files, flags and dotted
    overrides. It may pick a preset and an algorithm but never the env itself or where the run is
    written.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    summary: str
    """One line: what the recipe trains and what it was measured to do."""
    config: dict[str, Any]
    """Run-config fragment (validated by the trainer's ``RunConfig`` when used)."""
    measured: str = ""
    """Where its measured result is reported (e.g. ``bench/results/learning_bandit.md``)."""

    @field_validator("config")
    @classmethod
    def _no_env_or_output(cls, value: dict[str, Any]) -> dict[str, Any]:
        bad = sorted({"env", "run_dir"} & set(value))
        if bad:
            raise ValueError(f"a recipe may not set {', '.join(bad)} (the env is the recipe's owner; the output folder is the user's)")
        return value


class EnvResources(CheckedModel):
    """What one env instance needs where it runs: a hint for env pools.

    The ``process`` pool sizes its default worker count by ``cpus``; a Ray pool passes these to
    its actors. The local pool ignores them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    cpus: float = Field(default=1.0, gt=0)
    """CPU cores one instance keeps busy while stepping."""
    memory_gb: float | None = Field(default=None, gt=0)
    """Memory of one instance (None = small, not worth reserving)."""
    gpus: float = Field(default=0.0, ge=0)
    """Accelerators (or fractions) one instance needs (e.g. a learned reward model)."""


def _has_setting(model: type[BaseModel], key: str) -> bool:
    """Whether the dotted ``key`` names a field of ``model`` (through nested models, ``X | None`` included)."""
    import typing

    head, _, rest = key.partition(".")
    field = model.model_fields.get(head)
    if field is None:
        return False
    if not rest:
        return True
    kinds = [field.annotation, *typing.get_args(field.annotation)]
    return any(isinstance(k, type) and issubclass(k, BaseModel) and _has_setting(k, rest) for k in kinds)


class EnvSpec(PluginSpec):
    """Spec of an environment plugin (entry-point group ``ragen_core.envs``)."""

    kind: ClassVar[str] = "env"
    config_base: ClassVar[str | None] = "ragen_core.interfaces.env:EnvConfig"
    async_step: bool = False
    """True when ``step`` mostly waits on I/O (a server, a sandbox) and is safe to run in threads:
    the local pool then steps this env's episodes in threads unless its ``threads`` is set."""
    resources: EnvResources = Field(default_factory=EnvResources)
    """Per-instance resource hint read by env pools."""
    multimodal: bool = False
    placement_settings: tuple[str, ...] = ()
    """``env_config`` keys (``a.b`` for a nested one) that choose where or how the env runs without
    changing what the policy sees, e.g. in-process or through a server. Changing them keeps a
    cached warm start and the shipped policy's measurement. The start and restart settings of a
    :class:`~ragen_core.services.ServiceConfig` field count as such always, its ``url`` never (the
    server there may hold other data)."""
    recipes: dict[str, Recipe] = Field(default_factory=dict)
    """Named run settings for this env (``ragen run --recipe NAME``), e.g. one measured to learn."""

    @model_validator(mode="after")
    def _placement_keys_exist(self) -> EnvSpec:
        for key in self.placement_settings:  # a typo would silently do nothing
            if not _has_setting(self.config_model, key):
                fields = ", ".join(self.config_model.model_fields)
                raise ValueError(f"placement_settings names {key!r}, which is no key of {self.config_model.__name__} (fields: {fields})")
        return self

    def recipe(self, name: str) -> dict[str, Any]:
        """The run-config fragment of recipe ``name`` with ``env`` set, ready as a config base.

        Raises:
            ConfigError: with the known recipe names, when this env has no recipe ``name``.
        """
        import copy

        from ragen_core.errors import ConfigError

        if name not in self.recipes:
            known = ", ".join(self.recipes) or "none"
            raise ConfigError(f"env {self.name!r} has no recipe {name!r} (known: {known})", [f"see 'ragen plugins show env {self.name}'"])
        return {"env": self.name, **copy.deepcopy(self.recipes[name].config)}


class EstimatorSpec(PluginSpec):
    """Spec of an advantage estimator (group ``ragen_core.advantage_estimators``)."""

    kind: ClassVar[str] = "estimator"
    needs_critic: bool = False
    group_baseline: str | None = None
    """For estimators whose baseline comes from the other episodes of a group (GRPO, RLOO, ...):
    what an episode's advantage becomes when its group holds only that episode, e.g. ``"the raw
    episode score S"``. ``ragen run`` warns with it when ``rollout.group_size=1``. None: the
    estimator does not use groups."""


class AlgorithmSpec(PluginSpec):
    """Spec of an algorithm bundle: estimator plus policy-loss settings (``ragen_core.algorithms``)."""

    kind: ClassVar[str] = "algorithm"
    config_base: ClassVar[str | None] = "ragen_core.interfaces.algorithm:AlgorithmConfig"
    needs_critic: bool = False


class FilterSpec(PluginSpec):
    """Spec of a rollout filter (group ``ragen_core.rollout_filters``)."""

    kind: ClassVar[str] = "filter"
    config_base: ClassVar[str | None] = "ragen_core.interfaces.rollout_filter:FilterConfig"


class DiagnosticSpec(PluginSpec):
    """Spec of a diagnostic that observes training through lifecycle hooks."""

    kind: ClassVar[str] = "diagnostic"


class EngineSpec(PluginSpec):
    """Spec of a rollout engine (HF transformers generate, vLLM, ...)."""

    kind: ClassVar[str] = "engine"


class PoolSpec(PluginSpec):
    """Spec of an env pool: where env instances run (group ``ragen_core.env_pools``).

    The factory is called as ``factory(config, env=EnvRef)`` (see
    :class:`~ragen_core.interfaces.env_pool.EnvPool`).
    """

    kind: ClassVar[str] = "pool"


SPEC_CLASSES: dict[str, type[PluginSpec]] = {
    "env": EnvSpec,
    "estimator": EstimatorSpec,
    "algorithm": AlgorithmSpec,
    "filter": FilterSpec,
    "diagnostic": DiagnosticSpec,
    "engine": EngineSpec,
    "pool": PoolSpec,
}
