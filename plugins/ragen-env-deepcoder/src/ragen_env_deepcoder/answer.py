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
    if not starter.strip():
        return code
    tree = _parse(code)
    if tree is None and _CLASS_SOLUTION.search(starter) and _parse(_AS_METHODS + code) is not None:
        # indented as a whole: methods copied out of their class with its indentation (the old rule dedented code
        # starting with 'def'); they go back into one, string literals and comments as they were
        return TYPING_PRELUDE + _AS_METHODS + code
    defs = _top_level_functions(tree)
    future, code = _future_imports(code, tree)  # they must stay first: after the prelude they were a SyntaxError
    if _CLASS_SOLUTION.search(code):
        body = code
    elif _CLASS_SOLUTION.search(starter) and defs:
        # the spec indents code that starts with 'def ' into the class: an import first, or a function without self, failed
        methods = [name for name, takes_self in defs.items() if takes_self]
        body = code if not methods else (code.rstrip("\n") + "\n\n\nclass Solution:  # the answer's top-level methods\n"
                                         + "".join(f"    {name} = {name}\n" for name in methods))
    elif _compiles(starter):
        body = starter.rstrip("\n") + "\n\n" + code
    else:
        body = code
    return future + TYPING_PRELUDE + body


_AS_METHODS = "class Solution:\n"


def _parse(code: str) -> ast.Module | None:
    """The syntax tree of ``code``, or None when it does not parse."""
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _future_imports(code: str, tree: ast.Module | None) -> tuple[str, str]:
    """(the ``from __future__ import ...`` lines that open ``code``, the rest of it); ("", code) when none or it does not parse."""
    if tree is None:
        return "", code
    lines = code.splitlines(keepends=True)
    taken: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            taken.update(range(node.lineno - 1, (node.end_lineno or node.lineno)))
        elif not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            break  # a docstring may come before them; anything else ends them
    if not taken:
        return "", code
    future = "".join(lines[i] if lines[i].endswith("\n") else lines[i] + "\n" for i in sorted(taken))
    return future, "".join(line for i, line in enumerate(lines) if i not in taken)


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
