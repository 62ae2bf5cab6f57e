"""WebShop for RAGEN: a simulated web shop with BM25 search, in process or as an HTTP server.

The catalog (generated, or the real WebShop files) is in :mod:`ragen_env_webshop.catalog`, goals
in :mod:`ragen_env_webshop.goals`, the score in :mod:`ragen_env_webshop.scoring`, search in
:mod:`ragen_env_webshop.search`, pages and moves in :mod:`ragen_env_webshop.engine`, the HTTP
shop in :mod:`ragen_env_webshop.server`; the env class is imported only when built.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from ragen_env_webshop.config import CatalogConfig, WebShopConfig

try:
    __version__ = version("ragen-env-webshop")
except PackageNotFoundError:  # source tree that was never installed
    __version__ = "0.0.0"

__all__ = ["CatalogConfig", "WebShopConfig", "__version__"]
