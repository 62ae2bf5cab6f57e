"""Remote backend: a Kimina Lean server over HTTP (the reference's checker).

API (the server's published client models): ``POST {server_url}/api/check`` with
``{"snippets": [{"id", "code"}], "timeout": s, "debug": false, "reuse": true}`` answers
``{"results": [{"id", "time", "error", "response"}]}``, where ``response`` is the REPL's reply for
that snippet (see :mod:`ragen_env_lean.repl`) and ``error`` a string when the server could not
check it (a Lean timeout, a crashed REPL). ``reuse`` lets the server keep REPLs whose imports are
already elaborated. ``Authorization: Bearer <api_key>`` is sent when a key is set.

The published client (``kimina-client``) is not used: it requires ``pip>=25.1``, ``loguru``,
``tenacity``, ``tqdm``, ``datasets>=4`` and more for one POST; this module is the same request
with the standard library. Transport rules:

* connection errors, HTTP 5xx and 429, HTTP timeouts and replies that are not the documented JSON
  are retried ``max_retries`` times, waiting ``retry_backoff`` seconds doubled each time (at most
  30 s); then every snippet of the request is a ``server_error`` (``timeout`` when the last
  failure was a timeout) with the reason;
* other HTTP 4xx answers (a wrong key, a wrong URL) are not retried; a 404 or 405 (no
  ``/api/check`` there) and a result whose ``response`` is not a REPL response (``{}``) are
  flagged ``not_lean``: the URL is not a Kimina Lean server, and the env refuses to go on;
* several proofs are sent ``batch_size`` at a time (:meth:`ServerChecker.check_many`).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

from ragen_env_lean.checker import PROBE_CODE, CheckResult, NotLeanReply, parse_response, transport_failure

MAX_BACKOFF_S = 30.0


class _Retryable(Exception):
    pass


class ServerChecker:
    """Checks proofs on a Kimina Lean server (see the module docstring)."""

    _probes: dict[tuple[str, str | None], CheckResult] = {}
    """``(url, api_key)`` -> the result of its probe, shared by the checkers of this process."""
    _probe_lock = threading.Lock()

    def __init__(self, url: str, *, api_key: str | None = None, request_timeout: float = 30.0, http_timeout: float = 60.0,
                 max_retries: int = 3, retry_backoff: float = 1.0, batch_size: int = 8) -> None:
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.request_timeout, self.http_timeout = request_timeout, http_timeout
        self.max_retries, self.retry_backoff, self.batch_size = max_retries, retry_backoff, batch_size
        self.requests = 0
        """HTTP requests sent so far, retries included (tests read it)."""

    @classmethod
    def from_config(cls, config: Any) -> ServerChecker:
        return cls(config.server_url, api_key=config.api_key, request_timeout=config.request_timeout,
                   http_timeout=config.http_timeout, max_retries=config.max_retries, retry_backoff=config.retry_backoff,
                   batch_size=config.batch_size)

    # ------------------------------------------------------------------ checker interface
    def check(self, header: str, body: str) -> CheckResult:
        return self.check_many([(header, body)])[0]

    def check_many(self, items: list[tuple[str, str]]) -> list[CheckResult]:
        out: list[CheckResult] = []
        for start in range(0, len(items), self.batch_size):
            out += self._check_batch(items[start:start + self.batch_size])
        return out

    def close(self) -> None:
        """Nothing held between requests."""

    def probe(self) -> CheckResult:
        """The result of one tiny check (:data:`~ragen_env_lean.checker.PROBE_CODE`, no imports),
        sent once per server and key in this process: the env reads its ``not_lean`` flag at reset."""
        key = (self.url, self.api_key)
        with self._probe_lock:
            if key not in self._probes:
                self._probes[key] = self.check("", PROBE_CODE)
            return self._probes[key]

    # ------------------------------------------------------------------ transport
    def _check_batch(self, items: list[tuple[str, str]]) -> list[CheckResult]:
        started = time.monotonic()
        ids = [uuid.uuid4().hex for _ in items]
        payload = {"snippets": [{"id": i, "code": f"{h}\n\n{b}" if h.strip() else b} for i, (h, b) in zip(ids, items)],
                   "timeout": self.request_timeout, "debug": False, "reuse": True}
        reason = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(min(MAX_BACKOFF_S, self.retry_backoff * 2 ** (attempt - 1)))
            try:
                results = self._post(payload)
                return [self._result(results.get(i), time.monotonic() - started) for i in ids]
            except _Retryable as exc:
                reason = str(exc)
            except urllib.error.HTTPError as exc:  # 4xx other than 429: the request itself is wrong
                reason = f"Lean server answered HTTP {exc.code}: {_body(exc)}"
                if exc.code in (404, 405):  # no POST /api/check there: not a Kimina server
                    return [transport_failure(f"{reason} (no POST {self.url}/api/check)", time.monotonic() - started, not_lean=True)
                            for _ in items]
                break
        return [transport_failure(reason, time.monotonic() - started) for _ in items]

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        """``{snippet id: result}`` of one request; raises :class:`_Retryable` or HTTPError (4xx)."""
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(f"{self.url}/api/check", data=json.dumps(payload).encode("utf-8"), headers=headers, method="POST")
        self.requests += 1
        try:
            with urllib.request.urlopen(request, timeout=self.http_timeout) as reply:
                text = reply.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            if exc.code >= 500 or exc.code == 429:
                raise _Retryable(f"Lean server answered HTTP {exc.code}: {_body(exc)}") from None
            raise
        except TimeoutError:
            raise _Retryable(f"Lean server request timed out after {self.http_timeout:g} s") from None
        except (urllib.error.URLError, OSError) as exc:
            why = getattr(exc, "reason", exc)
            if isinstance(why, TimeoutError):
                raise _Retryable(f"Lean server request timed out after {self.http_timeout:g} s") from None
            raise _Retryable(f"Lean server unreachable at {self.url}: {why}") from None
        try:
            data = json.loads(text)
            results = data["results"]
            return {str(r["id"]): r for r in results}
        except (ValueError, KeyError, TypeError):
            raise _Retryable(f"Lean server sent a malformed reply: {text[:120]!r}") from None

    @staticmethod
    def _result(item: dict[str, Any] | None, elapsed: float) -> CheckResult:
        if item is None:
            return transport_failure("Lean server returned no result for this proof", elapsed)
        if item.get("error"):
            return transport_failure(str(item["error"]), elapsed)
        try:
            return parse_response(item.get("response"), 0, float(item.get("time") or elapsed))  # type: ignore[arg-type]
        except NotLeanReply as exc:
            return transport_failure(str(exc), elapsed, not_lean=True)
        except (ValueError, TypeError) as exc:
            return transport_failure(f"Lean server sent a malformed result: {exc}", elapsed)


def _body(exc: urllib.error.HTTPError) -> str:
    try:
        return exc.read().decode("utf-8", "replace").strip()[:200] or exc.reason
    except Exception:  # noqa: BLE001 - best effort: the status code is the message
        return str(exc.reason)
