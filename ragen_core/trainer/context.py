"""What hooks and diagnostics may see of a running trainer.

Run-directory layout (stable; ``ragen eval``, ``ragen plot``, ``ragen diagnose`` and
``--resume`` read it):

```
RUN_DIR/
  config.yaml          resolved, validated run config
  plugins.json         name, distribution and version of every plugin used
  versions.json        Python, ragen-core, torch, transformers, ... and a checkout's commit (one record per software)
  metrics.jsonl        one JSON object per step: {"step": N, "<key>": value, ...}
  rollouts/step_<N>.jsonl   (optional) trajectories of a step, one Trajectory.to_dict() per line
  checkpoints/step_<N>/     loadable Hugging Face model folder (+ trainer_state.pt)
  plots/*.png
```
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class TrainContext:
    """Handles shared with hook implementations. Treat everything as read-only."""

    config: Any
    """The resolved run config."""
    run_dir: Path
    model: Any = None
    """The current policy (a ``transformers`` causal LM), or None outside training."""
    tokenizer: Any = None
    engine: Any = None
    device: str = "cpu"
    step: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
