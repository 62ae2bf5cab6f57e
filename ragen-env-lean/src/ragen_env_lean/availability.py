"""Start-up check: refuse to run without a real Lean checker (never a guessed verdict).

:func:`check_available` is the spec's ``availability`` hook: ``ragen run`` and ``ragen env play``
call it before they build anything, and :class:`~ragen_env_lean.env.LeanEnv` calls it again when
constructed directly. It only looks at the configuration and the ``PATH`` (no process is started,
no server contacted), so it is cheap and imports nothing heavy.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ragen_core.errors import ConfigError
from ragen_env_lean.config import LeanConfig

#: How to get a checker, in one line: the toolchain route and the server route.
HOW_TO = ("install Lean 4 with elan (curl https://raw.githubusercontent.com/leanprover/elan/master/elan-init.sh -sSf | sh), "
          "build the Lean REPL in a Mathlib project and set env_config.repl_command, "
          "or set env_config.server_url to a Kimina Lean server")


def _program_exists(program: str, cwd: str | None) -> bool:
    if os.sep in program:
        path = Path(program)
        if not path.is_absolute() and cwd:
            path = Path(cwd) / path
        return path.is_file() and os.access(path, os.X_OK)
    return shutil.which(program) is not None


def check_available(config: LeanConfig) -> None:
    """Raise :class:`~ragen_core.errors.ConfigError` (one line) when no checker is configured here."""
    if config.chosen_backend() == "server":
        if not config.server_url:
            raise ConfigError(f"lean env: backend 'server' needs env_config.server_url (the Kimina Lean server's base URL); or {HOW_TO}")
        return
    command = config.repl_command
    if not command:
        lean = shutil.which("lean")
        found = f"lean is on PATH ({lean}) but no REPL command is set; " if lean else "no Lean checker configured: "
        raise ConfigError(f"lean env: {found}{HOW_TO}")
    if config.repl_cwd is not None and not Path(config.repl_cwd).is_dir():
        raise ConfigError(f"lean env: env_config.repl_cwd {config.repl_cwd!r} is not a folder (it should be the Mathlib project the REPL runs in)")
    if not _program_exists(command[0], config.repl_cwd):
        raise ConfigError(f"lean env: repl_command program {command[0]!r} was not found; {HOW_TO}")
