"""Talking to the retrieval server: one batched HTTP call per turn, and the result text.

:class:`BatchingClient` is shared by every env of the process (one per server URL). The local
env pool steps the episodes of a turn in threads (the env spec sets ``async_step``); each
thread's search joins a pending batch, and the first thread to arrive waits ``window_s`` (a few
milliseconds) for the others, then sends *one* request in Search-R1's batched shape
(``{"queries": [...], "topk": k, "return_scores": true}``) and hands every waiting thread its
row. So a turn of 32 episodes costs a handful of HTTP requests, and the server can encode them
in one forward pass.

Servers that only know the reference's single-query shape (``{"query", "top_k"}``) are detected
from the 4xx answer to the first batched request; the client then sends one request per search.

Errors are not raised to the env as exceptions of unknown type: :class:`RetrievalError` says
what kind (``timeout``, ``connection``, ``http``) and why, and the env turns it into text (or,
when its server child died, into a failed episode).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Literal

MAX_DOC_CHARS = 800


MAX_QUERY_CHARS = 4096
"""Longest query the env sends and its server takes (a longer one is an invalid action, not a search)."""


class RetrievalError(Exception):
    def __init__(self, kind: Literal["timeout", "connection", "http"], message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        """The HTTP status of a refused search (None: no answer, or one that could not be read)."""

    @property
    def not_this_api(self) -> bool:
        """The answer says the server does not speak this API at all: no such route or method
        (404, 405, 501), or a body that is not the API's (HTML, other JSON). A busy or loading
        server (503, 429, other 5xx) or a timeout says nothing of the kind."""
        return self.kind == "http" and (self.status is None or self.status in (404, 405, 501))


@dataclass(frozen=True)
class Document:
    id: str
    content: str
    score: float


@dataclass
class _Pending:
    query: str
    k: int
    done: threading.Event = field(default_factory=threading.Event)
    result: list[Document] | None = None
    error: RetrievalError | None = None


class BatchingClient:
    """Searches of concurrent threads sent as one batched request (see module docstring)."""

    def __init__(self, url: str, *, timeout_s: float = 30.0, window_s: float = 0.005, max_batch: int = 256) -> None:
        import httpx

        self.url, self.timeout_s, self.window_s, self.max_batch = url, timeout_s, window_s, max_batch
        self._http = httpx.Client(timeout=timeout_s, limits=httpx.Limits(max_connections=32))
        self._lock = threading.Lock()
        self._pending: list[_Pending] = []
        self._leader = False
        self.requests = 0  # HTTP requests sent (tests read it)
        self.batched_ok = False  # the server answered the batched shape at least once
        self.single = False  # the server only knows the single-query shape: no batching

    def search(self, query: str, k: int) -> list[Document]:
        """The ``k`` best documents for ``query``; raises RetrievalError."""
        query = query.encode("utf-8", "replace").decode("utf-8")  # a lone surrogate cannot be sent as JSON: "?" instead
        if self.single:
            return self._single(query, k)
        item = _Pending(query, k)
        with self._lock:
            self._pending.append(item)
            lead = not self._leader
            self._leader = True
        if lead:
            item.done.wait(self.window_s)  # let the other episodes of this turn join
            with self._lock:
                batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
                self._leader = bool(self._pending)
                rest_leader = self._pending[0] if self._pending else None
            try:
                self._send_safely(batch)
            finally:
                if rest_leader is not None:  # more than max_batch waited: the next batch goes at once
                    threading.Thread(target=self._drain, daemon=True).start()
        item.done.wait()
        if item.error is not None:
            raise item.error
        assert item.result is not None
        return item.result

    def _drain(self) -> None:
        while True:
            with self._lock:
                batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
                if not batch:
                    self._leader = False
                    return
            self._send_safely(batch)

    def _send_safely(self, batch: list[_Pending]) -> None:
        """:meth:`_send`, and whatever it raises, every search of ``batch`` is answered: the other
        threads wait on it without a deadline (an unexpected error once left them waiting forever)."""
        try:
            self._send(batch)
        except Exception as e:  # noqa: BLE001 - becomes every waiting search's RetrievalError
            self._answer(batch, None, RetrievalError("http", f"the search request failed ({type(e).__name__}: {e})"))
        except BaseException as e:  # (KeyboardInterrupt and the like: wake the others, then stop)
            self._answer(batch, None, RetrievalError("http", f"the search was interrupted ({type(e).__name__})"))
            raise

    @staticmethod
    def _answer(batch: list[_Pending], results: list[list[Document]] | None, error: RetrievalError | None) -> None:
        """Hand each search of ``batch`` its row (or ``error``) and wake its thread; searches already
        answered keep their answer."""
        for i, p in enumerate(batch):
            if p.done.is_set():
                continue
            p.result = results[i] if error is None and results is not None else None
            p.error = error
            p.done.set()

    def _send(self, batch: list[_Pending]) -> None:
        import httpx

        k = max(p.k for p in batch)
        error: RetrievalError | None = None
        rows: Any = None
        body = {"queries": [p.query for p in batch], "topk": k, "return_scores": True}
        try:
            self.requests += 1
            try:
                response = self._http.post(f"{self.url}/retrieve", json=body)
            except httpx.TimeoutException:  # a TransportError too, but the server is there and slow:
                raise  # no second wait (each search of a silent server took twice retrieval_timeout)
            except httpx.TransportError:  # a pooled connection to a server that has since restarted:
                response = self._http.post(f"{self.url}/retrieve", json=body)  # a search is safe to repeat once
            if response.status_code >= 400:
                error = _http_error(response)
                if not self.batched_ok and response.status_code in (400, 404, 405, 422):
                    self._fall_back(batch)  # a server that only knows the single-query shape
                    return
            else:
                rows = response.json()["result"]
                self.batched_ok = True
        except httpx.TimeoutException:
            error = RetrievalError("timeout", f"no answer within {self.timeout_s:g} s")
        except (httpx.TransportError, OSError) as e:
            error = RetrievalError("connection", f"cannot reach {self.url} ({type(e).__name__}: {e})")
        except (ValueError, KeyError, TypeError) as e:
            error = RetrievalError("http", f"unreadable answer ({type(e).__name__}: {e})")
        results: list[list[Document]] = []
        if error is None:
            try:
                results = [[Document(str(r["document"]["id"]), str(r["document"]["contents"]), float(r["score"])) for r in row[: p.k]]
                           for p, row in zip(batch, rows, strict=True)]
            except (ValueError, KeyError, TypeError, IndexError) as e:
                error = RetrievalError("http", f"unreadable answer ({type(e).__name__}: {e})")
        self._answer(batch, results, error)  # every waiting thread is woken, whatever happened

    def _fall_back(self, batch: list[_Pending]) -> None:
        """Answer ``batch`` with single-query requests; if that works, stop batching for good."""
        for p in batch:
            try:
                p.result = self._single(p.query, p.k)
                self.single = True
            except RetrievalError as e:
                p.error = e
            p.done.set()

    def _single(self, query: str, k: int) -> list[Document]:
        """The reference's shape: ``{"query", "top_k"}`` -> ``{"results": [{"id", "content", "score"}]}``."""
        import httpx

        try:
            self.requests += 1
            response = self._http.post(f"{self.url}/retrieve", json={"query": query, "top_k": k})
            if response.status_code >= 400:
                raise _http_error(response)
            return [Document(str(r["id"]), str(r["content"]), float(r["score"])) for r in response.json()["results"][:k]]
        except httpx.TimeoutException:
            raise RetrievalError("timeout", f"no answer within {self.timeout_s:g} s") from None
        except (httpx.TransportError, OSError) as e:
            raise RetrievalError("connection", f"cannot reach {self.url} ({type(e).__name__}: {e})") from None
        except (ValueError, KeyError, TypeError) as e:
            raise RetrievalError("http", f"unreadable answer ({type(e).__name__}: {e})") from None

    @property
    def answered(self) -> bool:
        """The server has answered a search with results at least once (in either shape)."""
        return self.batched_ok or self.single

    def close(self) -> None:
        self._http.close()


def _http_error(response: Any) -> RetrievalError:
    try:
        detail = response.json().get("detail", response.text)
    except (ValueError, AttributeError):
        detail = response.text
    return RetrievalError("http", f"HTTP {response.status_code}: {str(detail)[:300]}", response.status_code)


_clients: dict[tuple[str, float], BatchingClient] = {}
_clients_lock = threading.Lock()


def client_for(url: str, timeout_s: float) -> BatchingClient:
    """The process's client for ``url`` (shared, so that all episodes batch together)."""
    with _clients_lock:
        key = (url, timeout_s)
        if key not in _clients:
            _clients[key] = BatchingClient(url, timeout_s=timeout_s)
        return _clients[key]


def mock_documents(query: str) -> list[Document]:
    """The mock mode's two fixed placeholder documents (spec 13.8)."""
    return [Document("mock_1", f"Placeholder document about '{query}'. The mock retriever has no real content.", 1.0),
            Document("mock_2", f"Another placeholder mentioning '{query}', for testing without a server.", 0.5)]


def format_results(docs: list[Document], max_total_chars: int, max_doc_chars: int = MAX_DOC_CHARS) -> str:
    """``[Document i] (ID: id, Score: s)`` + content (cut at ``max_doc_chars`` + ``...``), blank-line
    separated, the whole cut at ``max_total_chars`` + ``...`` (spec 13.8)."""
    if not docs:
        return "No relevant documents found."
    blocks = []
    for i, d in enumerate(docs, 1):
        content = d.content if len(d.content) <= max_doc_chars else d.content[:max_doc_chars] + "..."
        blocks.append(f"[Document {i}] (ID: {d.id}, Score: {d.score:.3f})\n{content}")
    text = "\n\n".join(blocks)
    return text if len(text) <= max_total_chars else text[:max_total_chars] + "..."
