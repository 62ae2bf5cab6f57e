"""Theorem statements, the proof text built from them, and the tactic parser (spec 13.9).

Splitting a formal statement: the *body* starts at the first line that begins with ``theorem``,
``lemma``, ``def``, ``example`` or ``instance``; of the lines before it, those starting with
``import`` are the *imports* and the rest (options, ``open`` lines, comments) the *preamble*.
The body must end in ``:= by`` (a trailing ``sorry`` is dropped, a bare ``:=`` gets ``by``), so
tactics can follow it.

Proof text = imports (the default imports when the statement has none) + blank line + preamble
+ blank line + statement + each accepted tactic on its own line, indented by two spaces (every
line of a multi-line tactic is indented). A statement that brings neither imports nor a preamble
gets the default preamble too.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

_BODY_START = re.compile(r"^(theorem|lemma|def|example|instance)\b")
_TRAILING_SORRY = re.compile(r"\s*\bsorry\s*$")

#: Words that start a new Lean command. A tactic holding one could end the proof block and add a
#: declaration (``axiom``) that Lean accepts without error, so such tactics are never sent.
COMMAND_WORDS = ("axiom", "theorem", "lemma", "def", "abbrev", "example", "instance", "opaque", "import", "macro",
                 "macro_rules", "syntax", "elab", "elab_rules", "notation", "infix", "infixl", "infixr", "prefix", "postfix",
                 "#exit", "#eval", "namespace", "section", "end", "universe", "variable", "attribute", "structure", "class",
                 "inductive", "mutual", "run_cmd", "run_tac", "initialize", "builtin_initialize")
_COMMAND = re.compile(r"(?<![\w.'#])(" + "|".join(re.escape(w) for w in COMMAND_WORDS) + r")(?![\w.'])")


@dataclass(frozen=True)
class Theorem:
    """One theorem to prove."""

    name: str
    imports: str
    preamble: str
    statement: str
    """The declaration up to and including ``:= by``."""
    informal: str = ""
    """The natural-language statement (may be empty)."""
    proof: tuple[str, ...] = ()
    """A known proof as tactics (the built-in set has one; never shown to the agent)."""


@dataclass(frozen=True)
class TheoremSet:
    """Training theorems and the fixed validation theorems of one configuration."""

    train: tuple[Theorem, ...]
    val: tuple[Theorem, ...]
    skipped: int = 0
    """Rows dropped because their statement could not be split."""


def split_statement(text: str) -> tuple[str, str, str]:
    """``(imports, preamble, statement)`` of a formal statement (see the module docstring).

    Raises:
        ValueError: no line starts a declaration, or the declaration cannot take tactics.
    """
    lines = text.replace("\r\n", "\n").split("\n")
    start = next((i for i, line in enumerate(lines) if _BODY_START.match(line)), None)
    if start is None:
        raise ValueError("no line starts with theorem/lemma/def/example/instance")
    head = lines[:start]
    imports = "\n".join(line for line in head if line.startswith("import"))
    preamble = "\n".join(line for line in head if not line.startswith("import")).strip("\n")
    preamble = re.sub(r"\n{3,}", "\n\n", preamble)
    statement = _TRAILING_SORRY.sub("", "\n".join(lines[start:]).rstrip())
    if statement.endswith(":="):
        statement += " by"
    if not re.search(r":=\s*by$", statement):
        raise ValueError("the statement must end with ':= by' (tactics follow it)")
    return imports, preamble, statement


def make_theorem(name: str, formal: str, *, informal: str = "", default_imports: str = "", default_preamble: str = "",
                 proof: tuple[str, ...] = ()) -> Theorem:
    """A :class:`Theorem` from a formal statement, with the defaults where it brings nothing."""
    imports, preamble, statement = split_statement(formal)
    if not imports and not preamble:
        preamble = default_preamble
    return Theorem(name, imports or default_imports, preamble, statement, informal.strip(), proof)


def indent_tactic(tactic: str) -> list[str]:
    """The proof lines of one tactic: each of its lines indented by two spaces."""
    return ["  " + line for line in tactic.split("\n")]


def body_text(theorem: Theorem, tactics: list[str] | tuple[str, ...]) -> str:
    """Everything after the imports: preamble, blank line, statement, tactics."""
    lines = [theorem.statement]
    for tactic in tactics:
        lines += indent_tactic(tactic)
    statement = "\n".join(lines)
    return f"{theorem.preamble}\n\n{statement}" if theorem.preamble else statement


def proof_text(theorem: Theorem, tactics: list[str] | tuple[str, ...]) -> str:
    """The full Lean text checked for ``tactics`` (imports, blank line, body)."""
    body = body_text(theorem, tactics)
    return f"{theorem.imports}\n\n{body}" if theorem.imports else body


def parse_tactic(text: str, max_chars: int) -> tuple[str, str | None]:
    """``(tactic, problem)``: the stripped tactic and why it is not sent to Lean (None: send it).

    The text loses its blank first and last lines, trailing spaces and common indentation; tabs
    become two spaces (Lean rejects tabs). Problems: empty; longer than ``max_chars``; a NUL
    character; a word that starts a Lean command (:data:`COMMAND_WORDS`).
    """
    lines = [line.rstrip() for line in text.replace("\t", "  ").replace("\r", "").split("\n")] if isinstance(text, str) else []
    while lines and not lines[-1].strip():
        lines.pop()
    while lines and not lines[0].strip():
        lines.pop(0)
    tactic = textwrap.dedent("\n".join(lines))  # a multi-line tactic keeps its inner indentation
    if not tactic.strip():
        return "", "empty tactic"
    if len(tactic) > max_chars:
        return tactic[:max_chars], f"tactic longer than {max_chars} characters"
    if "\x00" in tactic:
        return tactic, "tactic contains a NUL character"
    found = _COMMAND.search(tactic)
    if found:
        return tactic, f"{found.group(1)!r} starts a Lean command, not a tactic"
    return tactic, None
