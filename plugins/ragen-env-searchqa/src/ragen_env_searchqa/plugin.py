"""Entry-point target: the light spec of the ``searchqa`` env (imports only core and config)."""

from __future__ import annotations

from typing import Any

from ragen_core.specs import EnvResources, EnvSpec
from ragen_env_searchqa.config import SearchQAConfig

_TAG = {"max_actions_per_episode": 10, "max_tokens": 300, "max_steps": 10, "max_search_results": 5}


def check_available(config: Any) -> list[str]:
    """Data settings that name a local file or folder must exist, and a retrieval server given by
    URL must answer: said before a run starts, not at the first reset or search. A local training
    file named as a test split is warned about."""
    from ragen_core.datafiles import check_data_paths, named_test_split_warnings
    from ragen_core.services import check_url_answers

    found = check_data_paths(config, hub_or_path=("dataset", "val_dataset"), paths=("retriever.index", "retriever.corpus"))
    if not config.mock_mode:  # mock mode never searches
        check_url_answers(config.server.url, "env_config.server.url")
    return found + named_test_split_warnings(config, ("dataset",), folders=False)  # files only


SPEC = EnvSpec(
    name="searchqa",
    summary="Answer questions by searching a corpus (search[...] / finish[...]); starts its own retrieval server.",
    config_model=SearchQAConfig,
    availability="ragen_env_searchqa.plugin:check_available",
    factory="ragen_env_searchqa.env:SearchQAEnv",
    # step() waits on the retrieval server: the local pool steps a turn's episodes in threads, and
    # the process-wide client sends their searches as one batched request.
    async_step=True,
    resources=EnvResources(cpus=0.1),
    presets={
        "SearchQA": dict(_TAG),
        "SearchQAMock": {**_TAG, "mock_mode": True},
    },
)
