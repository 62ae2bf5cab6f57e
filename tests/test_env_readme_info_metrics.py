"""Each shipped env's README names the info metrics a run logs for it.

A run logs ``train/<tag>/info/<key>`` for every key the env class declares in ``info_metrics``
(README, "optional: ``info_metrics``"); a user learns which numbers an env adds from its README,
so each declared key must appear there as ``info/<key>`` followed by its aggregation
(`` `train/bandit/info/chose_best_arm` (mean ...``).
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from ragen_core import registry
from ragen_core.interfaces.env import checked_info_metrics

ROOT = Path(__file__).resolve().parents[1]


def env_readme(name: str) -> Path:
    """The README of the distribution shipping env ``name`` (in ``plugins/`` or at the root)."""
    folder = registry.get_spec("env", name).factory.split(".", 1)[0].replace("_", "-")
    for path in (ROOT / "plugins" / folder / "README.md", ROOT / folder / "README.md"):
        if path.is_file():
            return path
    raise AssertionError(f"no README for env {name!r} (looked for {folder}/README.md)")


def declared(name: str) -> tuple[tuple[str, str], ...]:
    module, cls = registry.get_spec("env", name).factory.split(":")
    return checked_info_metrics(getattr(importlib.import_module(module), cls))


@pytest.mark.parametrize("name", registry.names("env"))
def test_the_env_readme_names_each_declared_info_metric(name):
    text = env_readme(name).read_text(encoding="utf-8")
    for key, mode in declared(name):
        assert f"info/{key}" in text, f"{env_readme(name).relative_to(ROOT)} does not name the logged metric info/{key}"
        assert f"info/{key}` ({mode}" in text, f"{env_readme(name).relative_to(ROOT)} does not say info/{key} is the {mode}"

