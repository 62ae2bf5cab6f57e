"""Pieces for end-to-end tests of ``ragen run`` that must reach an env's ``step`` on purpose.

The tiny model rarely writes a parseable action before training, so a test that needs an env's
``step`` to run (a hanging env, an env returning a bad reward) drives the rollout with canned
replies: :data:`SCRIPTED_ENGINE_SPEC` is the :class:`~ragen_core.engines.scripted.ScriptedEngine`
as an engine plugin (``engine=test-scripted engine_config.replies=[...]``); the model still loads
and trains on those replies. None of this is installed as an entry point: tests register it in
their own process with :func:`register_run_helpers`, and a test that needs a real ``ragen``
process runs :data:`CHILD_MAIN` with ``python -c``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import Field

from ragen_core.specs import EngineSpec, EnvSpec, PluginConfig
from ragen_core.testing.toy_env import SLOW_TOY_FACTORY, SlowCorridorConfig, register_toy_env

SCRIPTED_ENGINE_NAME = "test-scripted"
SLOW_TOY_ENV_NAME = "toy-slow-corridor"


class ScriptedEngineConfig(PluginConfig):
    replies: list[str] = Field(default_factory=lambda: ["<think>go</think><answer>Right</answer>"])
    """Replies used per generate call in order (the same one for every row), the last one repeating."""


def make_scripted_engine(config: ScriptedEngineConfig) -> Any:
    """Registry factory: a scripted engine whose tokenizer comes from ``attach``."""
    from ragen_core.engines.scripted import ScriptedEngine

    return ScriptedEngine(list(config.replies), None)


SCRIPTED_ENGINE_SPEC = EngineSpec(
    name=SCRIPTED_ENGINE_NAME,
    summary="Canned replies instead of sampling (tests)",
    config_model=ScriptedEngineConfig,
    factory="ragen_core.testing.run_helpers:make_scripted_engine",
)

SLOW_TOY_ENV_SPEC = EnvSpec(
    name=SLOW_TOY_ENV_NAME,
    summary="The corridor plus a 'Wait' action that blocks (tests of timeouts and the watchdog)",
    config_model=SlowCorridorConfig,
    factory=SLOW_TOY_FACTORY,
)


def register_run_helpers() -> None:
    """Register the toy corridor, the slow corridor and the scripted engine in this process (idempotent)."""
    from ragen_core import registry

    register_toy_env()
    registry.register(SLOW_TOY_ENV_SPEC)
    registry.register(SCRIPTED_ENGINE_SPEC)


#: ``python -c CHILD_MAIN run ...``: the ``ragen`` command with the helpers registered first.
CHILD_MAIN = ("import sys; from ragen_core.testing.run_helpers import register_run_helpers; register_run_helpers(); "
              "from ragen_core.cli.main import main; sys.exit(main(sys.argv[1:]))")


#: Overrides of a seconds-long run of the toy corridor on the tiny model (2 x 2 episodes, 10-token
#: replies, a checkpoint every step, no validation, no warm start).
TOY_RUN = (
    "env_config.length=3", "env_config.max_turns=2", "env_config.max_actions_per_turn=1",
    "rollout.env_groups=2", "rollout.group_size=2", "rollout.max_model_len=512",
    "sampling.train.max_new_tokens=10", "sampling.val.max_new_tokens=10",
    "optim.mini_batch_size=4", "optim.micro_batch_size=2", "optim.lr=1e-3",
    "val_groups=2", "test_freq=0", "save_freq=1", "warm_start.enabled=false", "progress=false",
    # the CPU on every machine: a resumed toy run replays bit for bit there, and CUDA's default
    # kernels are not bit-deterministic (an H200 gave grad norms differing in the 7th digit)
    "device=cpu",
)


def toy_run_config(run_dir: str | Path | None, *overrides: str, steps: int = 2) -> Any:
    """A validated run config of :data:`TOY_RUN` on the registered toy corridor; ``overrides`` win."""
    from ragen_core.config import load_config
    from ragen_core.trainer.config import RunConfig

    where = [f"run_dir={run_dir}"] if run_dir is not None else []
    return load_config(RunConfig, [], [f"env={register_toy_env()}", f"steps={steps}", *TOY_RUN, *where, *overrides])


def one_line_error(stderr: str) -> str:
    """The error line of what the CLI wrote to stderr, asserting the one-line contract: exactly one
    ``SomethingError: ...`` line, followed by nothing but ``hint:`` lines (model-loading progress
    bars may come before it)."""
    lines = stderr.strip().splitlines()
    starts = [i for i, line in enumerate(lines) if re.match(r"[A-Z]\w*Error: ", line)]
    assert len(starts) == 1, lines
    assert all(line.startswith("hint: ") for line in lines[starts[0] + 1 :]), lines
    return lines[starts[0]]


def torchrun_command(nproc: int = 2) -> list[str]:
    """``python -m torch.distributed.run --standalone --nproc_per_node N -m ragen_core.cli.main``:
    prefix of a ``ragen`` command run as ``nproc`` local ranks (this interpreter, no ``torchrun`` on PATH needed)."""
    import sys

    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc), "-m", "ragen_core.cli.main"]


def distributed_child_env() -> dict[str, str]:
    """This process's environment without torchrun's rank variables (a child starts its own world),
    with plots off and one OpenMP thread per process."""
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(RAGEN_PLOTS="0", OMP_NUM_THREADS="1")
    return env


def first_step(run_dir: str | Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """``(metrics, weights, trainer_state, rollouts)`` of step 1 of a run saved with ``save_rollouts=true``:
    the first ``metrics.jsonl`` row, ``checkpoints/step_1``'s safetensors weights and trainer state,
    and ``rollouts/step_1.jsonl``."""
    import json

    import torch
    from safetensors.torch import load_file

    run_dir = Path(run_dir)
    ckpt = run_dir / "checkpoints" / "step_1"
    metrics = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    state = torch.load(ckpt / "trainer_state.pt", weights_only=False)
    rollouts = [json.loads(line) for line in (run_dir / "rollouts" / "step_1.jsonl").read_text().splitlines()]
    return metrics, load_file(ckpt / "model.safetensors"), state, rollouts


def run_files(run_dir: str | Path) -> set[str]:
    """Every path under ``run_dir``, relative to it."""
    run_dir = Path(run_dir)
    return {str(p.relative_to(run_dir)) for p in run_dir.rglob("*")}
