"""Test doubles: throwaway dist-info folders for registry tests and a scripted policy."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from pathlib import Path


def fake_entry_points(
    root: str | Path,
    dist: str,
    entry_points: dict[str, dict[str, str]],
    *,
    version: str = "0.0.1",
    requires: Iterable[str] = (),
    modules: dict[str, str] | None = None,
    add_to_path: bool = True,
) -> Path:
    """Write ``<dist>-<version>.dist-info`` (METADATA + entry_points.txt) under ``root``.

    Yields real ``importlib.metadata`` entry points with ``.dist`` set, without installing
    anything. ``modules`` maps ``"pkg/mod.py"`` to source text written next to the dist-info.
    The folder is prepended to ``sys.path``, and stays there until the test removes it; with
    ``add_to_path=False`` it is not, so ``monkeypatch.syspath_prepend(root)`` can add it and undo
    that at teardown.
    """
    root = Path(root)
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    meta = ["Metadata-Version: 2.1", f"Name: {dist}", f"Version: {version}"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(meta) + "\n", encoding="utf-8")
    lines: list[str] = []
    for group, eps in entry_points.items():
        lines.append(f"[{group}]")
        lines += [f"{name} = {value}" for name, value in eps.items()]
        lines.append("")
    (info / "entry_points.txt").write_text("\n".join(lines), encoding="utf-8")
    for rel, source in (modules or {}).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
    if add_to_path and str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return root


class ScriptedPolicy:
    """A fake policy that answers with canned replies, in order, cycling when exhausted.

    Useful to drive the rollout layer or an env through the text interface without a model.
    """

    def __init__(self, replies: Iterable[str]) -> None:
        self.replies = list(replies)
        if not self.replies:
            raise ValueError("ScriptedPolicy needs at least one reply")
        self._it: Iterator[str] = iter(())
        self.calls = 0

    def __call__(self, prompt: str = "") -> str:
        reply = self.replies[self.calls % len(self.replies)]
        self.calls += 1
        return reply
