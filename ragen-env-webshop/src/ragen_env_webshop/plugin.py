"""Entry-point target: the light spec of the ``webshop`` env (imports only core and config)."""

from __future__ import annotations

from typing import Any

from ragen_core.specs import EnvResources, EnvSpec
from ragen_env_webshop.config import WebShopConfig


def check_available(config: Any) -> None:
    """Data settings that name a local file or folder must exist, and a shop server given by URL
    must answer: said before a run starts, not at the first reset."""
    from ragen_core.datafiles import check_data_paths
    from ragen_core.services import check_url_answers

    check_data_paths(config, files=("catalog.product_path", "catalog.attribute_path"))
    if config.shop == "server":
        check_url_answers(config.server.url, "env_config.server.url")


SPEC = EnvSpec(
    name="webshop",
    summary="Buy the product an instruction describes in a simulated web shop (search, results, item pages, options).",
    config_model=WebShopConfig,
    availability="ragen_env_webshop.plugin:check_available",
    factory="ragen_env_webshop.env:WebShopEnv",
    resources=EnvResources(cpus=1.0, memory_gb=0.5),
    # the HTTP shop started from the same catalog serves the same pages as the in-process engine;
    # how long a request may take changes no page either
    placement_settings=("shop", "request_timeout_s"),
    presets={
        # the reference tags; WebShopFull needs the real catalog files (catalog.product_path / attribute_path)
        "WebShop": {"max_actions_per_episode": 9, "max_turns": 9, "max_tokens": 200},
        "WebShopFull": {"max_actions_per_episode": 15, "max_turns": 15, "max_tokens": 200, "expert_instruction": True},
    },
)
