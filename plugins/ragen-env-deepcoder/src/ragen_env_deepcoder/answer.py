"""From the model's answer to the program that runs: code fences, language, starter code.

The reference ran the answer text as is, so a fenced answer (the way most models write code)
failed to compile. Here:

* no fence in the answer: the whole answer is the program (as in the reference);
* fenced blocks: blocks tagged ``python``/``py``/``python3`` or untagged are candidates, and the
  **last** candidate is the program (models tend to end with their final version); an
  unterminated last fence runs to the end of the answer;
* fenced blocks but none in Python (``cpp``, ``java``, ...): no program (wrong language).

Starter code (function-call problems) is joined as the spec says, with one fix: the model's
code replaces the starter when it defines ``class Solution`` itself; when the starter defines
``class Solution`` and the model wrote top-level functions instead (after imports or comments
too), the starter is dropped and the functions whose first parameter is ``self`` become methods of
a ``class Solution`` added after the code (one without ``self`` is called as the top-level
function); otherwise the starter goes first only if it compiles on its own (the usual LeetCode
starter is a stub with an empty body, which would break any program after it).
Programs of problems with starter code start with ``from typing import *``, since the starter
signatures use ``List[int]`` and friends without importing them.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

#: A fence line with an optional info string, then the block up to a closing fence or the end.
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([^\n`]*)\n(.*?)(?:^[ \t]*\1[ \t]*$|\Z)", re.DOTALL | re.MULTILINE)
_PYTHON_TAGS = {"", "python", "py", "python3", "py3"}
_CLASS_SOLUTION = re.compile(r"^class\s+Solution\b", re.MULTILINE)


@dataclass(frozen=True)
class Extracted:
    """The program found in an answer, or why there is none."""

    code: str
    """The program text ('' when there is none)."""
    problem: str = ""
    """Why there is no program: ``empty``, ``wrong language (cpp)``; '' when there is one."""


def extract_code(answer: str) -> Extracted:
    """The program in ``answer`` (see the module docstring for the rules)."""
    if not isinstance(answer, str) or not answer.strip():
        return Extracted("", "empty")
    blocks = [((m.group(2).lower().split() or [""])[0], m.group(3)) for m in _FENCE.finditer(answer)]
    if not blocks:
        return Extracted(answer.strip("\n"))
    python = [body for tag, body in blocks if tag in _PYTHON_TAGS]
    if not python:
        tags = sorted({tag for tag, _ in blocks})
        return Extracted("", f"wrong language ({', '.join(tags)})")
    code = python[-1].strip("\n")
    return Extracted(code) if code.strip() else Extracted("", "empty")


def _compiles(source: str) -> bool:
    try:
        compile(source, "<starter>", "exec")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return True


#: Put before programs of problems with starter code, whose signatures use ``List[int]`` etc.
TYPING_PRELUDE = "from typing import *\n"


def assemble(starter: str, code: str) -> str:
    """The program to run: the model's ``code`` joined with the problem's ``starter`` code."""
    return assemble_program(starter, code).text


#: Where a program line came from (:attr:`Program.origins`): the answer's code, the starter code, or a
#: line this module added (the typing import, a class around indented methods, method aliases).
ANSWER, STARTER, ADDED = "solution.py", "starter code", "grader's additions"


@dataclass(frozen=True)
class Program:
    """An assembled program and, for each of its lines, where that line came from."""

    text: str
    origins: tuple[tuple[str, int], ...]
    """Per line of ``text`` (line breaks as the compiler counts them): ``(source, line)`` with source
    :data:`ANSWER` (line of the answer's code, 1 = its first line), :data:`STARTER` or :data:`ADDED`."""

    def origin(self, line: int) -> tuple[str, int]:
        """Where line ``line`` of the program came from (past the end: counted on from the last line)."""
        if 1 <= line <= len(self.origins):
            return self.origins[line - 1]
        if line > len(self.origins) and self.origins:
            source, last = self.origins[-1]
            return source, last + line - len(self.origins)
        return ANSWER, line

    def locate(self, text: str, compile_error: bool = False) -> str:
        """``text`` (a traceback or, with ``compile_error``, a compile error) with its ``solution.py``
        line numbers turned into lines of the answer's code (or of the starter code, or the additions)."""

        def inner(match: re.Match[str]) -> str:
            source, line = self.origin(int(match.group(2)))
            return f"{match.group(1)}{line}" + ("" if source == ANSWER else f" of the {source}")

        def frame(match: re.Match[str]) -> str:
            source, line = self.origin(int(match.group(3)))
            return f"{match.group(1)}{source}{match.group(2)}{line}"

        if compile_error:  # the compiler's own references: "after 'if' statement on line 3", "(detected at line 5)"
            text = _INNER_LINE.sub(inner, text)
        return _FILE_LINE.sub(frame, text)


#: ``File "solution.py", line N`` (a traceback frame) and ``(solution.py, line N)`` (a SyntaxError).
_FILE_LINE = re.compile(r'(File "|\()solution\.py(", line |, line )(\d+)')
_INNER_LINE = re.compile(r"\b((?:on|at) line )(\d+)\b")
#: One line with its line break, the breaks the compiler counts (``str.splitlines`` also splits at
#: form feeds and other characters the compiler keeps inside a line).
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def _lines(text: str) -> list[str]:
    return _LINE.findall(text)


def _chunk(text: str, source: str, numbers: list[int] | None = None) -> tuple[str, list[tuple[str, int]]]:
    """``text`` with the origin of each of its lines: ``numbers`` (its lines in ``source``), else 1, 2, ..."""
    count = len(_lines(text))
    return text, [(source, numbers[i] if numbers is not None else i + 1) for i in range(count)]


def _joined(chunks: list[tuple[str, list[tuple[str, int]]]]) -> Program:
    """One program from chunks that each start a line; lines of :data:`ADDED` are numbered across chunks."""
    added = 0
    origins: list[tuple[str, int]] = []
    for _, lines in chunks:
        for source, line in lines:
            if source == ADDED:
                added += 1
                line = added
            origins.append((source, line))
    return Program("".join(text for text, _ in chunks), tuple(origins))


def assemble_program(starter: str, code: str) -> Program:
    """:func:`assemble`, with where each line of the program came from (see :class:`Program`)."""
    if not starter.strip():
        return _joined([_chunk(code, ANSWER)])
    tree = _parse(code)
    if tree is None and _CLASS_SOLUTION.search(starter) and _parse(_AS_METHODS + code) is not None:
        # indented as a whole: methods copied out of their class with its indentation (the old rule dedented code
        # starting with 'def'); they go back into one, string literals and comments as they were
        return _joined([_chunk(TYPING_PRELUDE + _AS_METHODS, ADDED), _chunk(code, ANSWER)])
    defs = _top_level_functions(tree)
    (future, moved), (code, kept) = _future_imports(code, tree)  # they must stay first: after the prelude they were a SyntaxError
    head = [_chunk(future, ANSWER, moved), _chunk(TYPING_PRELUDE, ADDED)]
    if _CLASS_SOLUTION.search(code):
        body = [_chunk(code, ANSWER, kept)]
    elif _CLASS_SOLUTION.search(starter) and defs:
        # the spec indents code that starts with 'def ' into the class: an import first, or a function without self, failed
        methods = [name for name, takes_self in defs.items() if takes_self]
        body = [_chunk(code, ANSWER, kept)] if not methods else [
            _chunk(code.rstrip("\n") + "\n", ANSWER, kept),
            _chunk("\n\nclass Solution:  # the answer's top-level methods\n" + "".join(f"    {name} = {name}\n" for name in methods), ADDED)]
    elif _compiles(starter):
        body = [_chunk(starter.rstrip("\n") + "\n\n", STARTER), _chunk(code, ANSWER, kept)]
    else:
        body = [_chunk(code, ANSWER, kept)]
    return _joined(head + body)


_AS_METHODS = "class Solution:\n"


def _parse(code: str) -> ast.Module | None:
    """The syntax tree of ``code``, or None when it does not parse."""
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _future_imports(code: str, tree: ast.Module | None) -> tuple[tuple[str, list[int]], tuple[str, list[int]]]:
    """The ``from __future__ import ...`` lines that open ``code`` and the rest of it, each with its
    line numbers in ``code``; nothing and all of ``code`` when there are none or it does not parse."""
    lines = _lines(code)
    everything = list(range(1, len(lines) + 1))
    if tree is None:
        return ("", []), (code, everything)
    taken: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            taken.update(range(node.lineno - 1, (node.end_lineno or node.lineno)))
        elif not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            break  # a docstring may come before them; anything else ends them
    if not taken:
        return ("", []), (code, everything)
    future = "".join(lines[i] if lines[i].endswith(("\n", "\r")) else lines[i] + "\n" for i in sorted(taken))
    rest = "".join(line for i, line in enumerate(lines) if i not in taken)
    return (future, [i + 1 for i in sorted(taken)]), (rest, [i + 1 for i in range(len(lines)) if i not in taken])


def _top_level_functions(tree: ast.Module | None) -> dict[str, bool]:
    """The module-level functions of ``tree`` and whether each takes ``self`` first ({} without a tree)."""
    if tree is None:
        return {}
    return {node.name: bool(node.args.posonlyargs + node.args.args) and (node.args.posonlyargs + node.args.args)[0].arg == "self"
            for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


#: ``def name(self, ...)`` inside a starter's ``class Solution``, or a top-level ``def name(``.
_METHOD = re.compile(r"^[ \t]+def\s+([A-Za-z_]\w*)\s*\(\s*self\b", re.MULTILINE)
_FUNCTION = re.compile(r"^def\s+([A-Za-z_]\w*)\s*\(", re.MULTILINE)


def function_name(starter: str) -> str | None:
    """Name of the function a function-call problem's starter code asks for, if it shows one."""
    if _CLASS_SOLUTION.search(starter or ""):
        match = _METHOD.search(starter)
        if match:
            return match.group(1)
    match = _FUNCTION.search(starter or "")
    return match.group(1) if match else None
