"""Settings of the WebShop env (spec 13.6): the catalog, the goals, search, where the shop runs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ragen_core.interfaces.env import EnvConfig
from ragen_core.services import ServiceConfig
from ragen_core.specs import PluginConfig


class CatalogConfig(PluginConfig):
    """Which products the shop sells; equal settings give the same shop in every process."""

    product_path: str | None = None
    """``None``: the generated catalog (offline default). Otherwise a real WebShop product file:
    ``items_shuffle*.json`` (a JSON list of raw products), or a ``.jsonl`` file of search
    documents (``{"id", "contents", "product"}`` a line)."""
    attribute_path: str | None = None
    """The real ``items_ins_v2*.json`` (ASIN -> ``attributes``, ``instruction``,
    ``instruction_attributes``); needed with ``product_path``: goals come from its instructions.
    Without ``product_path`` it is refused (the generated catalog would never read it)."""
    num_products: int = Field(default=1000, ge=10, le=2_000_000)
    """Generated catalog: products made. Real files: keep at most this many (the first ones)
    when ``limit_real_products`` is set."""
    limit_real_products: bool = False
    """Cut a real catalog to ``num_products`` (the reference's ``num_products``)."""
    seed: int = Field(default=0, ge=0)
    """Seed of the generated catalog, of prices drawn from a price range and of goal price bounds."""
    index_cache_dir: str | None = None
    """Folder where the search index is saved under the catalog's fingerprint and loaded from
    by later processes (worth it for the full catalog); ``None``: built in memory each process."""


class WebShopConfig(EnvConfig):
    """WebShop settings; the defaults are the reference tag ``WebShop`` on the generated catalog."""

    max_actions_per_episode: int = Field(default=9, ge=1)
    """Actions per episode (the tag's ``max_actions_per_traj``)."""
    max_actions_per_turn: int = Field(default=1, ge=1)
    """One action per reply (the reference run config)."""
    max_turns: int = Field(default=9, ge=1)
    """Model turns per episode (the reference run config's ``max_turn``)."""
    max_tokens: int = Field(default=200, ge=1)
    """Response-length hint shown in the prompt."""

    catalog: CatalogConfig = Field(default_factory=CatalogConfig)
    """Products and the seed of everything drawn from them."""
    limit_goals: int = Field(default=-1, ge=-1)
    """Keep only the first N goals after the fixed shuffle (-1: all)."""
    results_top_k: int = Field(default=50, ge=1, le=1000)
    """Search hits kept (the reference: 50)."""
    results_per_page: int = Field(default=10, ge=1, le=100)
    """Hits shown on one results page (the reference: 10)."""
    max_query_chars: int = Field(default=500, ge=1)
    """A ``search[...]`` longer than this is an invalid action (the reference had no limit)."""
    show_guidance: bool = True
    """Append the nine guidance lines of the reference to every observation."""
    expert_instruction: bool = False
    """Use the short one-sentence instruction of the reference's ``WebShopFull`` tag."""
    purchase_reward: Literal["binary", "score"] = "binary"
    """Reward of ``click[buy now]``: ``binary`` pays 1 when the WebShop score is 1, else 0 (the
    reference); ``score`` pays the score itself, partial credit in [0, 1] (spec 17.5's shaped
    reward). Either way ``info["raw_reward"]`` is the score and ``info["success"]`` means score 1.
    The env computes it from the score, so it is the same in both shops and with ``server.url``."""

    shop: Literal["inprocess", "server"] = "inprocess"
    """``inprocess``: the shop engine runs in this process (fast path for training).
    ``server``: talk to the HTTP shop; it is started as a child process on a free loopback
    port and shared by every env of this process, or reached at ``server.url`` when set."""
    server: ServiceConfig = Field(default_factory=ServiceConfig)
    """Start, restart and readiness settings of the shop server (``shop: server``)."""
    request_timeout_s: float = Field(default=30.0, gt=0)
    """Timeout of one HTTP request to the shop server."""

    @model_validator(mode="after")
    def _url_needs_server_shop(self) -> WebShopConfig:
        if self.shop == "inprocess" and self.server.url is not None:
            raise ValueError(f"server.url {self.server.url!r} is set but shop is 'inprocess', which never uses it: "
                             "set shop=server to play against that shop server, or drop server.url")
        return self

    @model_validator(mode="after")
    def _attributes_need_products(self) -> WebShopConfig:
        if self.catalog.attribute_path is not None and self.catalog.product_path is None:
            raise ValueError("catalog.attribute_path is set without catalog.product_path, so it is never read (the catalog is generated): "
                             "set catalog.product_path to the matching items_shuffle*.json")
        return self
