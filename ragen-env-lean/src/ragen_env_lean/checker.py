"""The one small interface both checker backends implement, and the verdict rules of spec 13.9.

A backend takes ``(header, body)``: the header is the import block (elaborated once and reused
by the REPL), the body everything after it (preamble, statement, tactics). The full Lean text is
``header + "\\n\\n" + body`` (just ``body`` when the header is empty); every message position a backend returns is a line of that full
text, whichever backend produced it. A backend never decides whether a proof is right: it returns
what Lean said (:class:`CheckResult`), or, when it could not ask Lean, a transport status
(``timeout``, ``server_error``) with the reason. :func:`verdict` turns Lean's answer into the
env's accepted / success flags:

* transport failure (timeout, dead process, HTTP error, malformed reply) or a REPL-level error
  (the REPL's ``{"message": ...}`` answer): rejected;
* a reply that is not a REPL response at all (``{}``, the request echoed back by ``cat``, any
  JSON without ``env`` / ``messages`` / ``sorries``): a transport failure flagged ``not_lean``.
  It is not a verdict but a misconfigured checker, and the env ends the run on it (one
  :class:`~ragen_core.errors.ConfigError` naming ``env_config.repl_command`` or
  ``env_config.server_url``) instead of training on it;
* otherwise *accepted* iff no error other than ``unsolved goals`` and no ``sorry``; *success*
  iff no error at all and no ``sorry``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Status = Literal["ok", "timeout", "server_error", "repl_error"]

#: Lean's error text when tactics ran but goals remain (the only error an accepted step may have).
UNSOLVED = "unsolved goals"
#: Lean's warning for a declaration that still contains ``sorry`` (or ``admit``).
SORRY_WARNING = "declaration uses 'sorry'"


@dataclass(frozen=True)
class LeanMessage:
    """One message of Lean, positioned in the full proof text (1-based lines, 0-based columns)."""

    severity: str
    line: int
    column: int
    end_line: int | None
    end_column: int | None
    text: str

    @property
    def is_unsolved_goals(self) -> bool:
        return self.severity == "error" and self.text.startswith(UNSOLVED)


@dataclass(frozen=True)
class CheckResult:
    """What a backend got for one proof text."""

    status: Status
    messages: tuple[LeanMessage, ...] = ()
    sorries: int = 0
    """Number of ``sorry`` goals the REPL reported."""
    error: str = ""
    """Why the check did not reach Lean (transport) or the REPL's own error message."""
    time_s: float = 0.0
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    not_lean: bool = False
    """The checker answered something that is not a Lean REPL response: the configured program or
    server is not a Lean checker (the env refuses to go on; see the module docstring)."""


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    success: bool
    timeout: bool
    has_sorry: bool


def verdict(result: CheckResult) -> Verdict:
    """Accepted / success / timeout from a check (the rules in the module docstring)."""
    if result.status != "ok":
        return Verdict(False, False, result.status == "timeout", False)
    has_sorry = result.sorries > 0 or any(m.text.startswith(SORRY_WARNING) for m in result.messages)
    errors = [m for m in result.messages if m.severity == "error"]
    accepted = not has_sorry and all(m.is_unsolved_goals for m in errors)
    return Verdict(accepted, accepted and not errors, False, has_sorry)


class NotLeanReply(ValueError):
    """A reply that is not a Lean REPL response (raised by :func:`parse_response`)."""


#: Fields of which a REPL command response has at least one (``{"env": n}`` for a clean check).
REPL_FIELDS = ("env", "messages", "sorries")

#: A check that any Lean answers in well under a second (no imports): what a checker is probed with.
PROBE_CODE = "example : True := trivial"


def transport_failure(reason: str, time_s: float = 0.0, *, not_lean: bool = False) -> CheckResult:
    """A check that never reached Lean: ``timeout`` when the reason says "timed out", else ``server_error``
    (``not_lean``: the other end is not a Lean checker at all)."""
    status: Status = "timeout" if "timed out" in reason.lower() and not not_lean else "server_error"
    return CheckResult(status, error=reason, time_s=time_s, not_lean=not_lean)


def parse_response(response: dict[str, Any], line_offset: int = 0, time_s: float = 0.0) -> CheckResult:
    """A REPL command response (the same JSON inside a Kimina result) as a :class:`CheckResult`.

    ``line_offset`` is added to every line number (the REPL backend checks the body without the
    header lines). A response with a top-level ``message`` is the REPL's own error (``repl_error``).

    Raises:
        NotLeanReply: (a ValueError) not a REPL response at all: not a JSON object, an echoed
            request (a ``cmd`` field), or none of ``env`` / ``messages`` / ``sorries``.
        ValueError: a REPL response with a malformed message.
    """
    if not isinstance(response, dict):
        raise NotLeanReply(f"expected a JSON object, got {type(response).__name__}")
    if "cmd" in response:
        raise NotLeanReply(f"the request came back as the reply: {_short(response)}")
    if "message" in response and "messages" not in response:
        return CheckResult("repl_error", error=str(response["message"]), time_s=time_s, raw=response)
    if not any(key in response for key in REPL_FIELDS):
        raise NotLeanReply(f"the reply {_short(response)} has none of a REPL response's fields ({', '.join(REPL_FIELDS)})")
    if not isinstance(response.get("messages") or [], list) or not isinstance(response.get("sorries") or [], list):
        raise NotLeanReply(f"the reply {_short(response)} has messages or sorries that are not lists")
    messages = []
    for item in response.get("messages") or []:
        if not isinstance(item, dict) or "data" not in item:
            raise ValueError(f"malformed Lean message {item!r:.200}")
        pos = item.get("pos") or {}
        end = item.get("endPos") or {}
        messages.append(LeanMessage(
            severity=str(item.get("severity", "error")),
            line=int(pos.get("line", 0)) + line_offset, column=int(pos.get("column", 0)),
            end_line=int(end["line"]) + line_offset if "line" in end else None,
            end_column=int(end["column"]) if "column" in end else None,
            text=str(item["data"]),
        ))
    sorries = response.get("sorries") or []
    return CheckResult("ok", tuple(messages), len(sorries), time_s=time_s, raw=response)


def _short(value: Any, limit: int = 100) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Checker(Protocol):
    """What the env needs from a backend."""

    def check(self, header: str, body: str) -> CheckResult:
        """Check one proof text; never raises for Lean's or the transport's failures."""
        ...

    def check_many(self, items: list[tuple[str, str]]) -> list[CheckResult]:
        """Check several proof texts (batched where the backend can); results in order."""
        ...

    def close(self) -> None:
        """Release what the backend holds (idempotent)."""
        ...


def make_checker(config: Any) -> Checker:
    """The backend ``config`` selects (``config`` is a :class:`~ragen_env_lean.config.LeanConfig`)."""
    if config.chosen_backend() == "server":
        from ragen_env_lean.server import ServerChecker

        return ServerChecker.from_config(config)
    from ragen_env_lean.repl import shared_repl

    return shared_repl(config)
