"""Gymnasium face, YAML/dotted-override config loading, and the core env helpers."""

from __future__ import annotations

import pickle
import re
import warnings
from types import MappingProxyType

import pytest
from pydantic import BaseModel, ConfigDict, Field

from ragen_core import registry
from ragen_core.config import apply_overrides, load_config, parse_override
from ragen_core.errors import ConfigError, UsageError
from ragen_core.testing import check_env
from ragen_core.testing.toy_env import register_toy_env


@pytest.fixture(scope="module")
def toy():
    name = register_toy_env()
    yield name
    registry.unregister("env", name)


def test_toy_env_passes_conformance_except_subprocess_import(toy):
    # the light-import check needs an installed entry point; the toy env is registered in-process
    check_env(toy, skip=("light-import",))
    check_env(toy, preset="Long", skip=("light-import",))


def test_gymnasium_make_text_interface(toy):
    gymnasium = pytest.importorskip("gymnasium", reason="the optional 'gym' extra (pip install ragen-core[gym])")
    import ragen_core.gym as rgym

    assert f"ragen/{toy}" in rgym.register_envs()
    env = gymnasium.make(f"ragen/{toy}", preset="Long")
    obs, info = env.reset(seed=4)
    assert obs == registry.make_env(toy, preset="Long").reset(4)
    assert info["action_names"] == ["Left", "Right"]
    inner = env.unwrapped.inner
    for action in inner.oracle_actions():
        obs, reward, terminated, truncated, info = env.step(action)
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)
    env.reset(seed=4)
    obs_int = env.step(1)  # integer actions index action_names
    assert isinstance(obs_int[0], str)


def test_gymnasium_truncates_at_action_cap(toy):
    gymnasium = pytest.importorskip("gymnasium", reason="the optional 'gym' extra (pip install ragen-core[gym])")
    import ragen_core.gym  # noqa: F401

    env = gymnasium.make(f"ragen/{toy}", max_actions_per_episode=2)
    env.reset(seed=1)
    results = [env.step("Jump") for _ in range(2)]
    assert [r[3] for r in results] == [False, True]


def test_gymnasium_integer_actions_outside_action_names_are_refused(toy):
    gymnasium = pytest.importorskip("gymnasium", reason="the optional 'gym' extra (pip install ragen-core[gym])")
    import ragen_core.gym  # noqa: F401

    env = gymnasium.make(f"ragen/{toy}")
    env.reset(seed=1)
    for action in (-1, 2, True, 1.0):  # -1 took the last action, 2 raised a bare IndexError
        with pytest.raises(UsageError, match=r"Left, Right|an int from 0 to 1"):
            env.step(action)
    assert env.step(1)[2] is False  # an index in range still steps


def test_gymnasium_reset_options_reach_the_env_and_unknown_ones_are_refused(toy):
    """reset(options={"memer": 1}) reset member 0 in silence, and {"member": "2"} or 2.7 became member 2."""
    gymnasium = pytest.importorskip("gymnasium", reason="the optional 'gym' extra (pip install ragen-core[gym])")
    import ragen_core.gym  # noqa: F401

    env = gymnasium.make(f"ragen/{toy}")
    inner = env.unwrapped.inner
    calls = []
    reset = inner.reset
    inner.reset = lambda seed, **kw: calls.append((seed, kw)) or reset(seed, **kw)
    env.reset(seed=4, options={"member": 2, "mode": "val"})
    env.reset(seed=4, options={})
    assert calls == [(4, {"member": 2, "mode": "val"}), (4, {"member": 0, "mode": "train"})]
    for options, message in [({"memer": 1}, "unknown option 'memer' (did you mean 'member'?); options are 'member'"),
                             ({"member": "2"}, "options: member takes an int, not str '2'"),
                             ({"member": 2.7}, "options: member takes an int, not float 2.7"),
                             ({"mode": "test"}, "options: mode takes 'train' or 'val', not 'test'"),
                             ("val", "options takes a dict")]:
        with pytest.raises(UsageError, match=rf"^ragen/{toy} reset.*{re.escape(message)}"):
            env.reset(seed=4, options=options)
    assert len(calls) == 2, "a refused reset must not reach the env"
    env.reset(seed=4, options=MappingProxyType({"member": 1}))  # any mapping, not only a dict (it was refused)
    assert calls[-1] == (4, {"member": 1, "mode": "train"})


def test_gymnasium_takes_numpy_integers_as_seeds_and_actions(toy):
    """reset(seed=np.int64(4)) raised gymnasium's "Seed must be a python integer", and
    step(np.array(1)) (a 0-d array) was refused as not an int."""
    gymnasium = pytest.importorskip("gymnasium", reason="the optional 'gym' extra (pip install ragen-core[gym])")
    import numpy as np

    import ragen_core.gym  # noqa: F401

    env = gymnasium.make(f"ragen/{toy}")
    obs, _ = env.reset(seed=4)
    assert env.reset(seed=np.int64(4))[0] == obs
    env.reset(seed=4)
    after_array = env.step(np.array(1))[0]
    env.reset(seed=4)
    assert after_array == env.step(1)[0]


def test_gymnasium_render_modes_are_the_envs_own(toy):
    gymnasium = pytest.importorskip("gymnasium", reason="the optional 'gym' extra (pip install ragen-core[gym])")
    from gymnasium.utils.env_checker import check_env as gym_check_env

    import ragen_core.gym  # noqa: F401

    env = gymnasium.make(f"ragen/{toy}")
    assert env.unwrapped.metadata["render_modes"] == ["ansi"]  # the toy env has no render_image
    with pytest.raises(UsageError, match=r"no render_mode 'rgb_array': it renders 'ansi'"):
        gymnasium.make(f"ragen/{toy}", render_mode="rgb_array")
    with warnings.catch_warnings(), pytest.raises(UsageError, match=r"no render_mode 'rgb_array': it renders 'ansi'; "
                                                                    r"gymnasium.make's render_mode='human' asks for 'rgb_array'"):
        warnings.simplefilter("ignore")  # gymnasium's note that it wraps the env in HumanRendering
        gymnasium.make(f"ragen/{toy}", render_mode="human")  # the refusal named only 'rgb_array', which was not asked for
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # also the checker's warnings (no render_fps, a declared mode that fails)
        gym_check_env(env.unwrapped)
    assert isinstance(gymnasium.make(f"ragen/{toy}", render_mode="ansi").unwrapped.render(), str)


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    group_size: int = Field(default=16, gt=0)
    mode: str = "full"


class Outer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    env: str = "bandit"
    steps: int = 10
    rollout: Inner = Inner()
    env_config: dict = {}


def test_yaml_files_merge_then_overrides(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("env: sokoban\nrollout:\n  group_size: 8\n  mode: full\n")
    exp = tmp_path / "exp.yaml"
    exp.write_text("rollout:\n  group_size: 4\nenv_config:\n  num_boxes: 2\n")
    cfg = load_config(Outer, [base, exp], ["steps=3", "rollout.mode=last-k", "env_config.dim_room=[8,8]"])
    assert cfg.env == "sokoban" and cfg.steps == 3
    assert cfg.rollout.group_size == 4 and cfg.rollout.mode == "last-k"
    assert cfg.env_config == {"num_boxes": 2, "dim_room": [8, 8]}
    again = Outer.model_validate_json(cfg.model_dump_json())
    assert again == cfg and pickle.loads(pickle.dumps(cfg)) == cfg


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["rollout.group_size=-1"], "invalid config: rollout.group_size: Input should be greater than 0 (got -1)"),
        (["rollout.grup_size=4"], "invalid config: rollout.grup_size: unknown key"),
        (["steps=many"], "invalid config: steps: Input should be a valid integer"),
        (["steps"], "bad override 'steps': expected dotted.key=value"),
        (["env=bandit", "env.name=x"], "bad override 'env.name=x': env is not a section"),
    ],
)
def test_bad_config_errors_name_the_field(overrides, message):
    with pytest.raises(ConfigError) as err:
        load_config(Outer, [], overrides)
    assert str(err.value).splitlines()[0].startswith(message)


def test_malformed_yaml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("rollout:\n  group_size: [1, 2\n")
    with pytest.raises(ConfigError, match=r"malformed YAML in .*bad.yaml at line"):
        load_config(Outer, [bad])
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(Outer, [tmp_path / "nope.yaml"])
    top = tmp_path / "list.yaml"
    top.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must contain a mapping"):
        load_config(Outer, [top])


def test_override_values_parse_as_yaml_scalars():
    assert parse_override("a.b=8") == (["a", "b"], 8)
    assert parse_override("a=true") == (["a"], True)
    assert parse_override("a='8'") == (["a"], "8")
    assert parse_override("a=null") == (["a"], None)
    assert apply_overrides({"a": {"x": 1}}, ["a.y=2"]) == {"a": {"x": 1, "y": 2}}


def test_the_light_import_check_of_an_in_process_spec_says_why_it_cannot_run():
    """It failed with the tail of the subprocess's not-found error: the installed envs' list."""
    from ragen_core.testing import check_spec_is_light

    with pytest.raises(AssertionError, match=r"^env 'toy-corridor' is registered in this process only \(registry.register\): the "
                                             r"light-import check .* pip install -e the package, or skip this check"):
        check_spec_is_light("env", register_toy_env())


def test_keyword_overrides_beside_a_config_are_validated_and_kept():
    """Env(config, max_turns=-5) copied the value in unchecked; LocalEnvPool(ref, config, threads=4)
    dropped the keyword. A bad keyword is a one-line PluginConfigError naming the class (it was
    pydantic's multi-line ValidationError)."""
    from ragen_core import registry
    from ragen_core.errors import PluginConfigError
    from ragen_core.interfaces.env_pool import EnvRef
    from ragen_core.rollout.env_pool import LocalEnvPool
    from ragen_core.testing.toy_env import CorridorEnv

    config = registry.make_config("env", register_toy_env())
    assert CorridorEnv(config, max_turns=3).config.max_turns == 3
    with pytest.raises(PluginConfigError, match=r"^CorridorConfig: invalid config: max_turns: .*\(got -5\)$"):
        CorridorEnv(config, max_turns=-5)
    with pytest.raises(PluginConfigError, match="thread: unknown key \\(did you mean 'threads'\\?\\)"):
        LocalEnvPool(EnvRef(name=register_toy_env()), thread=4)
    pool = LocalEnvPool(EnvRef(name=register_toy_env()), registry.make_config("pool", "local"), threads=4)
    assert pool.threads == 4
