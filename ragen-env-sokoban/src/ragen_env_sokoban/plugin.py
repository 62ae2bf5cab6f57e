"""Entry point of the Sokoban env: a light spec with the reference's tags as presets."""

from __future__ import annotations

from ragen_core.specs import EnvSpec
from ragen_env_sokoban.config import SokobanConfig

# Presets must survive JSON (the spec round-trips), so no tuples and no int dict keys here.
_VOCAB_LOOKUP = {"0": "W", "1": ".", "2": "G", "3": "C", "4": "B", "5": "A", "6": "@"}
_VOCAB_MEANING = {
    "W": "wall",
    ".": "empty",
    "G": "target",
    "C": "box on target",
    "B": "box",
    "A": "player",
    "@": "player on target",
}

SPEC = EnvSpec(
    name="sokoban",
    summary="Sokoban: push every box onto a target in a small generated room (multi-step planning)",
    config_model=SokobanConfig,
    factory="ragen_env_sokoban.env:SokobanEnv",
    presets={
        "SimpleSokoban": {"dim_room": [6, 6], "num_boxes": 1, "max_steps": 100},
        "LargerSokoban": {
            "dim_room": [8, 8],
            "num_boxes": 2,
            "max_steps": 100,
            "search_depth": 10,
        },
        "SokobanDifferentGridVocab": {
            "dim_room": [6, 6],
            "num_boxes": 1,
            "search_depth": 30,
            "grid_lookup": _VOCAB_LOOKUP,
            "grid_vocab": _VOCAB_MEANING,
        },
        "CoordSokoban": {
            "dim_room": [6, 6],
            "num_boxes": 1,
            "max_steps": 100,
            "observation_format": "grid_coord",
            "max_tokens": 120,
        },
        "VisualSimpleSokoban": {
            "dim_room": [6, 6],
            "num_boxes": 1,
            "render_mode": "rgb_array",
        },
    },
)
