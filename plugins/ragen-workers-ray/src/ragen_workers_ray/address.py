"""Where the ray pool's cluster is, and whether it answers (light: no Ray import, used by the spec's
availability check before a run builds anything)."""

from __future__ import annotations

import os
from typing import Any

from ragen_core.errors import ConfigError


def resolve_address(address: str | None) -> str | None:
    """The cluster address a pool joins: ``address``, else ``RAY_ADDRESS``, else None (local)."""
    return address or os.environ.get("RAY_ADDRESS") or None


def check_reachable(address: str, timeout_s: float, *, from_env: bool = False) -> None:
    """Refuse a ``host:port`` (or ``ray://host:port``) address that does not accept a TCP connection.

    Ray itself would keep retrying for minutes; this answers in at most ``timeout_s``.
    ``"auto"``/``"local"`` are left to Ray.

    ``from_env``: the address came from ``RAY_ADDRESS``, not ``rollout.pool_config.address``
    (the errors then say so).

    Raises:
        ConfigError: nothing answers there, or the address is not ``host:port``.
    """
    if address in ("auto", "local"):
        return
    where = " (from the RAY_ADDRESS environment variable)" if from_env else ""
    fix = "fix RAY_ADDRESS, or unset it" if from_env else "fix rollout.pool_config.address, or unset it"
    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"ray pool: address {address!r}{where} is not host:port",
                          [f"{fix}; example: 10.0.0.5:6379 (the port 'ray start --head' prints)"])
    from ragen_core.services import why_unreachable

    reason = why_unreachable(f"tcp://{host}:{port}" if host.startswith("[") or ":" not in host else f"tcp://[{host}]:{port}", timeout=timeout_s)
    if reason is not None:
        raise ConfigError(
            f"ray pool: no Ray cluster answers at address {address!r}{where} ({reason})",
            [f"start the cluster's head there ('ray start --head'), {fix} to start Ray on this machine"],
        )


def check_available(config: Any) -> None:
    """The spec's availability check: a cluster address (``rollout.pool_config.address`` or
    ``RAY_ADDRESS``) must be ``host:port`` and answer within ``connect_timeout_s``, said before a
    run loads its model or warm-starts (the pool checks it again when it connects)."""
    address = resolve_address(config.address)
    if address is not None:
        check_reachable(address, config.connect_timeout_s, from_env=not config.address)
