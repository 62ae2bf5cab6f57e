"""Start-up check: refuse to run without a real Lean checker (never a guessed verdict).

:func:`check_available` is the spec's ``availability`` hook: ``ragen run`` and ``ragen env play``
call it before they build anything, and :class:`~ragen_env_lean.env.LeanEnv` calls it again when
constructed directly. It looks at the configuration and the ``PATH`` (no process is started) and,
for the server backend, asks the server once whether anything answers there (an HTTP request of at
most :data:`HEALTH_TIMEOUT_S` seconds, remembered per URL for the process), so a dead
``server_url`` is refused in one line at start instead of failing every check for minutes. It
imports nothing heavy.

Whether what answers is a Lean checker (and whether a REPL command is one) is learnt from a real
check: the env probes its checker at reset (:meth:`~ragen_env_lean.env.LeanEnv.reset`).
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from ragen_core.errors import ConfigError
from ragen_env_lean.config import LeanConfig

#: How to get a checker, in one line: the toolchain route and the server route.
HOW_TO = ("install Lean 4 with elan (curl https://raw.githubusercontent.com/leanprover/elan/master/elan-init.sh -sSf | sh), "
          "build the Lean REPL in a Mathlib project and set env_config.repl_command, "
          "or set env_config.server_url to a Kimina Lean server")


#: Seconds the start-up request to ``server_url`` may take (a live server answers at once).
HEALTH_TIMEOUT_S = 3.0

_reachable: set[str] = set()
"""Server URLs that answered in this process (each is asked once)."""
_reachable_lock = threading.Lock()


def server_unreachable(url: str, timeout: float = HEALTH_TIMEOUT_S) -> str | None:
    """Why nothing answers HTTP at ``url`` (``GET {url}/health``), or None when something does.

    Any HTTP answer counts (404, 401, 501: a server is there; whether it is a Lean checker the
    env's probe tells); a refused or timed-out connection, an unknown host, or a proxy's 502 / 504
    does not.
    """
    from ragen_core.services import why_unreachable

    with _reachable_lock:
        if url in _reachable:
            return None
    why = why_unreachable(url, "/health", timeout, any_status=True)
    if why is None:
        with _reachable_lock:
            _reachable.add(url)
    return why


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
        why = server_unreachable(config.server_url, min(HEALTH_TIMEOUT_S, config.http_timeout))
        if why is not None:
            raise ConfigError(f"lean env: env_config.server_url {config.server_url} does not answer ({why}): start the Kimina Lean "
                              f"server there, or fix env_config.server_url to the address it listens on")
        return
    command = config.repl_command
    if not command:
        lean = shutil.which("lean")
        found = f"lean is on PATH ({lean}) but no REPL command is set; " if lean else "no Lean checker configured: "
        raise ConfigError(f"lean env: {found}{HOW_TO}")
    if config.repl_cwd is not None and not Path(config.repl_cwd).is_dir():
        raise ConfigError(f"lean env: env_config.repl_cwd {config.repl_cwd!r} is not a folder (it should be the Mathlib project the REPL runs in)")
    if not _program_exists(command[0], config.repl_cwd):
        raise ConfigError(f"lean env: env_config.repl_command program {command[0]!r} was not found; {HOW_TO}")
