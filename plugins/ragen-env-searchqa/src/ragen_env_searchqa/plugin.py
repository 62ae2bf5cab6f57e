"""Entry-point target: the light spec of the ``searchqa`` env (imports only core and config)."""

from __future__ import annotations

from ragen_core.specs import EnvResources, EnvSpec
from ragen_env_searchqa.config import SearchQAConfig

_TAG = {"max_actions_per_episode": 10, "max_tokens": 300, "max_steps": 10, "max_search_results": 5}

SPEC = EnvSpec(
    name="searchqa",
    summary="Answer questions by searching a corpus (search[...] / finish[...]); starts its own retrieval server.",
    config_model=SearchQAConfig,
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
