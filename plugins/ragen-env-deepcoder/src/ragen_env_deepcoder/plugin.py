"""Entry-point target: the light spec of the ``deepcoder`` env (imports only core and config)."""

from __future__ import annotations

from typing import Any

from ragen_core.specs import EnvResources, EnvSpec
from ragen_env_deepcoder.config import DeepCoderConfig


def check_available(config: Any) -> list[str]:
    """Data settings that name a local file or folder must exist, and local problems are read and
    split (too few, a bad row): said before a run starts, not at the first reset. A local training
    file named as a test split is warned about. Then the sandbox's isolation level is chosen (no
    acceptable level refuses the run here, before a model loads) and printed, once for the run: pool
    workers started later inherit that it was said."""
    from ragen_core.datafiles import check_data_paths, named_test_split_warnings, only_local_sources

    found = check_data_paths(config, hub_or_path=("dataset", "val_dataset"))
    if only_local_sources(config.dataset, config.val_dataset):  # a hub dataset is read at the first reset
        from ragen_env_deepcoder.problems import problems_for

        for split in ("train", "val"):
            problems_for(config, split)  # cached per process: the run's own reset reads it from there
    from ragen_env_deepcoder.sandbox import choose_level

    choose_level(config.sandbox)
    return found + named_test_split_warnings(config, ("dataset",))


SPEC = EnvSpec(
    name="deepcoder",
    summary="Write a Python program that passes a problem's unit tests, run in a sandbox (one answer).",
    config_model=DeepCoderConfig,
    availability="ragen_env_deepcoder.plugin:check_available",
    factory="ragen_env_deepcoder.env:DeepCoderEnv",
    # step() waits on a sandboxed subprocess: the local pool steps episodes in threads, and the
    # process-wide sandbox pool keeps at most `sandbox.workers` programs running at once.
    async_step=True,
    resources=EnvResources(cpus=1.0, memory_gb=0.5),
    presets={"DeepCoder": {"max_actions_per_episode": 1, "max_tokens": 8000}},
)
