"""BM25 product search with ``bm25s`` (pure Python and NumPy; the reference needed Java/Lucene).

The index reads each product's title, description, bullet points and option values, tokenised
by one rule for documents and queries (lower-cased alphanumeric words, English stop words
dropped). Indexes are kept per catalog fingerprint for the life of the process, so every env
and the server share one; the answers to recent queries are cached too. With a cache folder
(``catalog.index_cache_dir``) the index is also saved to disk, under the catalog's fingerprint,
and loaded by later processes instead of being rebuilt (the full catalog takes minutes to
index). Ties in score are broken by catalog order, so results never depend on the process.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path

import bm25s
import numpy as np

from ragen_env_webshop.catalog import Product, catalog_fingerprint

_TOKEN = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "a an and are as at be but by for from has have i if in into is it its me my no not of on or our "
    "so such that the their then there these they this to too very was we were what when which while "
    "who will with you your want need looking find buy".split()
)
#: Query words beyond this many are ignored (a 1 MB query costs no more than a long one).
MAX_QUERY_TOKENS = 64
_CACHE_SIZE = 4096
#: Part of the on-disk cache name: change it when the tokeniser or the indexed text changes.
INDEX_VERSION = 1


def tokenize(text: str) -> list[str]:
    """Lower-cased words of ``text`` without stop words."""
    return [t for t in _TOKEN.findall(text.lower()) if t not in _STOP]


class SearchIndex:
    """BM25 over a product list; :meth:`search` returns catalog indices, best first."""

    def __init__(self, products: list[Product], cache_dir: str | None = None) -> None:
        self.size = len(products)
        self.loaded_from: Path | None = None
        saved = Path(cache_dir).expanduser() / f"webshop-bm25-v{INDEX_VERSION}-{catalog_fingerprint(products)}" if cache_dir else None
        if saved is not None and (saved / "params.index.json").is_file():
            self._bm25 = bm25s.BM25.load(str(saved), show_progress=False)
            self.loaded_from = saved
        else:
            self._bm25 = bm25s.BM25()
            self._bm25.index([tokenize(p.search_text()) or ["-"] for p in products], show_progress=False)
            if saved is not None:
                self._save(saved)
        self._vocab = self._bm25.vocab_dict
        self._cache: OrderedDict[tuple[str, ...], tuple[int, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def _save(self, target: Path) -> None:
        """Write the index next to ``target`` and rename it into place (readers never see half)."""
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent)
        except OSError as e:  # under a file, or a folder it may not write in: the index stays in memory, said once
            logging.getLogger(__name__).warning("catalog.index_cache_dir %s cannot hold the search index (%s): it is built "
                                                "in memory each time; set index_cache_dir to a writable folder", target.parent,
                                                e.strerror or e)
            return
        try:
            self._bm25.save(tmp, show_progress=False)
            os.replace(tmp, target)
        except OSError:  # another process saved it first: keep the one in memory
            shutil.rmtree(tmp, ignore_errors=True)

    def search(self, query: str, top_k: int = 50) -> tuple[int, ...]:
        """Indices of the ``top_k`` best products for ``query`` (products scoring 0 are left out)."""
        words = tuple(t for t in tokenize(query[: MAX_QUERY_TOKENS * 40]) if t in self._vocab)[:MAX_QUERY_TOKENS]
        if not words:
            return ()
        key = (*words, f"#{top_k}")
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        scores = self._bm25.get_scores(list(words))
        k = min(top_k, self.size)
        top = np.argpartition(-scores, k - 1)[:k] if k < self.size else np.arange(self.size)
        # best score first; equal scores in catalog order (stable and process-independent)
        ranked = sorted((int(i) for i in top if scores[i] > 0), key=lambda i: (-float(scores[i]), i))
        result = tuple(ranked)
        with self._lock:
            self._cache[key] = result
            if len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return result


_INDEXES: dict[str, SearchIndex] = {}
_INDEX_LOCK = threading.Lock()


def index_for(products: list[Product], cache_dir: str | None = None) -> SearchIndex:
    """The process-wide index of this catalog (loaded from ``cache_dir`` or built on first use)."""
    key = catalog_fingerprint(products)
    with _INDEX_LOCK:
        if key not in _INDEXES:
            _INDEXES[key] = SearchIndex(products, cache_dir)
        return _INDEXES[key]
