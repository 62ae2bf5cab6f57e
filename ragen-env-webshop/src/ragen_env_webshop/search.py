"""BM25 product search with ``bm25s`` (pure Python and NumPy; the reference needed Java/Lucene).

The index reads each product's title, description, bullet points and option values, tokenised
by one rule for documents and queries (lower-cased alphanumeric words, English stop words
dropped). Indexes are kept per catalog fingerprint for the life of the process, so every env
and the server share one; the answers to recent queries are cached too. Ties in score are
broken by catalog order, so results never depend on the process.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict

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


def tokenize(text: str) -> list[str]:
    """Lower-cased words of ``text`` without stop words."""
    return [t for t in _TOKEN.findall(text.lower()) if t not in _STOP]


class SearchIndex:
    """BM25 over a product list; :meth:`search` returns catalog indices, best first."""

    def __init__(self, products: list[Product]) -> None:
        self.size = len(products)
        self._bm25 = bm25s.BM25()
        self._bm25.index([tokenize(p.search_text()) or ["-"] for p in products], show_progress=False)
        self._vocab = self._bm25.vocab_dict
        self._cache: OrderedDict[tuple[str, ...], tuple[int, ...]] = OrderedDict()
        self._lock = threading.Lock()

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


def index_for(products: list[Product]) -> SearchIndex:
    """The process-wide index of this catalog (built on first use)."""
    key = catalog_fingerprint(products)
    with _INDEX_LOCK:
        if key not in _INDEXES:
            _INDEXES[key] = SearchIndex(products)
        return _INDEXES[key]
