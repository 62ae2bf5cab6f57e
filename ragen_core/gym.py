"""Gymnasium face of RAGEN environments: text observations in, text actions out.

Gym users get every installed RAGEN env without learning our API::

    import gymnasium
    env = gymnasium.make("ragen_core.gym:ragen/sokoban", preset="CoordSokoban")
    obs, info = env.reset(seed=3)
    obs, reward, terminated, truncated, info = env.step("Up")

The ``module:env-id`` form makes Gymnasium import this module, which registers ``ragen/<name>``
for every installed env from entry-point metadata only (no plugin is imported until ``make``).
``terminated`` is the env's ``done``; ``truncated`` becomes True when the per-episode action cap
(``max_actions_per_episode``) is exhausted without ``done``. Integer actions index into the env's
``action_names`` when it has a fixed vocabulary. ``reset(options=...)`` takes ``member`` and
``mode`` (``"train"`` / ``"val"``), passed to the env's reset; any other key is refused. Render
modes: ``ansi`` (the observation text) for every env, ``rgb_array`` only for an env with
:meth:`~ragen_core.Env.render_image` (Sokoban); the instance's ``metadata`` lists the modes its env
has, and a mode it lacks is refused at ``make``.
"""

from __future__ import annotations

import difflib
import string
from collections.abc import Mapping
from typing import Any

try:
    import gymnasium
    from gymnasium import spaces
except ImportError:  # an optional extra: say which one
    from ragen_core.errors import ConfigError

    raise ConfigError("ragen_core.gym needs the 'gymnasium' package", ["pip install 'ragen-core[gym]'"]) from None

from ragen_core import registry
from ragen_core.errors import UsageError
from ragen_core.interfaces.env import Env, check_reset_args
from ragen_core.seeding import is_int

CHARSET = string.printable + "√✓·█░▒▓←↑→↓"
RESET_OPTIONS = ("member", "mode")
"""The keys ``reset(options=...)`` takes: :meth:`ragen_core.Env.reset`'s ``member`` and ``mode``."""


class RagenGymEnv(gymnasium.Env):
    """Wraps a :class:`ragen_core.Env` built by name as a ``gymnasium.Env``."""

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}
    """Every mode some env has (what ``gymnasium.make`` checks); an instance lists its own env's."""

    def __init__(self, env_name: str, preset: str | None = None, render_mode: str | None = None, **config: Any) -> None:
        self.inner = registry.make_env(env_name, preset=preset, **config)
        self._env_name = env_name
        images = type(self.inner).render_image is not Env.render_image
        self.metadata = {"render_modes": ["ansi", "rgb_array"] if images else ["ansi"], "render_fps": 4}
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            self.inner.close()
            modes = ", ".join(repr(m) for m in self.metadata["render_modes"])
            human = "; gymnasium.make's render_mode='human' asks for 'rgb_array' to draw its frames" if render_mode == "rgb_array" else ""
            raise UsageError(f"ragen/{env_name} has no render_mode {render_mode!r}: it renders {modes}{human}")
        self.render_mode = render_mode
        self.observation_space = spaces.Text(max_length=1_000_000, charset=CHARSET)
        self.action_space = spaces.Text(max_length=10_000, charset=CHARSET)
        self._actions = 0

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        if is_int(seed):  # gymnasium's own seeding takes only a Python int: np.int64(3) raised its Error
            seed = int(seed)  # type: ignore[arg-type]
        super().reset(seed=seed)
        if seed is None:
            seed = int(self.np_random.integers(0, 2**31 - 1))
        options = self._check_options(seed, options)
        obs = self.inner.reset(seed, member=options.get("member", 0), mode=options.get("mode", "train"))
        self._actions = 0
        return obs, {"instruction": self.inner.instruction(), "action_names": self.inner.action_names}

    def _check_options(self, seed: int, options: Mapping[str, Any] | None) -> Mapping[str, Any]:
        """``options`` (a dict or any other mapping) when it holds only ``member`` and ``mode``, each as
        :meth:`ragen_core.Env.reset` takes it (an unknown key was ignored, ``"2"`` and ``2.7`` were read as members 2)."""
        if options is None:
            return {}
        where = f"ragen/{self._env_name} reset"
        if not isinstance(options, Mapping):  # a MappingProxyType or a frozen mapping is as good as a dict
            raise UsageError(f"{where}: options takes a dict or another mapping (keys 'member', 'mode') or None, "
                             f"not {type(options).__name__} {options!r}")
        unknown = sorted(set(options) - set(RESET_OPTIONS), key=str)
        if unknown:
            close = difflib.get_close_matches(str(unknown[0]), RESET_OPTIONS, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UsageError(f"{where}: unknown option {unknown[0]!r}{hint}; options are 'member' (the env's index in "
                             "its group, default 0) and 'mode' ('train' or 'val', default 'train')")
        check_reset_args(f"{where} options: ", seed, options.get("member", 0), options.get("mode", "train"))
        return options

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if not isinstance(action, str):
            names = self.inner.action_names
            if names is None or not is_int(action):
                takes = "text actions" if names is None else f"text actions or an int from 0 to {len(names) - 1}"
                raise UsageError(f"{type(self.inner).__name__} takes {takes}, not {type(action).__name__} {action!r}")
            if not 0 <= int(action) < len(names):  # a negative index took an action from the end
                raise UsageError(f"{type(self.inner).__name__}: action {int(action)} is not an index of its "
                                 f"{len(names)} action_names (0 to {len(names) - 1}: {', '.join(names)})")
            action = names[int(action)]
        obs, reward, done, info = self.inner.step(action)
        self._actions += 1
        truncated = not done and self._actions >= self.inner.config.max_actions_per_episode
        return obs, float(reward), bool(done), bool(truncated), dict(info)

    def render(self) -> Any:
        if self.render_mode == "rgb_array":
            return self.inner.render_image()
        return self.inner.render()

    def close(self) -> None:
        self.inner.close()


def register_envs() -> list[str]:
    """Register ``ragen/<name>`` with Gymnasium for every installed env (metadata only)."""
    ids = []
    for name in registry.names("env"):
        env_id = f"ragen/{name}"
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point="ragen_core.gym:RagenGymEnv", kwargs={"env_name": name}, disable_env_checker=True)
        ids.append(env_id)
    return ids


register_envs()
