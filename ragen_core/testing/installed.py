"""Skip a test only when an optional *distribution* is missing, never because an import failed.

``pytest.importorskip("ragen_env_bandit")`` skips on any ImportError, so a bug that breaks the
package's import turns its tests into skips instead of failures. :func:`require_distribution`
asks the installed metadata instead: a distribution that is not installed skips the test (or
the module); one that is installed is then imported by the test as usual, and a broken import
fails loudly. Core modules and the core's own dependencies (torch, transformers) are imported
plainly in tests: they are never optional.
"""

from __future__ import annotations


def is_installed(distribution: str) -> bool:
    """Whether ``distribution`` (e.g. ``"ragen-env-bandit"``) is installed (metadata only, no import)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import distribution as find

    try:
        find(distribution)
    except PackageNotFoundError:
        return False
    return True


def require_distribution(distribution: str, *, module_level: bool = False) -> None:
    """Skip the calling test (``module_level=True``: the whole module) unless ``distribution`` is installed."""
    import pytest

    if not is_installed(distribution):
        pytest.skip(f"{distribution} is not installed", allow_module_level=module_level)
