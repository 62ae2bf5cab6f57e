"""Exception hierarchy for RAGEN.

Every error a user can cause (a misspelt plugin, a broken install, a bad config value) is a
:class:`RagenError`. Its ``str()`` is a one-line statement of what failed, optionally followed by
lines that start with ``hint:`` and name one concrete action. The CLI prints exactly that and
exits with status 2; tracebacks appear only with ``-v`` or ``RAGEN_DEBUG=1``.
"""

from __future__ import annotations

import shlex

#: Longest message or hint an error keeps; the rest is cut with a note of how much. Messages
#: quote user input (paths, values, env output), and one must never bury the terminal or a log.
MAX_LINE_CHARS = 1000


def _capped(text: str) -> str:
    text = str(text)
    if len(text) <= MAX_LINE_CHARS:
        return text
    return f"{text[:MAX_LINE_CHARS]}... ({len(text) - MAX_LINE_CHARS} more characters)"


def shell_word(value: object) -> str:
    """``value`` as one word of a suggested command (``ragen run --resume DIR``): quoted when it holds
    spaces or shell characters, so the line can be pasted as printed. Double quotes, with ``$ ` " \\``
    escaped (hints put whole commands in single quotes, which a single-quoted word inside would end),
    except for a ``!``, which only the shell's single-quote form keeps from history expansion. A word
    holding a character that does not print (a newline, a tab) is written in bash's ``$'...'`` form
    with that character escaped, so the suggestion stays on one line and still pastes."""
    text = str(value)
    if shlex.quote(text) == text:
        return text
    if not text.isprintable():
        return "$'" + "".join(_ansi_c_escaped(c) for c in text) + "'"
    if "!" in text:  # history expansion in an interactive shell: only single quotes keep it out
        return shlex.quote(text)
    return '"' + "".join("\\" + c if c in '"$`\\' else c for c in text) + '"'  # \$ \` \" \\ inside double quotes


_C_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\\": "\\\\", "'": "\\'", "!": "\\x21"}
"""Characters ``$'...'`` writes escaped: its own quote and backslash, ``!`` (no history expansion), common controls."""


def _ansi_c_escaped(char: str) -> str:
    """``char`` inside bash's ``$'...'``: itself when it prints, else its UTF-8 bytes as ``\\xHH``
    escapes (a byte of a file name that is not UTF-8, which Python holds as a lone surrogate, as that byte)."""
    if char in _C_ESCAPES:
        return _C_ESCAPES[char]
    if char.isprintable():
        return char
    return "".join(f"\\x{byte:02x}" for byte in char.encode("utf-8", "surrogateescape"))


class RagenError(Exception):
    """Base class of every error RAGEN raises on purpose (message and hints capped at :data:`MAX_LINE_CHARS`)."""

    def __init__(self, message: str, hints: list[str] | tuple[str, ...] = ()) -> None:
        self.message = _capped(message)
        self.hints = [_capped(h) for h in hints if h]
        super().__init__(self.__str__())

    def __str__(self) -> str:
        lines = [self.message] + [f"hint: {h}" for h in self.hints]
        return "\n".join(lines)


class ConfigError(RagenError, ValueError):
    """A configuration value, key, or file is invalid. The message names the field path."""

    #: The pydantic ValidationError the message words, when a model's constructor raised this one
    #: (the registry reads its model and field when a plugin's module fails that way as it loads).
    validation: object = None


class RegistryError(RagenError):
    """Something went wrong finding or loading a plugin."""


class PluginNotFoundError(RegistryError, LookupError):
    """No installed or registered plugin has the requested name.

    A LookupError and not a KeyError: ``str(KeyError(msg))`` wraps the message in quotes.
    """


class PluginLoadError(RegistryError):
    """The requested plugin is installed but importing or validating it failed."""


class DuplicatePluginError(RegistryError):
    """Two different distributions (or registrations) provide the same kind and name."""


class IncompatiblePluginError(RegistryError):
    """The plugin's declared ragen-core requirement or API version does not match this core."""


class PluginConfigError(ConfigError, RegistryError):
    """A plugin's config failed pydantic validation; the message carries the field path."""


class PluginError(RagenError):
    """A plugin raised, or returned something the trainer cannot use, while a run called it.

    The message names the plugin (kind, name, distribution) and the call; the plugin's own
    exception is the ``__cause__`` (``ragen -v`` shows its traceback).
    """


class EnvError(RagenError):
    """An environment misbehaved (e.g. returned a NaN reward); names the env and the seed."""


class CheckpointError(RagenError):
    """A checkpoint cannot be used or written: damaged, holding more than plain data, or a failed write.

    The message names the checkpoint folder and the file concerned.
    """


class TrainingError(RagenError):
    """Training cannot go on (it diverged: optimiser steps kept being skipped); names the newest checkpoint."""


class UsageError(RagenError, ValueError):
    """A Python caller handed a RAGEN API something it does not take: a dict where a request
    object belongs, a step for an episode that is not running, a seed out of range. The message
    names the argument and what it takes."""


class ResourceError(RagenError):
    """The run cannot fit the hardware (memory, context length); raised before rollout starts."""


class Terminated(KeyboardInterrupt):
    """SIGTERM turned into an exception (``ragen`` outside a training loop; the trainer on a second
    SIGTERM): unwinds like Ctrl-C, so clean-up runs, and ``ragen`` exits 143 instead of 130."""
