"""The retrieval server (FastAPI on uvicorn) and the ``ragen-searchqa`` command.

Endpoints:

* ``GET /health`` -- liveness: always 200 while the process serves HTTP, with ``status``
  (``loading``, ``healthy`` or ``error``), ``index_loaded``, ``corpus_size`` and ``index_type``
  (the reference's fields).
* ``GET /ready`` -- readiness: 200 once the index is loaded, 503 while it loads, 500 if it failed to.
  The env's service helper waits on this path, so a server still mapping a large index is alive
  but not yet used.
* ``POST /retrieve`` -- two request shapes:

  - the reference's: ``{"query": str, "top_k": int}`` (``k`` also accepted) ->
    ``{"query", "method", "results": [{"id", "title", "content", "score"}], "num_results"}``;
  - Search-R1's batched one: ``{"queries": [str, ...], "topk": int, "return_scores": bool}`` ->
    ``{"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}`` (without scores each
    entry is the document itself).

Bad input never reaches the index: a body that is not JSON, not an object, a missing, empty,
non-string or over-long query, too many queries, or a ``top_k`` that is not an integer in
``1..max_top_k`` is answered 400 with a one-line ``detail`` naming what to fix; a body over
``max_body_bytes`` 413; a search before the index is loaded 503; an error inside the search 500.
The server keeps serving after each of these.

Micro-batching: requests do not call the index themselves. They queue their queries, and one
worker takes *everything queued at that moment* (up to ``max_batch`` queries), runs a single
``Index.search`` on it (one encoder forward pass for the dense backends) in a thread, and hands
each request its rows. While one batch is being encoded the next one fills up, so under load
batches grow by themselves and an idle server adds no waiting. If a batch's search raises, its
requests are searched one by one, so one bad query fails only its own request. ``--no-batching``
searches each request on its own behind the encoder's lock, as the reference did (the bench compares both).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
import threading
import time
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from ragen_core.errors import ConfigError
from ragen_env_searchqa.client import MAX_QUERY_CHARS

MAX_TOP_K = 100
MAX_QUERIES = 1024
MAX_BODY_BYTES = 4 * 1024 * 1024


class BadRequest(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


class Batcher:
    """Collects the queries of concurrent requests and searches them in one call (see module doc)."""

    def __init__(self, search: Any, max_batch: int, wait_s: float = 0.0) -> None:
        self.search, self.max_batch, self.wait_s = search, max_batch, wait_s
        self.queue: asyncio.Queue[tuple[list[str], int, asyncio.Future[Any]]] = asyncio.Queue()
        self.batches = 0
        self.queries = 0
        self.search_s = 0.0  # time spent inside the index's search (the rest is HTTP and queueing)
        self.task: asyncio.Task[None] | None = None

    async def submit(self, queries: list[str], k: int) -> Any:
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._run())
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self.queue.put((queries, k, future))
        return await future

    async def _run(self) -> None:
        while True:
            items = [await self.queue.get()]
            size = len(items[0][0])
            deadline = time.monotonic() + self.wait_s
            while size < self.max_batch:
                if self.queue.empty():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    try:  # a short wait lets requests still being parsed join this batch
                        items.append(await asyncio.wait_for(self.queue.get(), left))
                    except asyncio.TimeoutError:
                        break
                else:
                    items.append(self.queue.get_nowait())
                size += len(items[-1][0])
            queries = [q for qs, _, _ in items for q in qs]
            k = max(k for _, k, _ in items)
            self.batches += 1
            self.queries += len(queries)
            started = time.perf_counter()
            try:
                rows = await asyncio.to_thread(self.search, queries, k)
            except Exception:  # noqa: BLE001 - search the requests one by one: only the bad one fails
                rows = None
            self.search_s += time.perf_counter() - started
            start = 0
            for qs, k_i, future in items:
                try:
                    mine = rows[start : start + len(qs)] if rows is not None else await asyncio.to_thread(self.search, qs, k_i)
                except Exception as e:  # noqa: BLE001 - this request's 500, not the server's end
                    if not future.done():
                        future.set_exception(e)
                else:
                    if not future.done():
                        future.set_result([row[:k_i] for row in mine])
                start += len(qs)


def _parse(body: bytes, max_top_k: int, max_query_chars: int) -> tuple[list[str], int, bool, bool]:
    """(queries, k, batched shape, return_scores) of a request body, or BadRequest."""
    if len(body) > MAX_BODY_BYTES:
        raise BadRequest(413, f"request body is {len(body)} bytes; at most {MAX_BODY_BYTES} allowed")
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(400, f"request body is not valid JSON ({e}); send {{\"query\": \"...\", \"top_k\": 5}}") from None
    if not isinstance(data, dict):
        raise BadRequest(400, f"request body must be a JSON object, got {type(data).__name__}")
    if ("query" in data) == ("queries" in data):
        raise BadRequest(400, "give exactly one of 'query' (a string) or 'queries' (a list of strings)")
    batched = "queries" in data
    queries = data["queries"] if batched else [data["query"]]
    if not isinstance(queries, list) or not queries:
        raise BadRequest(400, "'queries' must be a non-empty list of strings")
    if len(queries) > MAX_QUERIES:
        raise BadRequest(400, f"{len(queries)} queries in one request; at most {MAX_QUERIES} allowed")
    name = "queries" if batched else "query"
    for i, q in enumerate(queries):
        where = f"{name}[{i}]" if batched else name
        if not isinstance(q, str):
            raise BadRequest(400, f"{where} must be a string, got {type(q).__name__}")
        if not q.strip():
            raise BadRequest(400, f"{where} is empty")
        if len(q) > max_query_chars:
            raise BadRequest(400, f"{where} is {len(q)} characters long; at most {max_query_chars} allowed")
        try:
            q.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate ("\ud800" in the JSON): echoing it back failed with a 500
            raise BadRequest(400, f"{where} holds a lone UTF-16 surrogate, which is not text; send valid Unicode") from None
    keys = [key for key in ("top_k", "k", "topk") if key in data]
    if len(keys) > 1:
        raise BadRequest(400, f"give one of top_k, k, topk (got {', '.join(keys)})")
    k = data[keys[0]] if keys else (3 if batched else 10)
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= max_top_k:
        raise BadRequest(400, f"{keys[0] if keys else 'top_k'} must be an integer from 1 to {max_top_k}, got {k!r}")
    scores = data.get("return_scores", False)
    if not isinstance(scores, bool):
        raise BadRequest(400, f"return_scores must be true or false, got {scores!r}")
    return queries, k, batched, scores


def create_app(load: Any, *, backend: str = "bm25", batching: bool = True, max_batch: int = 256, batch_wait_s: float = 0.0,
               max_top_k: int = MAX_TOP_K, max_query_chars: int = MAX_QUERY_CHARS) -> Any:
    """The ASGI app; ``load()`` returns the :class:`~ragen_env_searchqa.index.Index` (run in a thread at start-up)."""
    state: dict[str, Any] = {"index": None, "error": None, "batcher": None}

    def load_in_background() -> None:
        try:
            state["index"] = load()
        except Exception as e:  # noqa: BLE001 - reported by /health and /ready; the process stays up
            state["error"] = f"{type(e).__name__}: {e}"
            print(f"ragen-searchqa: could not load the index: {state['error']}", file=sys.stderr, flush=True)

    @asynccontextmanager
    async def lifespan(app: Any) -> Any:
        threading.Thread(target=load_in_background, name="index-loader", daemon=True).start()
        yield
        if state["index"] is not None:
            state["index"].close()

    app = FastAPI(title="RAGEN SearchQA retriever", lifespan=lifespan)
    app.state.searchqa = state

    def search(queries: list[str], k: int) -> Any:
        return state["index"].search(queries, k)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        index = state["index"]
        status = "healthy" if index is not None else "error" if state["error"] else "loading"
        batcher = state["batcher"]
        return {"status": status, "index_loaded": index is not None, "corpus_size": len(index) if index else 0,
                "index_type": backend, "error": state["error"], "batches": batcher.batches if batcher else 0,
                "batched_queries": batcher.queries if batcher else 0, "search_s": round(batcher.search_s, 3) if batcher else 0.0}

    @app.get("/ready")
    async def ready() -> JSONResponse:
        if state["index"] is None:  # 500: it will never be ready (whoever started it stops waiting); 503: not yet
            if state["error"]:
                return JSONResponse({"ready": False, "detail": f"index failed to load: {state['error']}"}, status_code=500)
            return JSONResponse({"ready": False, "detail": "index is still loading"}, status_code=503)
        return JSONResponse({"ready": True, "corpus_size": len(state["index"])})

    @app.post("/retrieve")
    async def retrieve(request: Request) -> JSONResponse:
        try:
            queries, k, batched, with_scores = _parse(await request.body(), max_top_k, max_query_chars)
        except BadRequest as e:
            return JSONResponse({"detail": e.detail}, status_code=e.status)
        index = state["index"]
        if index is None:
            return JSONResponse({"detail": "index is still loading; retry when GET /ready answers 200"}, status_code=503)
        try:
            if batching:
                if state["batcher"] is None:
                    state["batcher"] = Batcher(search, max_batch, batch_wait_s)
                rows = await state["batcher"].submit(queries, k)
            else:
                rows = await asyncio.to_thread(search, queries, k)
        except Exception as e:  # noqa: BLE001 - a failed search is this request's 500, not the server's end
            return JSONResponse({"detail": f"search failed: {type(e).__name__}: {e}"}, status_code=500)
        docs = [[(index.docs.get(h.doc), h.score) for h in row] for row in rows]
        if batched:
            def entry(p: Any, s: float) -> Any:
                doc = {"id": p.id, "contents": p.contents}
                return {"document": doc, "score": s} if with_scores else doc
            return JSONResponse({"result": [[entry(p, s) for p, s in row] for row in docs]})
        results = [{"id": p.id, "title": p.title, "content": p.contents, "score": s} for p, s in docs[0]]
        return JSONResponse({"query": queries[0], "method": backend, "results": results, "num_results": len(results)})

    return app


# ---------------------------------------------------------------------------------- command line
def cache_root(folder: str | None = None) -> str:
    """Where indexes built from ``--corpus`` or the world are kept (``--cache-dir``, else
    ``$RAGEN_SEARCHQA_CACHE``, else ``~/.cache/ragen/searchqa``)."""
    return folder or os.environ.get("RAGEN_SEARCHQA_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "ragen", "searchqa")


def _cached_index(key: str, passages: Any, backends: list[str], model: str, device: str | None, cache: str | None) -> str:
    """Folder of a cached index built from ``passages`` (built on first use)."""
    from ragen_env_searchqa.index import build_index

    digest = hashlib.sha256(json.dumps([key, sorted(backends), model]).encode()).hexdigest()[:16]
    folder = os.path.join(cache_root(cache), digest)
    if not os.path.isfile(os.path.join(folder, "manifest.json")):
        os.makedirs(cache_root(cache), exist_ok=True)
        build_index(passages(), folder, backends=backends, model=model, device=device, progress=False)
    return folder


def _index_folder(args: argparse.Namespace) -> str:
    """The index to serve: ``--index``, or one built (and cached) from ``--corpus`` or the built-in world."""
    backends = ["bm25", "dense"] if args.backend == "hybrid" else [args.backend]
    if args.index:
        return str(args.index)
    if args.corpus:
        from ragen_env_searchqa.data import iter_corpus

        st = os.stat(args.corpus)
        key = f"corpus:{os.path.abspath(args.corpus)}:{st.st_size}:{st.st_mtime_ns}"
        return _cached_index(key, lambda: iter_corpus(args.corpus), backends, args.model, args.device, args.cache_dir)
    from ragen_env_searchqa.world import build_world

    passages = build_world(args.world_seed, args.world_size).passages
    # keyed by the text itself, so a change to the world generator never serves a stale index
    key = "world:" + hashlib.sha256("\n".join(p.contents for p in passages).encode()).hexdigest()
    return _cached_index(key, lambda: iter(passages), backends, args.model, args.device, args.cache_dir)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from ragen_env_searchqa.index import Index

    def load() -> Any:
        started = time.monotonic()
        index = Index(_index_folder(args), backend=args.backend, device=args.device)
        print(f"ragen-searchqa: {len(index)} passages ({args.backend}) ready in {time.monotonic() - started:.1f} s",
              file=sys.stderr, flush=True)
        return index

    app = create_app(load, backend=args.backend, batching=not args.no_batching, max_batch=args.max_batch, batch_wait_s=args.batch_wait_ms / 1000,
                     max_top_k=args.max_top_k, max_query_chars=args.max_query_chars)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False, backlog=4096)
    return 0


def _build(args: argparse.Namespace) -> int:
    from ragen_env_searchqa.data import iter_corpus
    from ragen_env_searchqa.index import build_index
    from ragen_env_searchqa.world import build_world

    backends = ["bm25", "dense"] if "hybrid" in args.backend else list(dict.fromkeys(args.backend))
    if args.corpus:
        with open(args.corpus, "rb") as f:
            total = sum(1 for line in f if line.strip())
        passages: Any = iter_corpus(args.corpus)
    else:
        passages = build_world(args.world_seed, args.world_size).passages
        total = len(passages)
    started = time.monotonic()
    build_index(passages, args.out, backends=backends, model=args.model, device=args.device, batch_size=args.batch_size,
                total=total, progress=not args.quiet)
    print(f"index of {total} passages ({', '.join(backends)}) written to {args.out} in {time.monotonic() - started:.1f} s")
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    from ragen_env_searchqa.index import DEFAULT_MODEL

    p.add_argument("--corpus", help="JSONL corpus ({id, contents} or {id, title, text} per line); default: the built-in world")
    p.add_argument("--model", default=DEFAULT_MODEL, help="sentence-transformers name or path for dense (default: bundled MiniLM)")
    p.add_argument("--device", default=None, help="torch device of the encoder (cpu, cuda, cuda:1; default: best available)")
    p.add_argument("--world-seed", type=int, default=0, help="seed of the built-in world")
    p.add_argument("--world-size", type=int, default=400, help="people in the built-in world")


def main(argv: list[str] | None = None) -> int:
    """``ragen-searchqa serve ...`` / ``ragen-searchqa build-index ...``."""
    parser = argparse.ArgumentParser(prog="ragen-searchqa", description="SearchQA retrieval server and index builder.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve an index over HTTP (POST /retrieve, GET /health, GET /ready)")
    _common(serve)
    serve.add_argument("--index", help="index folder written by build-index (else one is built and cached from --corpus or the world)")
    serve.add_argument("--cache-dir", help="where indexes built from --corpus or the world are kept")
    serve.add_argument("--backend", choices=["bm25", "dense", "hybrid"], default="bm25")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--no-batching", action="store_true", help="search each request on its own (the reference's behaviour)")
    serve.add_argument("--max-batch", type=int, default=256, help="queries searched together at most")
    serve.add_argument("--batch-wait-ms", type=float, default=0.0,
                       help="after the first waiting query, wait this long for more before searching (0: take what is queued)")
    serve.add_argument("--max-top-k", type=int, default=MAX_TOP_K)
    serve.add_argument("--max-query-chars", type=int, default=MAX_QUERY_CHARS)
    serve.add_argument("--log-level", default="warning")
    build = sub.add_parser("build-index", help="write an index folder (with a progress bar)")
    _common(build)
    build.add_argument("--out", required=True, help="index folder to write (replaced if it exists)")
    build.add_argument("--backend", nargs="+", choices=["bm25", "dense", "hybrid"], default=["bm25"])
    build.add_argument("--batch-size", type=int, default=256, help="passages per encoder batch")
    build.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    try:
        return _serve(args) if args.command == "serve" else _build(args)
    except ConfigError as e:
        print(f"ragen-searchqa: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
