"""Environment conformance checks.

Each check is ``check_<what>(name, preset=None)``: it builds the env through the real registry
(proving the entry point is installed), exercises one contract, and raises ``AssertionError``
with a pointer to the contract in ``ragen_core.interfaces.env`` when it is violated.
"""

from __future__ import annotations

import functools
import math
import numbers
import pickle
from collections.abc import Callable, Mapping
from typing import Any

from ragen_core import registry
from ragen_core.errors import EnvError
from ragen_core.interfaces.env import Env, StepResult, checked_info_metrics
from ragen_core.interfaces.env_pool import checked_action_names
from ragen_core.rollout.env_pool import info_record, is_bool
from ragen_core.testing.plugin_checks import check_spec_is_light, check_spec_roundtrip

DOC = "see the contract in ragen_core/interfaces/env.py"
SEEDS = (0, 1, 7, 123, 10_000)

#: Replies a model might produce; every one must be an invalid action or a scored answer.
GARBAGE_REPLIES: tuple[str, ...] = (
    "",
    " ",
    "\x00\x01\x02binary\xff",
    "<answer>",
    "</answer></think><think>",
    "<answer><answer>Up</answer>",
    "🙂 ünïcödé ✓ 中文",
    "-1",
    "99999999999999999999999999",
    "1e309",
    "NaN",
    "None",
    "place 10 at row 0 col 99",
    "(1,1,1,1,1)",
    "2**99999999",
    "((((((((((((((((((((1))))))))))))))))))))",
    "1/0",
    "x" * 1_000_000,
    "Up " * 10_000,
)


def _make(name: str, preset: str | None) -> Env:
    env = registry.make("env", name, preset=preset)
    assert isinstance(env, Env), f"env {name!r}: factory returned {type(env).__name__}, not a ragen_core.Env ({DOC})"
    try:
        checked_info_metrics(env)
    except EnvError as exc:
        raise AssertionError(f"env {name!r}: {exc.message} ({DOC})") from None
    return env


def _sample_actions(env: Env, n: int = 6) -> list[str]:
    names = env.action_names
    if names:
        return [names[i % len(names)] for i in range(n)]
    oracle = env.oracle_actions()
    if oracle:
        return list(oracle)[:n]
    return ["1", "a", "0"][:n]


def _assert_step(name: str, result: Any, action: str, env: Env | None = None) -> StepResult:
    # the runtime's rules (ragen_core.rollout.env_pool.run_actions): what it accepts, the kit accepts
    assert isinstance(result, (tuple, list)) and len(result) == 4, f"env {name!r}: step must return (obs, reward, done, info) ({DOC})"
    obs, reward, done, info = result
    assert isinstance(obs, str), f"env {name!r}: observation after {action[:40]!r} is {type(obs).__name__}, not str"
    assert isinstance(reward, numbers.Real) and not isinstance(reward, bool), f"env {name!r}: reward must be a number, got {type(reward).__name__}"
    assert math.isfinite(float(reward)), f"env {name!r}: non-finite reward {reward!r} after action {action[:40]!r}"
    assert is_bool(done), f"env {name!r}: done must be bool, got {type(done).__name__} {done!r}"
    assert isinstance(info, Mapping), f"env {name!r}: info must be a dict"
    if "success" in info:  # read by train/success: the string "no" would be a truthy success
        success = info["success"]
        assert is_bool(success), f"env {name!r}: info['success'] must be bool, got {type(success).__name__} {success!r}"
    if env is not None:  # its declared info metrics, as a run reads them
        try:
            info_record(info, [key for key, _ in checked_info_metrics(env)], f"env {name!r}", f"for action {action[:40]!r}")
        except EnvError as exc:
            raise AssertionError(f"{exc.message} ({DOC})") from None
    return StepResult(obs, float(reward), bool(done), dict(info))


def check_spec(name: str, preset: str | None = None) -> None:
    """Spec and config validate with defaults and round-trip through JSON and pickle."""
    spec = registry.get_spec("env", name)
    assert spec.name == name, f"entry point {name!r} must equal spec.name {spec.name!r}"
    if preset is not None:
        assert preset in spec.presets, f"env {name!r} has no preset {preset!r}"
    check_spec_roundtrip(spec, registry.make_config("env", name, preset=preset))


def check_light_import(name: str, preset: str | None = None) -> None:
    """Loading the spec in a fresh interpreter imports no torch, transformers, vllm or ray."""
    check_spec_is_light("env", name)


def check_reset_determinism(name: str, preset: str | None = None) -> None:
    """Same seed -> same observation, whatever the member index; observation is a str."""
    a, b = _make(name, preset), _make(name, preset)
    try:
        for seed in SEEDS:
            obs_a = a.reset(seed)
            obs_b = b.reset(seed)
            assert isinstance(obs_a, str) and obs_a, f"env {name!r}: reset({seed}) must return a non-empty str"
            assert obs_a == obs_b, f"env {name!r}: reset({seed}) differs between two instances ({DOC})"
            obs_m = b.reset(seed, member=3)
            assert obs_m == obs_a, f"env {name!r}: members of a group (same seed) must see the same first observation ({DOC})"
            assert a.render() == obs_a, f"env {name!r}: render() right after reset must equal the returned observation"
    finally:
        a.close()
        b.close()


def check_step_determinism(name: str, preset: str | None = None) -> None:
    """Same seed, member and actions -> same observations, rewards, done flags; types are right."""
    a, b = _make(name, preset), _make(name, preset)
    try:
        for seed in SEEDS[:3]:
            a.reset(seed, member=1)
            b.reset(seed, member=1)
            for action in _sample_actions(a):
                ra = _assert_step(name, a.step(action), action, a)
                rb = _assert_step(name, b.step(action), action, b)
                assert (ra.observation, ra.reward, ra.done) == (rb.observation, rb.reward, rb.done), (
                    f"env {name!r}: step({action!r}) is not deterministic for seed {seed} ({DOC})"
                )
                if ra.done:
                    break
    finally:
        a.close()
        b.close()


def check_garbage_actions(name: str, preset: str | None = None) -> None:
    """Any string is an invalid action or a scored answer, never an exception."""
    env = _make(name, preset)
    try:
        for reply in GARBAGE_REPLIES:
            env.reset(5)
            try:
                result = env.step(reply)
            except Exception as exc:  # the whole point of the check
                raise AssertionError(f"env {name!r}: step({reply[:40]!r}) raised {type(exc).__name__}: {exc} ({DOC})") from exc
            _assert_step(name, result, reply, env)
    finally:
        env.close()


def check_close_idempotent(name: str, preset: str | None = None) -> None:
    env = _make(name, preset)
    env.reset(0)
    env.close()
    env.close()


def check_picklable(name: str, preset: str | None = None) -> None:
    """Envs travel to worker processes (Ray): pickling mid-episode preserves the state."""
    env = _make(name, preset)
    try:
        env.reset(11)
        actions = _sample_actions(env, 2)
        if actions:
            env.step(actions[0])
        clone = pickle.loads(pickle.dumps(env))  # noqa: S301 - the env this check pickled itself
        assert clone.render() == env.render(), f"env {name!r}: unpickled env renders differently"
        if len(actions) > 1:
            # the step's own faults first (a NaN reward is never equal to itself: "steps differently" misled)
            r1, r2 = _assert_step(name, env.step(actions[1]), actions[1], env), _assert_step(name, clone.step(actions[1]), actions[1], clone)
            assert (r1[0], r1[1], r1[2]) == (r2[0], r2[1], r2[2]), f"env {name!r}: unpickled env steps differently"
        clone.close()
    finally:
        env.close()


def check_instruction(name: str, preset: str | None = None) -> None:
    env = _make(name, preset)
    try:
        env.reset(0)
        text = env.instruction()
        assert isinstance(text, str), f"env {name!r}: instruction() must return str"
        quirk = getattr(env, "merge_quirk_instruction", None)  # compat.prompt_merge_quirk's text (spec 17 L30)
        assert quirk is None or isinstance(quirk(), str), f"env {name!r}: merge_quirk_instruction() must return str"
        try:
            checked_action_names(env.action_names)
        except EnvError as exc:
            raise AssertionError(f"env {name!r}: {exc.message}") from None
    finally:
        env.close()


def check_oracle(name: str, preset: str | None = None, seeds: tuple[int, ...] = SEEDS) -> None:
    """When the env ships an oracle, it reaches success within the env's action limit."""
    env = _make(name, preset)
    try:
        env.reset(seeds[0])
        if env.oracle_actions() is None:
            return
        limit = env.config.max_actions_per_episode
        for seed in seeds:
            env.reset(seed)
            actions = env.oracle_actions() or []
            assert len(actions) <= limit, f"env {name!r}: oracle needs {len(actions)} actions for seed {seed}, limit is {limit}"
            info: dict[str, Any] = {}
            done = False
            for action in actions:  # the winning step is checked like any other (a NaN reward on success, say)
                _, _, done, info = _assert_step(name, env.step(action), action, env)
                if done:
                    break
            assert "success" in info, (f"env {name!r}: the oracle's last step (seed {seed}, done={done}) has no info['success']; "
                                       "train/success counts an episode whose info['success'] is True")
            assert bool(info["success"]), f"env {name!r}: oracle did not succeed on seed {seed} (done={done}, success={info['success']!r})"
            assert done, (f"env {name!r}: the oracle's last step (seed {seed}) says success but not done: train/success counts "
                          "an episode that ends (done=True) with info['success'] True")
    finally:
        env.close()


def check_info_metrics(name: str, preset: str | None = None, seeds: tuple[int, ...] = SEEDS[:3]) -> None:
    """Every key of :attr:`Env.info_metrics` is in the info of at least one step the kit drives (the
    oracle's episodes, sample actions, an invalid reply): a misspelt key was never logged, saying nothing."""
    env = _make(name, preset)
    try:
        declared = [key for key, _ in checked_info_metrics(env)]
        if not declared:
            return
        seen: set[str] = set()
        for seed in seeds:
            env.reset(seed)
            episodes = [env.oracle_actions() or [], _sample_actions(env), [GARBAGE_REPLIES[0]]]
            for actions in episodes:
                env.reset(seed)
                for action in actions:
                    result = _assert_step(name, env.step(action), action, env)
                    seen.update(result.info)
                    if result.done:
                        break
        missing = [key for key in declared if key not in seen]
        assert not missing, (f"env {name!r}: info_metrics declares {', '.join(map(repr, missing))}, in the info of no step of the "
                             f"oracle, sample actions or an invalid reply (seeds {', '.join(map(str, seeds))}): a misspelt key is "
                             f"never logged; its info keys were {', '.join(map(repr, sorted(seen))) or 'none'} ({DOC})")
    finally:
        env.close()


ENV_CHECKS: dict[str, Callable[..., None]] = {
    "spec": check_spec,
    "light-import": check_light_import,
    "reset-determinism": check_reset_determinism,
    "step-determinism": check_step_determinism,
    "garbage-actions": check_garbage_actions,
    "close-idempotent": check_close_idempotent,
    "picklable": check_picklable,
    "instruction": check_instruction,
    "oracle": check_oracle,
    "info-metrics": check_info_metrics,
}


def check_env(name: str, preset: str | None = None, *, skip: tuple[str, ...] = ()) -> None:
    """Run every env check on the env ``name`` (optionally with a preset)."""
    for check_name, check in ENV_CHECKS.items():
        if check_name not in skip:
            check(name, preset)


def parametrize_env_checks(names: list[str] | str, presets: list[str | None] | None = None,
                           expected_failures: dict[str, str] | None = None) -> Any:
    """``pytest.mark.parametrize("env_check", ...)`` with one id per ``(env[preset], check)``.

    Args:
        names: Env plugin names to check (one name alone may be given as a string; it made one
            test per letter).
        presets: Presets to check for every name (``None`` = default config).
        expected_failures: ``{check_name: reason}`` reviewed exemptions, marked xfail.

    Raises:
        ValueError: an ``expected_failures`` key that names no check (a misspelt exemption would
            exempt nothing, silently).
    """
    import pytest

    unknown = sorted(set(expected_failures or {}) - set(ENV_CHECKS))
    if unknown:
        raise ValueError(f"expected_failures names no env check: {', '.join(unknown)} (the checks: {', '.join(ENV_CHECKS)})")
    params = []
    for name in [names] if isinstance(names, str) else names:
        for preset in [presets] if isinstance(presets, str) else presets or [None]:
            for check_name, check in ENV_CHECKS.items():
                label = f"{name}[{preset}]-{check_name}" if preset else f"{name}-{check_name}"
                marks = []
                if expected_failures and check_name in expected_failures:
                    marks.append(pytest.mark.xfail(reason=expected_failures[check_name], strict=True))
                params.append(pytest.param(functools.partial(check, name, preset), id=label, marks=marks))
    return pytest.mark.parametrize("env_check", params)
