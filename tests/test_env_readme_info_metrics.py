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


def package_folder(name: str) -> Path | None:
    """The folder of this repository holding the distribution of env ``name`` (``plugins/`` or the
    root); ``None`` for an env installed from elsewhere."""
    folder = registry.get_spec("env", name).factory.split(".", 1)[0].replace("_", "-")
    return next((path for path in (ROOT / "plugins" / folder, ROOT / folder) if path.is_dir()), None)


def env_readme(name: str) -> Path:
    folder = package_folder(name)
    assert folder is not None and (folder / "README.md").is_file(), f"no README for env {name!r}"
    return folder / "README.md"


def declared(name: str) -> tuple[tuple[str, str], ...]:
    module, cls = registry.get_spec("env", name).factory.split(":")
    return checked_info_metrics(getattr(importlib.import_module(module), cls))


@pytest.mark.parametrize("name", [name for name in registry.names("env") if package_folder(name) is not None])
def test_the_env_readme_names_each_declared_info_metric(name):
    text = env_readme(name).read_text(encoding="utf-8")
    for key, mode in declared(name):
        assert f"info/{key}" in text, f"{env_readme(name).relative_to(ROOT)} does not name the logged metric info/{key}"
        assert f"info/{key}` ({mode}" in text, f"{env_readme(name).relative_to(ROOT)} does not say info/{key} is the {mode}"

