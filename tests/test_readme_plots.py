"""The README's run-directory listing names every plot ``ragen plot`` draws.

A user looks for a metric's picture by the file name the listing gives under ``plots/*.png``
(``env_info.png`` holds the env's ``info_metrics``); a panel the listing does not name is a
picture nobody is told about.
"""

from __future__ import annotations

from pathlib import Path

from ragen_core.cli.plot import PANELS

ROOT = Path(__file__).resolve().parents[1]


def plots_entry() -> str:
    """The ``plots/*.png`` entry of the README's run-directory block, its continuation lines included."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  plots/*.png"))
    entry = [lines[start]]
    for line in lines[start + 1:]:
        if not line.startswith(" " * 25):  # the next entry of the listing
            break
        entry.append(line)
    return " ".join(entry)


def test_the_run_directory_listing_names_every_plot_panel():
    entry = plots_entry()
    for name in [panel.name for panel in PANELS] + ["summary"]:
        assert f"{name}.png" in entry, f"README's plots/*.png entry does not name {name}.png"

