"""Entry point of the ``ragen`` command.

Each subcommand lives in its own module under :mod:`ragen_core.cli` with two functions,
``add_arguments(parser)`` and ``run(args) -> int``, and is imported only when that subcommand
runs: ``ragen plugins`` must never pay for (or be broken by) torch or a plugin import.

Errors: a :class:`ragen_core.errors.RagenError` prints its one-line message and ``hint:`` lines
to stderr and exits with status 2. Tracebacks appear only with ``-v`` or ``RAGEN_DEBUG=1``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

#: subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "plugins": ("ragen_core.cli.plugins", "list installed plugins (metadata only); 'plugins check' imports them"),
    "env": ("ragen_core.cli.env", "work with environments: 'env play NAME', 'env list'"),
    "init-env": ("ragen_core.cli.init_env", "scaffold a third-party environment package"),
    "run": ("ragen_core.cli.run", "train an agent with StarPO (PPO, GRPO, ...)"),
    "eval": ("ragen_core.cli.evaluate", "evaluate a model on an environment and export trajectories"),
    "plot": ("ragen_core.cli.plot", "draw learning curves of a run directory"),
    "diagnose": ("ragen_core.cli.diagnose", "reasoning-collapse diagnostics of a run (plots + HTML)"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragen", description="RAGEN: multi-turn RL for LLM agents.")
    parser.add_argument("-v", "--verbose", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        sp.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="show tracebacks on errors")
        if name == command:  # only the chosen command's module is imported
            importlib.import_module(module).add_arguments(sp)
    return parser


def _chosen_command(argv: list[str]) -> str | None:
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def main(argv: list[str] | None = None) -> int:
    from ragen_core.errors import RagenError

    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = "-v" in argv or "--verbose" in argv or os.environ.get("RAGEN_DEBUG") == "1"
    try:
        command = _chosen_command(argv)
        parser = build_parser(command)
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 0
        module = importlib.import_module(COMMANDS[args.command][0])
        return int(module.run(args) or 0)
    except RagenError as exc:
        if verbose:
            import traceback

            traceback.print_exc()
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
