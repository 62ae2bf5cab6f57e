"""Entry-point target: the light spec of the ``metamathqa`` env (no data or checker imports)."""

from __future__ import annotations

from typing import Any

from ragen_core.specs import EnvSpec
from ragen_env_metamathqa.config import MetaMathQAConfig

_TAG = {"max_actions_per_episode": 1, "max_actions_per_turn": 1, "max_turns": 5, "max_tokens": 100}


def check_available(config: Any) -> list[str]:
    """Data settings that name a local file or folder must exist, and local data is read and split
    (too few questions, no labelled row, no row of ``types``): said before a run loads a model, not
    at the first reset or validation. A local training file named as a test split is warned about
    (the hub's test splits are refused by the config)."""
    from ragen_core.datafiles import check_data_paths, named_test_split_warnings, only_local_sources

    found = check_data_paths(config, hub_or_path=("dataset_path", "val_dataset_path"))
    if only_local_sources(config.dataset_path, config.val_dataset_path):  # a hub id is read at the first reset
        from ragen_env_metamathqa.problems import splits_for

        splits_for(config)  # cached per process: the run's own reset reads it from there
    # a folder is split by file name by `datasets`: only a single file can put a test file into training
    return found + named_test_split_warnings(config, ("dataset_path",), val_field="val_dataset_path", folders=False)


SPEC = EnvSpec(
    name="metamathqa",
    summary="Math word problems (built-in, MetaMathQA, GSM8K or MATH files); the final answer is checked by value.",
    config_model=MetaMathQAConfig,
    availability="ragen_env_metamathqa.plugin:check_available",
    factory="ragen_env_metamathqa.env:MetaMathQAEnv",
    presets={
        # the reference tag, with the value-based checker
        "MetamathQA": dict(_TAG),
        # the reference tag and the reference's exact-match rule
        "ExactMatch": {**_TAG, "checker": "exact"},
    },
)
