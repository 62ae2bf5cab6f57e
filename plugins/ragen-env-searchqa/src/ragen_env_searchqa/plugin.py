"""Entry-point target: the light spec of the ``searchqa`` env (imports only core and config)."""

from __future__ import annotations

from typing import Any

from ragen_core.specs import EnvResources, EnvSpec
from ragen_env_searchqa.config import SearchQAConfig

_TAG = {"max_actions_per_episode": 10, "max_tokens": 300, "max_steps": 10, "max_search_results": 5}


def check_available(config: Any) -> list[str]:
    """Data settings that name a local file or folder must exist (local questions are read and
    split: too few, none with an answer), and a retrieval server given by URL must answer: said
    before a run starts, not at the first reset or search. A local training file named as a test
    split is warned about, and so is a question set searched against the built-in world (no
    corpus, index or server given: every search would find nothing useful)."""
    from ragen_core.datafiles import check_data_paths, named_test_split_warnings, only_local_sources
    from ragen_core.services import check_url_answers

    found = check_data_paths(config, hub_or_path=("dataset", "val_dataset"), paths=("retriever.index", "retriever.corpus"))
    if only_local_sources(config.dataset, config.val_dataset):  # local questions are read and split now; a hub id at the first reset
        from ragen_env_searchqa.data import load_splits

        load_splits(config.dataset, config.val_dataset, config.val_fraction, config.max_instances, config.cache_dir,
                    config.world_seed, config.world_size)  # cached per process: the run's own reset reads it from there
    if not config.mock_mode:  # mock mode never searches
        check_url_answers(config.server.url, "env_config.server.url")
    found += named_test_split_warnings(config, ("dataset",), folders=False)  # files only
    return found + _world_corpus_warnings(config)


def _world_corpus_warnings(config: Any) -> list[str]:
    """A question dataset with the built-in world's passages as the corpus: they are about
    fictional people, so they cannot answer real questions."""
    if config.mock_mode or config.server.url or config.retriever.index or config.retriever.corpus:
        return []
    field = next((f for f in ("dataset", "val_dataset") if getattr(config, f)), None)
    if field is None:
        return []
    return [f"env_config.{field}={getattr(config, field)} is searched against the built-in world's fictional passages, "
            "which cannot answer its questions; set env_config.retriever.corpus (or retriever.index, or server.url) to a real corpus"]


SPEC = EnvSpec(
    name="searchqa",
    summary="Answer questions by searching a corpus (search[...] / finish[...]); starts its own retrieval server.",
    config_model=SearchQAConfig,
    availability="ragen_env_searchqa.plugin:check_available",
    factory="ragen_env_searchqa.env:SearchQAEnv",
    # step() waits on the retrieval server: the local pool steps a turn's episodes in threads, and
    # the process-wide client sends their searches as one batched request.
    async_step=True,
    # One core per instance, though a search mostly waits: a worker process or Ray actor starts
    # its own retrieval server (a service is shared within a process), which encodes the queries.
    # A fraction here sized the process pool / a local Ray at 10 workers per core, each its server.
    resources=EnvResources(cpus=1.0),
    presets={
        "SearchQA": dict(_TAG),
        "SearchQAMock": {**_TAG, "mock_mode": True},
    },
)
