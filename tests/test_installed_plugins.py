"""Integration: every installed plugin honours its kind's contract (downstream-style check).

Plugin packages prove their own behaviour in their tests; this file proves that whatever is
installed next to this core is discoverable, light to list, round-trips its spec and config,
and passes the generic checks of its kind.
"""

from __future__ import annotations

import pytest

from ragen_core import registry
from ragen_core.errors import RagenError
from ragen_core.specs import GROUPS
from ragen_core.testing import (
    check_algorithm,
    check_estimator,
    check_filter,
    check_spec_is_light,
    check_spec_roundtrip,
    env_checks,
    plugin_checks,
    pool_checks,
)

INSTALLED = [(e.kind, e.name, e.dist_name) for kind in GROUPS for e in registry.entries(kind) if e.spec is None]


def test_every_interface_kind_has_a_conformance_check():
    checks = {
        "env": env_checks.check_env,
        "estimator": plugin_checks.check_estimator,
        "filter": plugin_checks.check_filter,
        "diagnostic": plugin_checks.check_diagnostic,
        "algorithm": plugin_checks.check_algorithm,
        "engine": plugin_checks.check_spec_roundtrip,
        "pool": pool_checks.check_pool,
    }
    assert set(checks) == set(GROUPS)


@pytest.mark.parametrize("kind,name,dist", INSTALLED, ids=[f"{k}-{n}" for k, n, _ in INSTALLED])
def test_installed_plugin_spec(kind, name, dist):
    spec = registry.get_spec(kind, f"{dist}:{name}")
    assert name == spec.name or name in spec.aliases
    check_spec_roundtrip(spec)
    for preset in spec.presets:
        registry.make_config(kind, f"{dist}:{name}", preset=preset)


@pytest.mark.parametrize("kind,name,dist", INSTALLED, ids=[f"{k}-{n}" for k, n, _ in INSTALLED])
def test_installed_plugin_spec_is_light(kind, name, dist):
    check_spec_is_light(kind, f"{dist}:{name}")


FILTERS = [n for k, n, _ in INSTALLED if k == "filter"]
ESTIMATORS = [n for k, n, _ in INSTALLED if k == "estimator"]
ALGORITHMS = [n for k, n, _ in INSTALLED if k == "algorithm"]


@pytest.mark.parametrize("name", FILTERS)
def test_installed_filter_conformance(name):
    check_filter(registry.make("filter", name))


@pytest.mark.parametrize("name", ESTIMATORS)
def test_installed_estimator_conformance(name):
    check_estimator(registry.make("estimator", name))


@pytest.mark.parametrize("name", ALGORITHMS)
def test_installed_algorithm_conformance(name):
    check_algorithm(registry.make("algorithm", name))


ENVS = sorted({n for k, n, _ in INSTALLED if k == "env"})


def _refusal(name: str) -> RagenError | None:
    """The error of an env whose availability check refuses this machine (e.g. no Lean toolchain)."""
    try:
        registry.get_spec("env", name).check_available(registry.make_config("env", name))
    except RagenError as exc:
        return exc
    return None


@pytest.mark.parametrize("name", ENVS)
def test_installed_env_has_a_gymnasium_face(name):
    gymnasium = pytest.importorskip("gymnasium", reason="the optional 'gym' extra (pip install ragen-core[gym])")

    import ragen_core.gym  # noqa: F401  (registers ragen/<name> from metadata)

    refused = _refusal(name)
    if refused is not None:  # an env that cannot run here must refuse to be built, with the same error
        with pytest.raises(RagenError) as built:
            gymnasium.make(f"ragen/{name}")
        assert str(built.value) == str(refused)
        return
    env = gymnasium.make(f"ragen/{name}")
    obs, info = env.reset(seed=5)
    assert isinstance(obs, str) and obs
    inner = env.unwrapped.inner
    action = inner.random_action(__import__("numpy").random.default_rng(0)) or "garbage"
    obs, reward, terminated, truncated, info = env.step(action)
    assert isinstance(obs, str) and isinstance(reward, float) and isinstance(terminated, bool)
    env.close()


@pytest.mark.parametrize("name", ENVS)
def test_installed_env_renders_in_each_gymnasium_mode_it_declares(name):
    gymnasium = pytest.importorskip("gymnasium", reason="the optional 'gym' extra (pip install ragen-core[gym])")

    import ragen_core.gym  # noqa: F401

    if _refusal(name) is not None:
        pytest.skip(f"env {name} cannot run here")
    modes = gymnasium.make(f"ragen/{name}").unwrapped.metadata["render_modes"]
    assert "ansi" in modes
    for mode in modes:  # what gymnasium's env checker renders: every declared mode must work
        env = gymnasium.make(f"ragen/{name}", render_mode=mode)
        env.reset(seed=3)
        frame = env.render()
        if mode == "ansi":
            assert isinstance(frame, str) and frame
        else:
            assert frame.ndim == 3 and frame.shape[2] == 3
        env.close()


@pytest.mark.parametrize("name", ENVS)
def test_installed_env_plays_in_the_terminal_with_a_random_agent(name):
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", "import sys; from ragen_core.cli.main import main; sys.exit(main())",
         "env", "play", name, "--agent", "random", "--seed", "2"],
        capture_output=True, text=True, timeout=300,
    )
    refused = _refusal(name)
    if refused is not None:  # refused before any work: the error alone, exit status 2
        assert (out.returncode, out.stderr, out.stdout) == (2, f"{type(refused).__name__}: {refused}\n", "")
        return
    assert out.returncode == 0, out.stderr
    assert "episode over: total reward" in out.stdout


def test_a_person_can_play_sokoban_in_the_terminal():
    import subprocess
    import sys

    from ragen_core import registry

    if "sokoban" not in registry.names("env"):
        pytest.skip("ragen-env-sokoban is not installed")
    env = registry.make_env("sokoban")
    env.reset(4)
    plan = env.oracle_actions()
    typed = "\n".join(" || ".join(plan[i : i + 2]) for i in range(0, len(plan), 2)) + "\n"
    out = subprocess.run(
        [sys.executable, "-c", "import sys; from ragen_core.cli.main import main; sys.exit(main())", "env", "play", "sokoban", "--seed", "4"],
        capture_output=True, text=True, timeout=300, input=typed,
    )
    assert out.returncode == 0, out.stderr
    assert "success True" in out.stdout
    assert "+10.90" in out.stdout  # the solving push: -0.1 + 1 + 10
    max_turns, max_actions = env.config.max_turns, env.config.max_actions_per_episode
    assert f"--- turn 1/{max_turns} ({max_actions} actions left) ---" in out.stdout  # both budgets the rollout applies
