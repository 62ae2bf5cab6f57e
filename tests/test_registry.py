"""Registry behaviour with throwaway dist-info folders (no installs): every failure path."""

from __future__ import annotations

import importlib
import sys
from importlib.metadata import entry_points

import pytest

from ragen_core import EnvSpec, registry
from ragen_core.errors import (
    DuplicatePluginError,
    IncompatiblePluginError,
    PluginConfigError,
    PluginLoadError,
    PluginNotFoundError,
)
from ragen_core.registry import Registry
from ragen_core.testing import fake_entry_points

GROUP = "ragen_core.envs"

SPEC_MODULE = '''
from ragen_core import EnvSpec, EnvConfig

class Cfg(EnvConfig):
    size: int = 3
    """Grid size."""

SPEC = EnvSpec(name="{name}", summary="test env", config_model=Cfg, factory="{mod}:make")

def make(config):
    from ragen_core.interfaces.env import Env

    class Built(Env):  # the registry checks that an env factory builds an Env
        reset = step = render = instruction = None

        def __eq__(self, other):
            return ("built", self.config.size) == other

    return Built(config)
'''


def _spec_module(name: str, mod: str) -> str:
    return SPEC_MODULE.format(name=name, mod=mod)


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """A registry that sees only the fake dists written under tmp_path."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def source(group):
        return [ep for ep in entry_points(group=group) if ep.dist is not None and str(tmp_path) in str(ep.dist.locate_file(""))]

    yield tmp_path, Registry(source=source)
    for mod in [m for m in sys.modules if m.startswith("fakeplug")]:
        del sys.modules[mod]
    importlib.invalidate_caches()


def _add(tmp_path, dist, name, mod, *, requires=(), value=None, source=True):
    modules = {f"{mod.replace('.', '/')}.py": _spec_module(name, mod)} if source else {}
    fake_entry_points(tmp_path, dist, {GROUP: {name: value or f"{mod}:SPEC"}}, requires=requires, modules=modules, add_to_path=False)
    importlib.invalidate_caches()


def test_discovery_reads_metadata_without_importing(sandbox):
    tmp, reg = sandbox
    _add(tmp, "fake-grid", "grid", "fakeplug_grid")
    assert reg.names("env") == ["grid"]
    assert "fakeplug_grid" not in sys.modules
    entry = reg.find("env", "grid")
    assert (entry.dist_name, entry.dist_version, entry.value) == ("fake-grid", "0.0.1", "fakeplug_grid:SPEC")


def test_load_builds_from_config(sandbox):
    tmp, reg = sandbox
    _add(tmp, "fake-grid", "grid", "fakeplug_grid")
    assert reg.make("env", "grid", {"size": 5}) == ("built", 5)
    assert reg.make("env", "GRID") == ("built", 3)  # names are case-insensitive


def test_not_found_suggests_close_name(sandbox):
    tmp, reg = sandbox
    _add(tmp, "fake-sokoban", "sokoban", "fakeplug_sok")
    with pytest.raises(PluginNotFoundError) as err:
        reg.get_spec("env", "sokobn")
    text = str(err.value)
    assert text.splitlines()[0] == "no env named 'sokobn' (entry-point group ragen_core.envs)"
    assert "hint: did you mean 'sokoban'?" in text
    assert "sokoban (fake-sokoban 0.0.1)" in text


def test_broken_import_names_dist_version_and_missing_module(sandbox):
    tmp, reg = sandbox
    fake_entry_points(
        tmp, "fake-broken", {GROUP: {"broken": "fakeplug_broken:SPEC"}}, version="2.3.4",
        modules={"fakeplug_broken.py": "import selenium_not_installed_xyz\n"}, add_to_path=False,
    )
    importlib.invalidate_caches()
    with pytest.raises(PluginLoadError) as err:
        reg.get_spec("env", "broken")
    first, *hints = str(err.value).splitlines()
    assert "env 'broken' from fake-broken 2.3.4 failed to import" in first
    assert "ModuleNotFoundError" in first
    assert hints and hints[0].startswith("hint: pip install selenium_not_installed_xyz")


@pytest.mark.parametrize("model", ["EnvSpec(name='badspec', summary=3, factory='x:y')",  # ragen's own model: a ConfigError
                                   "Plain(summary=3)"])  # a plain pydantic model: its ValidationError
def test_a_spec_failing_validation_as_its_module_loads_is_named_as_invalid_not_unimportable(sandbox, model):
    tmp, reg = sandbox
    source = ("from pydantic import BaseModel\nfrom ragen_core import EnvSpec\n"
              f"class Plain(BaseModel):\n    summary: str\nSPEC = {model}\n")
    fake_entry_points(tmp, "fake-badspec", {GROUP: {"badspec": "fakeplug_badspec:SPEC"}}, version="1.2.0",
                      modules={"fakeplug_badspec.py": source}, add_to_path=False)
    importlib.invalidate_caches()
    with pytest.raises(PluginLoadError) as err:
        reg.get_spec("env", "badspec")
    first, *hints = str(err.value).splitlines()
    title, says = model.partition("(")[0], "Input should be a valid string"
    assert first == f"env 'badspec' from fake-badspec 1.2.0 fails validation as module fakeplug_badspec loads: {title}.summary: {says} (got 3)"
    assert hints == [f"hint: fix {title}(...) in fakeplug_badspec, or upgrade fake-badspec; meanwhile RAGEN_DISABLE_PLUGINS=fake-badspec hides it"]


def test_duplicate_names_need_dist_qualification(sandbox):
    tmp, reg = sandbox
    _add(tmp, "fake-one", "grid", "fakeplug_one")
    _add(tmp, "fake-two", "grid", "fakeplug_two")
    with pytest.raises(DuplicatePluginError) as err:
        reg.get_spec("env", "grid")
    text = str(err.value)
    assert "env 'grid' is provided by 2 distributions" in text
    assert "fake-one 0.0.1" in text and "fake-two 0.0.1" in text
    assert "hint: select one with 'fake-one:grid'" in text
    assert reg.get_spec("env", "fake-two:grid").factory == "fakeplug_two:make"


def test_identical_duplicates_are_merged():
    class Twice:
        def __init__(self, inner):
            self.inner = inner

    ep = next(iter(entry_points(group="ragen_core.engines")), None)
    assert ep is not None, "ragen-core's own engine entry point (hf) is missing: reinstall it (pip install -e .)"
    reg = Registry(source=lambda group: [ep, ep] if group == "ragen_core.engines" else [])
    assert len(reg.entries("engine")) == 1


def test_disable_plugins_env_var(sandbox, monkeypatch):
    tmp, reg = sandbox
    _add(tmp, "fake-one", "grid", "fakeplug_one")
    _add(tmp, "fake-two", "grid", "fakeplug_two")
    monkeypatch.setenv("RAGEN_DISABLE_PLUGINS", "fake-two")
    assert reg.get_spec("env", "grid").factory == "fakeplug_one:make"


def test_a_hidden_plugin_names_the_variable_that_hides_it(sandbox, monkeypatch):
    """A plugin hidden by RAGEN_LOAD_PLUGINS was said to be disabled by 'RAGEN_DISABLE_PLUGINS/RAGEN_LOAD_PLUGINS',
    and 'plugins check' blamed RAGEN_DISABLE_PLUGINS (helper-80)."""
    tmp, reg = sandbox
    _add(tmp, "fake-one", "grid", "fakeplug_one")
    monkeypatch.setenv("RAGEN_LOAD_PLUGINS", "something-else")
    with pytest.raises(PluginNotFoundError) as err:
        reg.get_spec("env", "grid")
    assert err.value.message.endswith("is hidden by RAGEN_LOAD_PLUGINS")
    assert err.value.hints == ["add 'grid' or 'fake-one' to RAGEN_LOAD_PLUGINS, or unset it to enable it"]
    monkeypatch.delenv("RAGEN_LOAD_PLUGINS")
    monkeypatch.setenv("RAGEN_DISABLE_PLUGINS", "grid")
    with pytest.raises(PluginNotFoundError) as err:
        reg.get_spec("env", "grid")
    assert err.value.message.endswith("is hidden by RAGEN_DISABLE_PLUGINS")
    assert err.value.hints == ["remove it from RAGEN_DISABLE_PLUGINS to enable it"]


def test_incompatible_core_requirement_is_refused_before_import(sandbox):
    tmp, reg = sandbox
    _add(tmp, "fake-old", "old", "fakeplug_old", requires=["ragen-core<0.1"])
    with pytest.raises(IncompatiblePluginError) as err:
        reg.get_spec("env", "old")
    text = str(err.value)
    assert "fake-old 0.0.1 requires ragen-core<0.1; installed ragen-core is" in text
    assert "hint: upgrade fake-old" in text
    assert "fakeplug_old" not in sys.modules


def test_api_version_mismatch(sandbox):
    tmp, reg = sandbox
    src = _spec_module("future", "fakeplug_future").replace('factory="fakeplug_future:make")', 'factory="fakeplug_future:make", api_version=99)')
    fake_entry_points(tmp, "fake-future", {GROUP: {"future": "fakeplug_future:SPEC"}}, modules={"fakeplug_future.py": src}, add_to_path=False)
    importlib.invalidate_caches()
    with pytest.raises(IncompatiblePluginError, match="targets plugin API 99"):
        reg.get_spec("env", "future")


def test_wrong_spec_type_and_name_mismatch(sandbox):
    tmp, reg = sandbox
    fake_entry_points(tmp, "fake-bad", {GROUP: {"bad": "fakeplug_bad:SPEC"}}, modules={"fakeplug_bad.py": "SPEC = 42\n"}, add_to_path=False)
    _add(tmp, "fake-mis", "misnamed", "fakeplug_mis", value="fakeplug_mis:SPEC")
    (tmp / "fakeplug_mis.py").write_text(_spec_module("other", "fakeplug_mis"))
    importlib.invalidate_caches()
    with pytest.raises(PluginLoadError, match="is an int, expected an EnvSpec"):
        reg.get_spec("env", "bad")
    with pytest.raises(PluginLoadError, match="differs from spec name 'other'"):
        reg.get_spec("env", "misnamed")


def test_bad_config_names_the_field_path(sandbox):
    tmp, reg = sandbox
    _add(tmp, "fake-grid", "grid", "fakeplug_grid")
    with pytest.raises(PluginConfigError) as err:
        reg.make("env", "grid", {"size": "large"})
    assert str(err.value).startswith("invalid config: env.grid.size: Input should be a valid integer")
    with pytest.raises(PluginConfigError) as err:
        reg.make("env", "grid", {"sise": 3})
    assert "env.grid.sise: unknown key" in str(err.value)
    with pytest.raises(PluginConfigError, match="has no preset 'Huge'"):
        reg.make("env", "grid", preset="Huge")


def test_unrelated_broken_plugin_does_not_affect_loading(sandbox):
    tmp, reg = sandbox
    fake_entry_points(tmp, "fake-broken", {GROUP: {"broken": "fakeplug_broken2:SPEC"}},
                      modules={"fakeplug_broken2.py": "raise RuntimeError('boom')\n"}, add_to_path=False)
    _add(tmp, "fake-grid", "grid", "fakeplug_grid")
    assert reg.make("env", "grid") == ("built", 3)
    assert "fakeplug_broken2" not in sys.modules
    assert reg.names("env") == ["broken", "grid"]


def test_in_process_registration_and_duplicate_check(sandbox):
    tmp, reg = sandbox
    _add(tmp, "fake-grid", "grid", "fakeplug_grid")
    spec = EnvSpec(name="grid", summary="mine", factory="builtins:dict")
    reg.register(spec)
    with pytest.raises(DuplicatePluginError):
        reg.get_spec("env", "grid")
    assert reg.get_spec("env", "<in-process>:grid") is spec
    reg.unregister("env", "grid")
    assert reg.get_spec("env", "grid").summary == "test env"


def test_module_api_mirrors_registry():
    spec = EnvSpec(name="tmp-module-api", summary="x", factory="builtins:dict")
    registry.register(spec)
    try:
        assert "tmp-module-api" in registry.names("env")
        assert registry.get_spec("env", "tmp_module_api") is spec  # '_' normalises to '-'
    finally:
        registry.unregister("env", "tmp-module-api")
    assert "tmp-module-api" not in registry.names("env")


def test_an_entry_point_under_a_misspelt_group_is_named_not_ignored(sandbox, capsys):
    """``[project.entry-points."ragen_core.env"]`` (no s): the plugin was simply never found, and the
    not-found error hinted at installing a package that was installed."""
    from ragen_core.cli.main import main
    from ragen_core.testing import fake_entry_points

    tmp, reg = sandbox
    fake_entry_points(tmp, "fake-wronggroup", {"ragen_core.env": {"wronggroup": "fakeplug_wg:SPEC"}}, add_to_path=False)
    importlib.invalidate_caches()
    strays = [s for s in registry.stray_entry_points() if s.dist_name == "fake-wronggroup"]
    assert [(s.group, s.name, s.meant) for s in strays] == [("ragen_core.env", "wronggroup", "ragen_core.envs")]
    with pytest.raises(PluginNotFoundError) as err:
        reg.get_spec("env", "wronggroup")
    assert err.value.hints == ["fake-wronggroup declares 'wronggroup' under entry-point group 'ragen_core.env', which RAGEN does not "
                               "read: rename the group to 'ragen_core.envs' in its pyproject.toml and reinstall it (pip install -e ...)"]
    capsys.readouterr()
    assert main(["plugins", "check"]) == 1
    row = next(line for line in capsys.readouterr().out.splitlines() if "wronggroup" in line)
    assert "FAILED" in row and "entry-point group 'ragen_core.env' is not one RAGEN reads: did you mean 'ragen_core.envs'?" in row


def test_a_typo_in_a_spec_factory_or_preset_is_blamed_on_the_spec(sandbox):
    """A factory string naming no module got "reinstall the distribution"; a preset key the config
    does not have was reported as the user's own setting (env_config.hgih)."""
    tmp, reg = sandbox
    _add(tmp, "fake-typos", "typos", "fakeplug_typos")
    spec = reg.get_spec("env", "typos")
    object.__setattr__(spec, "factory", "fakeplug_typos_x:make")
    with pytest.raises(PluginLoadError) as err:
        reg.make("env", "typos")
    assert err.value.hints == ["fix the factory string of fake-typos's spec ('fakeplug_typos_x:make'): 'ragen plugins check' names "
                               "what it lacks"]
    object.__setattr__(spec, "factory", "fakeplug_typos:mkae")
    with pytest.raises(PluginLoadError) as err:
        reg.make("env", "typos")
    assert err.value.hints[0].startswith("fix the factory string of fake-typos's spec")
    object.__setattr__(spec, "presets", {"Short": {"szie": 4}})
    with pytest.raises(PluginConfigError) as err:
        reg.make_config("env", "typos", {"size": 2}, preset="Short", where="env_config")
    assert err.value.message == ("env 'typos' from fake-typos 0.0.1: its preset 'Short' is broken: presets['Short'].szie: unknown key "
                                 "(did you mean 'size'?)")
    assert err.value.hints == ["the preset is the plugin's own: report it to fake-typos, and run without it meanwhile"]


def test_settings_that_are_not_a_mapping_are_the_callers_error():
    """make_config("env", "bandit", [1, 2]) said the plugin's validator raised TypeError, "report it to ragen-env-bandit"."""
    name = EnvSpec(name="test-map-env", summary="x", factory="ragen_core.testing.toy_env:CorridorEnv",
                   config_model="ragen_core.testing.toy_env:CorridorConfig")
    registry.register(name)
    try:
        for bad in ([1, 2], "abc"):
            with pytest.raises(PluginConfigError) as err:
                registry.make_config("env", "test-map-env", bad)
            assert err.value.message == f"env 'test-map-env' settings must be a mapping of setting names to values, got a {type(bad).__name__}"
            assert "report it" not in str(err.value)
    finally:
        registry.unregister("env", "test-map-env")


def test_a_spec_name_out_of_form_is_refused_in_words_not_as_the_regex(sandbox):
    """A spec named 'Walk_Bad' failed to load with "String should match pattern '^[a-z][a-z0-9-]*$'"
    (helper-80's walk): the error says which names are allowed, and the name in that form."""
    tmp, reg = sandbox
    _add(tmp, "fake-walk", "walk-bad", "fakeplug_walkbad")
    (tmp / "fakeplug_walkbad.py").write_text(_spec_module("Walk_Bad", "fakeplug_walkbad"))
    importlib.invalidate_caches()
    with pytest.raises(PluginLoadError) as err:
        reg.get_spec("env", "walk-bad")
    assert "name: a plugin name is lower-case letters, digits and '-', starting with a letter, e.g. 'walk-bad' (got 'Walk_Bad')" \
        in err.value.message
    assert "pattern" not in err.value.message and "^[" not in err.value.message
    with pytest.raises(ValueError, match=r"^EnvSpec: invalid config: name: a plugin name is lower-case .*, e\.g\. 'plugin-9lives' \(got '9lives'\)$"):
        EnvSpec(name="9lives", factory="x:y")
