"""A Python caller's mistake is a one-line RagenError naming what to fix, as on the command line.

Each case raised a bare KeyError, ValueError, TypeError, AttributeError or a multi-line pydantic
ValidationError (session 23's walk of the Python API).
"""

from __future__ import annotations

import pytest

from ragen_core import registry
from ragen_core.errors import ConfigError, EnvError, PluginConfigError, PluginNotFoundError, RagenError, UsageError
from ragen_core.interfaces.env_pool import EnvRef, ResetRequest, StepRequest
from ragen_core.rollout.env_pool import LocalEnvPool
from ragen_core.testing.run_helpers import register_toy_env
from ragen_core.testing.toy_env import CorridorEnv


def _one_line(exc: BaseException) -> str:
    assert isinstance(exc, RagenError), f"{type(exc).__name__}: {exc}"
    assert exc.message.count("\n") == 0, exc.message
    return str(exc)


def test_an_env_factory_that_cannot_be_imported_is_a_config_error():
    pool = LocalEnvPool(EnvRef(name="x", factory="no_such_module_here:Thing"))
    with pytest.raises(ConfigError, match=r"env factory 'no_such_module_here:Thing' cannot be imported: ModuleNotFoundError") as info:
        pool.reset([ResetRequest(0, 1)])
    _one_line(info.value)
    with pytest.raises(ConfigError, match="cannot be imported: AttributeError"):
        EnvRef(name="x", factory="ragen_core.testing.toy_env:NoSuchEnv").build()


def test_requests_check_their_fields():
    with pytest.raises(UsageError, match="ResetRequest.mode takes 'train' or 'val', not 'validation'"):
        ResetRequest(0, 1, mode="validation")  # an env would have reset it in the training split
    with pytest.raises(UsageError, match="ResetRequest.seed takes an int, not str '3'"):
        ResetRequest(0, "3")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="StepRequest.actions takes a sequence of action strings"):
        StepRequest(0, "Right")  # type: ignore[arg-type]  # five actions R, i, g, h, t
    import numpy as np

    assert ResetRequest(np.int64(2), np.int64(7)).seed == 7  # numpy integers are integers


def test_a_seed_beyond_64_bits_is_a_usage_error():
    env = CorridorEnv()
    with pytest.raises(UsageError, match=r"seed 1180591620717411303424 is not an unsigned 64-bit int") as info:
        env.reset(2**70)
    assert isinstance(info.value, ValueError)  # still what a caller catching ValueError expects



@pytest.mark.parametrize("key", [1.7, True, None, b"map"])
def test_a_random_generator_key_is_an_int_or_a_str(key):
    """make_rng(1.7) was make_rng(1) and make_rng(True) make_rng(1), in silence (helper-63's walk)."""
    import numpy as np

    from ragen_core.seeding import derive_seed, make_py_rng, make_rng

    for make in (make_rng, make_py_rng, derive_seed):
        with pytest.raises(UsageError, match=rf"a random-generator key must be an int or a str, not {type(key).__name__} "):
            make(3, key)
    assert make_rng(3, np.int64(5)).integers(2**62) == make_rng(3, 5).integers(2**62)  # numpy integers are integers
    assert make_rng(3, "map").integers(2**62) != make_rng(3, "slip").integers(2**62)

def test_numpy_integers_are_ints_where_ints_are_taken():
    """np.array(3) (a 0-d array, what np.asarray gives) was refused as a seed, a member and a key,
    and np.int64 seeds reached the env as numpy values; np.int64 as an engine's base seed raised a
    bare TypeError."""
    import numpy as np

    from ragen_core.interfaces.engine import per_prompt_seeds
    from ragen_core.seeding import is_int, make_rng

    assert all(is_int(v) for v in (3, np.int64(3), np.uint8(3), np.array(3), np.array(3, dtype=np.uint64)))
    assert not any(is_int(v) for v in (True, np.bool_(True), np.array(True), np.array([3]), np.array(3.0), 3.0))
    assert make_rng(3, np.array(5)).integers(2**62) == make_rng(3, 5).integers(2**62)
    request = ResetRequest(np.array(2), np.int64(7), member=np.array(1))
    assert (request.episode_id, request.seed, request.member) == (2, 7, 1)
    assert {type(request.episode_id), type(request.seed), type(request.member)} == {int}
    assert type(StepRequest(np.int64(2)).episode_id) is int
    env = CorridorEnv()
    assert env.reset(np.array(4), member=np.array(1)) == CorridorEnv().reset(4, member=1)
    assert type(env.seed) is int  # the env stores and reports the seed it was given
    with pytest.raises(UsageError, match=r"CorridorEnv.reset: seed takes an int, not ndarray array\(\[4\]\)"):
        env.reset(np.array([4]))
    assert per_prompt_seeds(np.int64(7), 2) == per_prompt_seeds(7, 2)


@pytest.mark.parametrize("seeds, said", [([1.7, 2], r"seeds\[0\] takes an int, not float 1\.7"),
                                         ([1, True], r"seeds\[1\] takes an int, not bool True"),
                                         (["12"], r"seeds\[0\] takes an int, not str '12'"),
                                         ([2**64], r"seeds\[0\] 18446744073709551616 is not an unsigned 64-bit int"),
                                         (1.5, r"seeds take an int, a sequence of ints \(one per prompt\) or None, not float 1\.5")])
def test_per_prompt_seeds_refuse_what_is_no_integer_seed(seeds, said):
    """[1.7] was read as seed 1 (int()), and True as 1: a seed that is no int is refused in one line, as elsewhere."""
    import numpy as np

    from ragen_core.interfaces.engine import per_prompt_seeds

    with pytest.raises(UsageError, match=rf"^generate's {said}"):
        per_prompt_seeds(seeds, 1 if isinstance(seeds, list) and len(seeds) == 1 else 2)
    assert per_prompt_seeds([np.int64(3), np.array(4)], 2) == [3, 4]


def test_registry_calls_name_what_they_take():
    with pytest.raises(UsageError, match=r"cannot register an object: register takes a plugin spec \(EnvSpec, "):
        registry.register(object())  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="an env name is a non-empty string, not None"):
        registry.make_env(None)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="an env name is a non-empty string, not ''"):
        registry.find("env", "")
    name = register_toy_env()
    with pytest.raises(PluginNotFoundError) as info:
        registry.find("env", f"ragen-env-nope:{name}")
    hints = info.value.hints
    assert hints == [f"env {name!r} comes from <in-process>, not 'ragen-env-nope': write {name!r} or '<in-process>:{name}'"], hints


def test_keyword_settings_of_a_plugin_object_fail_in_one_line_naming_the_class():
    with pytest.raises(PluginConfigError) as info:
        LocalEnvPool(EnvRef(name="x"), thread=4)
    text = _one_line(info.value)
    assert text.startswith("LocalPoolConfig: invalid config: thread: unknown key (did you mean 'threads'?)"), text
    assert "LocalPoolConfig takes: step_timeout_s, reset_timeout_s, threads" in text
    with pytest.raises(PluginConfigError, match=r"CorridorConfig: invalid config: max_turns: .*\(got 0\)"):
        CorridorEnv({"max_turns": 0})
    assert CorridorEnv({"max_turns": 3}).config.max_turns == 3  # a dict of settings is a config
    with pytest.raises(ConfigError, match="expected a CorridorConfig or a dict of its settings, got list"):
        CorridorEnv([("max_turns", 3)])  # type: ignore[arg-type]


def test_trainer_takes_a_dict_of_settings_and_refuses_anything_else(tmp_path):
    from ragen_core.trainer import Trainer

    with pytest.raises(ConfigError, match=r"stpes: unknown key \(did you mean 'steps'\?\)"):
        Trainer({"env": register_toy_env(), "stpes": 3, "run_dir": str(tmp_path / "a")})
    with pytest.raises(UsageError, match="Trainer takes a RunConfig or a dict of its settings, not str"):
        Trainer("bandit")  # type: ignore[arg-type]
    assert not (tmp_path / "a").exists(), "a refused config must leave no run folder"
    with Trainer({"env": register_toy_env(), "steps": 3, "run_dir": str(tmp_path / "b"), "model": "tiny"}) as trainer:
        assert trainer.config.steps == 3 and trainer.config.env == register_toy_env()


def test_env_step_before_reset_is_an_env_error_in_every_shipped_env():
    from ragen_core.distributions import ALL_DISTRIBUTIONS

    shipped = [e.name for e in registry.entries("env") if e.dist_name in ALL_DISTRIBUTIONS]
    assert {"bandit", "sudoku", "sokoban"} <= set(shipped), shipped
    for name in shipped:
        if name in ("webshop", "lean", "searchqa", "deepcoder"):
            continue  # these need data or a service to build at all (their own tests cover reset order)
        env = registry.make_env(name)
        with pytest.raises(EnvError, match="reset"):
            env.step("1")


def test_step_actions_may_be_any_iterable_of_strings():
    """A generator was used up by the type check and the step executed nothing (empty observation)."""
    assert StepRequest(0, (a for a in ["Right", "Left"])).actions == ("Right", "Left")
    assert StepRequest(0, ["Right"]).actions == ("Right",)
    with pytest.raises(UsageError, match="StepRequest.actions takes a sequence of action strings, not None"):
        StepRequest(0, None)  # type: ignore[arg-type]


def test_a_seed_out_of_range_is_the_callers_error_not_the_envs():
    """ResetRequest(0, 2**70) was accepted, and the env was blamed: "env 'x' failed to reset: ..."."""
    with pytest.raises(UsageError, match=r"ResetRequest.seed 1180591620717411303424 is not an unsigned 64-bit int"):
        ResetRequest(0, 2**70)
    assert ResetRequest(0, 2**63 - 1 + 7).seed == 2**63 + 6  # a base seed near the top, plus its group: what make_rng takes


def test_pools_take_an_envref_and_the_registry_asks_for_one():
    from ragen_core.rollout.process_pool import ProcessEnvPool

    for pool_class in (LocalEnvPool, ProcessEnvPool):
        with pytest.raises(UsageError, match=f"{pool_class.__name__} takes the env as an EnvRef, not str 'sokoban'"):
            pool_class("sokoban")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"registry.make\('pool', 'local', \.\.\.\) needs env=EnvRef\(\.\.\.\)") as info:
        registry.make("pool", "local")  # it was "pool 'local' raised in its factory ... hint: fix the plugin"
    assert info.value.hints == ["registry.make('pool', 'local', env=EnvRef(name='sokoban'))"]


def test_wrong_types_to_the_registry_are_usage_errors():
    with pytest.raises(UsageError, match="a plugin kind is a string, not NoneType None"):
        registry.names(None)  # type: ignore[arg-type]
    name = register_toy_env()
    with pytest.raises(UsageError, match="a preset is named by a string, not int 5"):
        registry.make_env(name, preset=5)  # type: ignore[arg-type]


def test_a_dotted_key_in_a_dict_of_settings_is_told_to_nest():
    """The hint repeated the key: "rollout.group_size: unknown key (did you mean 'rollout.group_size'?)"."""
    from ragen_core.trainer import Trainer

    with pytest.raises(ConfigError) as info:
        Trainer({"env": register_toy_env(), "rollout.group_size": 2})
    assert info.value.message == ("invalid config: rollout.group_size: unknown key (in a mapping, nest it: "
                                  "{'rollout': {'group_size': ...}}; dotted keys are for command-line overrides)")


def test_models_built_directly_refuse_bad_values_in_one_line():
    """RunConfig(steps=0), EnvRef(name=5), EnvSpec(name="X"), an assignment, all raised pydantic's
    multi-line ValidationError; PoolSpec(config_model="nope.mod:X") a bare ModuleNotFoundError."""
    from ragen_core.specs import EnvSpec, PoolSpec
    from ragen_core.trainer.config import RunConfig

    cases = [
        (lambda: RunConfig(steps=0), ConfigError, r"^RunConfig: invalid config: steps: .* \(got 0\)$"),
        (lambda: EnvRef(name=5), ConfigError, r"^EnvRef: invalid config: name: .* \(got 5\)$"),
        (lambda: EnvSpec(name="X", factory="a:b"), ConfigError, r"^EnvSpec: invalid config: name: .* \(got 'X'\)$"),
        (lambda: PoolSpec(name="p", factory="a:b", config_model="nope.mod:X"), ConfigError,
         r"^PoolSpec: invalid config: config_model: cannot be imported: ModuleNotFoundError: No module named 'nope'"),
        (lambda: setattr(RunConfig(), "steps", -1), ConfigError, r"^RunConfig: invalid config: steps: .* \(got -1\)$"),
        (lambda: registry.get_spec("env", register_toy_env()).config_model(max_turns=-1), PluginConfigError,
         r"^CorridorConfig: invalid config: max_turns: .* \(got -1\)$"),
    ]
    for build, kind, pattern in cases:
        with pytest.raises(kind, match=pattern) as info:
            build()
        assert isinstance(info.value, ValueError)  # as pydantic's error is: `except ValueError` still catches it
        _one_line(info.value)
    with pytest.raises(ConfigError, match=r"^RunConfig: invalid config: stepz: unknown key \(did you mean 'steps'\?\)") as info:
        RunConfig(stepz=3)
    assert info.value.hints and info.value.hints[0].startswith("RunConfig takes: env, ")
    # a nested section keeps its whole path (pydantic calls a model's own __init__ for nested
    # models unless told it is the base's: the error would have been "rollout: Value error, ...")
    nested = r"^RunConfig: invalid config: rollout\.max_turn: unknown key \(did you mean 'rollout\.max_turns'\?\)"
    with pytest.raises(ConfigError, match=nested) as info:
        RunConfig(rollout={"max_turn": 3})
    assert info.value.hints == []  # "RunConfig takes: env, ..." named the top level's fields, not the section's
    with pytest.raises(ConfigError, match=r"^EnvRef cannot be changed once built \(setting name\)\nhint: ") as info:
        EnvRef(name="a").name = "b"  # type: ignore[misc]  # it said "invalid config: name: Instance is frozen (got 'b')"
    assert info.value.hints == ["build a new one: EnvRef(...), or .model_copy(update={'name': ...})"]
    assert RunConfig.model_validate({"steps": 2}).steps == 2


def test_an_env_reset_directly_refuses_arguments_it_would_take_silently():
    """reset("3") seeded another episode than reset(3), reset(3.5) and reset(True) ran, and
    reset(mode="test") reset the training split: every env took them (only the pools' requests
    were checked). The check wraps every subclass's reset, a third party's too."""
    env = CorridorEnv(length=3)
    assert env.reset(3) == CorridorEnv(length=3).reset(3)
    for args, kwargs, pattern in [
        (("3",), {}, r"^CorridorEnv\.reset: seed takes an int, not str '3'$"),
        ((3.5,), {}, r"^CorridorEnv\.reset: seed takes an int, not float 3\.5$"),
        ((True,), {}, r"^CorridorEnv\.reset: seed takes an int, not bool True$"),
        ((2**64,), {}, r"^CorridorEnv\.reset: seed 18446744073709551616 is not an unsigned 64-bit int"),
        ((3,), {"member": -1}, r"^CorridorEnv\.reset: member takes an int >= 0 \(the env's index in its group\), not -1$"),
        ((3,), {"mode": "test"}, r"^CorridorEnv\.reset: mode takes 'train' or 'val', not 'test'$"),
    ]:
        with pytest.raises(UsageError, match=pattern) as info:
            env.reset(*args, **kwargs)
        _one_line(info.value)

    class Subclassed(CorridorEnv):  # an env subclassing another: its own reset is checked too
        def reset(self, seed: int, *, member: int = 0, mode: str = "train") -> str:
            return "sub " + super().reset(seed, member=member, mode=mode)

    assert Subclassed(length=3).reset(3, mode="val").startswith("sub ")
    with pytest.raises(UsageError, match=r"^Subclassed\.reset: mode takes 'train' or 'val', not 'validation'$"):
        Subclassed(length=3).reset(3, mode="validation")
    with pytest.raises(UsageError, match=r"^ResetRequest\.member takes an int >= 0"):
        ResetRequest(0, 3, member=-2)


def test_the_reset_check_reads_arguments_by_the_subclass_own_signature():
    """The check took seed as the first positional argument: a keyword-only seed failed with a
    TypeError, a gym-style reset(seed=None) could not be called without one, and a member or mode
    given by position was not checked."""

    class KeywordSeed(CorridorEnv):
        def reset(self, *, seed: int, member: int = 0, mode: str = "train") -> str:
            return super().reset(seed, member=member, mode=mode)

    class GymStyle(CorridorEnv):
        def reset(self, seed: int | None = None, member: int = 0, mode: str = "train") -> str:  # type: ignore[override]
            return super().reset(7 if seed is None else seed, member=member, mode=mode)

    assert KeywordSeed(length=3).reset(seed=3) == CorridorEnv(length=3).reset(3)
    assert GymStyle(length=3).reset() == CorridorEnv(length=3).reset(7)
    with pytest.raises(UsageError, match=r"^GymStyle\.reset: member takes an int >= 0 .* not -1$"):
        GymStyle(length=3).reset(3, -1)
    with pytest.raises(UsageError, match=r"^GymStyle\.reset: mode takes 'train' or 'val', not 'test'$"):
        GymStyle(length=3).reset(3, 0, "test")
    with pytest.raises(TypeError, match="unexpected keyword argument 'sede'"):  # Python's own word on a call that does not fit
        CorridorEnv(length=3).reset(sede=3)


def test_placement_settings_must_name_env_config_keys():
    """A typo'd placement key passed `ragen plugins check` and silently did nothing (helper-63's walk)."""
    from pydantic import BaseModel

    from ragen_core.errors import ConfigError
    from ragen_core.specs import EnvSpec
    from ragen_core.testing.toy_env import CorridorConfig

    class Server(BaseModel):
        start_command: str = ""

    class Served(CorridorConfig):
        server: Server | None = None

    with pytest.raises(ConfigError, match=r"placement_settings names 'lenght', which is no key of CorridorConfig \(fields: .*length"):
        EnvSpec(name="typo-placement", config_model=CorridorConfig, factory="ragen_core.testing.toy_env:CorridorEnv",
                placement_settings=("lenght",))
    with pytest.raises(ConfigError, match=r"placement_settings names 'server.port'"):
        EnvSpec(name="typo-placement", config_model=Served, factory="ragen_core.testing.toy_env:CorridorEnv",
                placement_settings=("server.port",))
    ok = EnvSpec(name="good-placement", config_model=Served, factory="ragen_core.testing.toy_env:CorridorEnv",
                 placement_settings=("length", "server.start_command"))
    assert ok.placement_settings == ("length", "server.start_command")
