"""Entry point of the ``ragen`` command.

Each built-in subcommand lives in its own module under :mod:`ragen_core.cli` with two functions,
``add_arguments(parser)`` and ``run(args) -> int``, and is imported only when that subcommand
runs: ``ragen plugins`` must never pay for (or be broken by) torch or a plugin import.

Plugin distributions add subcommands the same lazy way: an entry point in the group
``ragen_core.commands`` names the command and the module implementing the
:func:`ragen_core.hookspecs.ragen_register_commands` hook (``ragen diagnose`` comes from
``ragen-diagnostics``). ``ragen --help`` lists plugin commands from entry-point metadata only;
the module is imported, and its hook called, only when one of its commands runs. A command
plugin that fails to import or to add its command is a one-line
:class:`~ragen_core.errors.PluginLoadError` naming the command and its distribution; no other
command notices it. Built-in names win over plugin commands; ``RAGEN_DISABLE_PLUGINS`` and
``RAGEN_LOAD_PLUGINS`` hide command plugins like any other.

Errors: a :class:`ragen_core.errors.RagenError` prints its one-line message and ``hint:`` lines
to stderr and exits with status 2. Tracebacks appear only with ``-v`` or ``RAGEN_DEBUG=1``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from typing import Any

from ragen_core.distributions import COMMANDS as COMMAND_DISTRIBUTIONS
from ragen_core.distributions import command_hint
from ragen_core.specs import COMMAND_GROUP  # command name -> module implementing ragen_register_commands

#: subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "plugins": ("ragen_core.cli.plugins", "list installed plugins (metadata only); 'plugins check' imports them"),
    "env": ("ragen_core.cli.env", "work with environments: 'env play NAME', 'env list'"),
    "init-env": ("ragen_core.cli.init_env", "scaffold a third-party environment package"),
    "run": ("ragen_core.cli.run", "train an agent with StarPO (PPO, GRPO, ...)"),
    "eval": ("ragen_core.cli.evaluate", "evaluate a model on an environment and export trajectories"),
    "plot": ("ragen_core.cli.plot", "draw learning curves of a run directory"),
    "warm-policy": ("ragen_core.cli.warm_policy", "build or show the warm-started tiny policy that ships with ragen-core"),
}


#: commands of first-party plugin distributions, for a hint when the distribution is missing
FIRST_PARTY_COMMANDS = COMMAND_DISTRIBUTIONS


def plugin_commands() -> dict[str, list[Any]]:
    """Installed plugin commands, ``name -> [PluginEntry]`` (several when distributions clash).

    Reads entry-point metadata only; imports no plugin. Names of built-in commands and plugins
    hidden by ``RAGEN_DISABLE_PLUGINS`` / ``RAGEN_LOAD_PLUGINS`` are left out.
    """
    from importlib.metadata import entry_points

    from ragen_core.registry import PluginEntry, Registry
    from ragen_core.specs import normalize_name

    found: dict[str, list[Any]] = {}
    for ep in entry_points(group=COMMAND_GROUP):
        dist = getattr(ep, "dist", None)
        entry = PluginEntry(kind="command", name=ep.name, value=ep.value, dist_name=normalize_name(getattr(dist, "name", None) or "unknown"),
                            dist_version=getattr(dist, "version", "") or "", entry_point=ep)
        offers = found.setdefault(ep.name, [])
        if ep.name in COMMANDS or not Registry.enabled(entry) or any((o.dist_name, o.value) == (entry.dist_name, entry.value) for o in offers):
            continue  # built-ins win; disabled; the same dist seen twice (editable metadata)
        offers.append(entry)
    return {name: offers for name, offers in found.items() if offers}


def _summary(entry: Any) -> str:
    """One-line help of a plugin command from its distribution's metadata (no import)."""
    dist = getattr(entry.entry_point, "dist", None)
    try:
        summary = (dist.metadata["Summary"] or "").strip() if dist is not None else ""
    except Exception:  # noqa: BLE001 - unreadable metadata only costs the description
        summary = ""
    summary = re.sub(r"^[\w.-]+ — ", "", summary)  # "collapse — ...": a plugin's name leading the summary is not the command's
    return f"{summary} ({entry.origin})" if summary else f"plugin command ({entry.origin})"


def _add_plugin_command(sub: Any, name: str, offers: list[Any]) -> None:
    """Import the one module that provides ``name`` and let its hook add the command to ``sub``."""
    from ragen_core.errors import DuplicatePluginError, PluginLoadError
    from ragen_core.hookspecs import make_plugin_manager

    if len({(e.dist_name, e.value) for e in offers}) > 1:
        listing = ", ".join(f"{e.origin} ({e.value})" for e in offers)
        raise DuplicatePluginError(f"command {name!r} is provided by {len(offers)} distributions: {listing}",
                                   ["set RAGEN_DISABLE_PLUGINS=" + ",".join(e.dist_name for e in offers[1:])])
    entry = offers[0]
    try:
        module = entry.entry_point.load()
        pm = make_plugin_manager()
        pm.register(module, name=f"{entry.dist_name}:{name}")
        pm.hook.ragen_register_commands(subparsers=sub)
        if name not in sub.choices or not callable(sub.choices[name].get_default("func")):
            raise LookupError(f"its ragen_register_commands hook did not add the command {name!r} with set_defaults(func=...)")
    except Exception as exc:  # anything the plugin does wrong stops this command only
        raise PluginLoadError(f"command {name!r} from {entry.origin} failed to load: {type(exc).__name__}: {exc}",
                              [f"fix or reinstall {entry.dist_name} (entry point {name} = {entry.value}), or hide it with "
                               f"RAGEN_DISABLE_PLUGINS={entry.dist_name}; -v shows the traceback"]) from exc
    try:
        sub.choices[name].add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="show tracebacks on errors")
    except argparse.ArgumentError:
        pass  # the plugin defines -v itself


def build_parser(command: str | None = None, plugins: dict[str, list[Any]] | None = None) -> argparse.ArgumentParser:
    """The ``ragen`` parser; only ``command``'s module is imported (to add its arguments)."""
    parser = argparse.ArgumentParser(prog="ragen", description="RAGEN: multi-turn RL for LLM agents.")
    parser.add_argument("-v", "--verbose", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        sp.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="show tracebacks on errors")
        if name == command:  # only the chosen command's module is imported
            importlib.import_module(module).add_arguments(sp)
    plugins = plugin_commands() if plugins is None else plugins
    chosen = plugins.get(command or "", [])
    for name, offers in plugins.items():
        if any(e.value == o.value for e in offers for o in chosen):
            continue  # the chosen command's module adds its own commands
        sp = sub.add_parser(name, help=_summary(offers[0]), description=_summary(offers[0]))
        sp.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="show tracebacks on errors")
    if command is not None and chosen:
        _add_plugin_command(sub, command, chosen)
    return parser


def _chosen_command(argv: list[str]) -> str | None:
    for arg in argv:
        if not arg.startswith("-"):
            return arg
    return None


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``parser.parse_args(argv)``, except that ``key=value`` overrides may come anywhere.

    argparse gives a ``nargs="*"`` positional only its first run of words, so in
    ``ragen run --env bandit a.b=1 --steps 1 c.d=2`` the ``c.d=2`` was "unrecognized". Commands
    with an ``overrides`` positional get every leftover ``key=value`` word appended, in command-line
    order (later ones win); anything else left over is the usual argparse error (exit 2).
    """
    args, extra = parser.parse_known_args(argv)
    if extra and isinstance(getattr(args, "overrides", None), list) and all("=" in e and not e.startswith("-") for e in extra):
        args.overrides = [*args.overrides, *extra]
    elif extra:  # said by the subcommand's parser ("usage: ragen run ..."), with the option probably meant
        import difflib

        sub = _chosen_parser(parser, args)
        options = [o for action in sub._actions for o in action.option_strings if o.startswith("--")]
        guesses = [close[0] for e in extra if e.startswith("--")
                   for close in [difflib.get_close_matches(e.split("=")[0], options, n=1, cutoff=0.6)] if close]
        sub.error(f"unrecognized arguments: {' '.join(extra)}" + (f" (did you mean {', '.join(guesses)}?)" if guesses else ""))
    return args


def _chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost parser the command line chose (``ragen warm-policy show``'s, say)."""
    while True:
        action = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        chosen = getattr(args, action.dest, None) if action is not None else None
        if action is None or chosen not in action.choices:
            return parser
        parser = action.choices[chosen]


def _raise_terminated(signum: int, frame: Any) -> None:
    """SIGTERM outside a training loop (which handles it itself): set-up's clean-up runs (a fresh
    run folder is removed, servers stop) and ``ragen`` exits 143."""
    from ragen_core.errors import Terminated

    raise Terminated


class _InterruptsUnwind:
    """While ``ragen`` runs: SIGTERM unwinds like Ctrl-C (:class:`~ragen_core.errors.Terminated`), and
    an interrupt Python could only print and drop is sent again.

    Python runs a signal handler at whatever line the main thread is on; if that line is inside a
    weak-reference callback or a ``__del__`` (importlib's module-lock callbacks during a model load),
    the exception is "ignored" and the process carries on as if nothing had come. Such a dropped
    KeyboardInterrupt/Terminated goes through :data:`sys.unraisablehook`, which sends the same signal
    again 0.1 s later, when the main thread is back in ordinary code. SIGTERM's handler is set only
    where nobody set one; everything is put back on exit (a pending resend is cancelled).
    """

    def __init__(self) -> None:
        self.previous_term: Any = None
        self.previous_hook: Any = None
        self.resends: list[Any] = []

    def __enter__(self) -> _InterruptsUnwind:
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread():
            return self
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            self.previous_term = signal.signal(signal.SIGTERM, _raise_terminated)
        self.previous_hook, sys.unraisablehook = sys.unraisablehook, self._unraisable
        return self

    def _unraisable(self, unraisable: Any) -> None:
        import signal
        import threading

        from ragen_core.errors import Terminated

        exc = unraisable.exc_value
        if not isinstance(exc, KeyboardInterrupt):
            self.previous_hook(unraisable)
            return
        sig = signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT
        resend = threading.Timer(0.1, os.kill, (os.getpid(), sig))
        resend.daemon = True
        self.resends.append(resend)
        resend.start()

    def __exit__(self, *exc: object) -> None:
        import signal

        for resend in self.resends:
            resend.cancel()
        if self.previous_hook is not None:
            sys.unraisablehook = self.previous_hook
        if self.previous_term is not None:
            signal.signal(signal.SIGTERM, self.previous_term)


def _told_torchrun(message: str) -> bool:
    """Under torchrun, write ``message`` to this rank's error file (``TORCHELASTIC_ERROR_FILE``):
    torchrun's failure summary then shows it for each failed rank, in place of a link to its docs.
    True on a rank other than 0, which then prints nothing itself: a config error is every rank's,
    and was printed once per rank before torchrun's summary repeated the failure per rank."""
    import json
    import time

    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return False
    try:
        with open(path, "x", encoding="utf-8") as out:  # "x": an error file torch's own handler wrote stays
            # torch's own layout (its ErrorHandler.record_exception), with the line for its traceback
            json.dump({"message": {"message": message, "extraInfo": {"py_callstack": message, "timestamp": str(int(time.time()))}}}, out)
    except OSError:
        return False  # unwritable or already written: print as without torchrun
    return os.environ.get("RANK", "0") != "0"


def main(argv: list[str] | None = None) -> int:
    # SIGTERM (timeout, a scheduler, kill) would end the process at once, in the middle of a model load or
    # a warm start: no clean-up and no word.
    with _InterruptsUnwind():
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    from ragen_core.errors import RagenError, Terminated

    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = "-v" in argv or "--verbose" in argv or os.environ.get("RAGEN_DEBUG") == "1"
    try:
        command, plugins = _chosen_command(argv), plugin_commands()
        if command in FIRST_PARTY_COMMANDS and command not in plugins:
            from ragen_core.errors import PluginNotFoundError

            dist = FIRST_PARTY_COMMANDS[command]
            raise PluginNotFoundError(f"'ragen {command}' comes with the {dist} distribution, which is not installed (or is disabled)",
                                      [command_hint(command)])
        parser = build_parser(command, plugins)
        args = _parse(parser, argv)
        if args.command is None:
            parser.print_help()
            return 0
        if args.command in COMMANDS:
            return int(importlib.import_module(COMMANDS[args.command][0]).run(args) or 0)
        return int(args.func(args) or 0)
    except RagenError as exc:
        if verbose:
            import traceback

            traceback.print_exc()
        if not _told_torchrun(f"{type(exc).__name__}: {exc}"):
            print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        if isinstance(exc, Terminated):
            print("terminated (SIGTERM)", file=sys.stderr)
            return 143
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (``ragen plugins | head``): stop quietly, as other CLI tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's final flush of stdout would raise again
        return 141


if __name__ == "__main__":
    raise SystemExit(main())
