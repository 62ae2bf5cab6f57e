"""``ragen diagnose RUN_DIR``: reasoning-collapse report of a run (plots + self-contained HTML).

Builds ``RUN_DIR/plots/collapse_*.png`` and ``RUN_DIR/diagnostics.html`` from ``metrics.jsonl``.
With ``--checkpoint step_N`` and/or ``--rollouts FILE`` it first recomputes the diagnostics on
that checkpoint and those rollouts and appends the result to ``RUN_DIR/diagnostics_offline.jsonl``
as the step of the rollouts. The missing one is taken from the run directory as training paired
them: a step's collapse metrics are computed on its rollouts before its update, by the weights
saved after the step before, so ``--checkpoint step_N`` reads ``rollouts/step_{N+1}.jsonl`` (and
reproduces step N + 1's logged values) and ``--rollouts .../step_M.jsonl`` reads
``checkpoints/step_{M-1}``. The run's own ``diagnostics_config.collapse`` settings are used unless a
flag says otherwise.

A ``ragen`` subcommand contributed through the ``ragen_register_commands`` hook: this
distribution's entry point ``ragen_core.commands: diagnose = ragen_diagnostics.cli`` lets
``ragen --help`` list it from metadata, and the CLI imports this module only when ``ragen diagnose``
runs. The report and offline modules are imported only once the arguments are parsed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from ragen_core import hookimpl
from ragen_core.errors import RagenError, shell_word

HELP = "RAGEN-2 reasoning-collapse diagnostics of a run (mutual information between inputs and reasoning; plots + HTML)"
"""The distribution's summary less its leading plugin name: ``ragen --help`` lists the command with that summary."""


@hookimpl
def ragen_register_commands(subparsers: Any) -> None:
    parser = subparsers.add_parser("diagnose", help=HELP, description=HELP)
    add_arguments(parser)
    parser.set_defaults(func=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="run directory containing metrics.jsonl")
    parser.add_argument("--checkpoint", help="recompute offline with this checkpoint: a name under RUN_DIR/checkpoints (step_N) or a path")
    parser.add_argument("--rollouts", help="recompute offline on this rollouts JSONL file (default RUN_DIR/rollouts/step_N.jsonl)")
    parser.add_argument("--device", default="cpu", help="torch device for offline scoring: cpu (default), auto, cuda[:N], mps, xpu[:N]")
    parser.add_argument("--num-samples", default=None,
                        help="pairs per family for offline scoring (int >= 2 or 'all'; default: the run's setting, else 64)")
    parser.add_argument("--z-source", choices=["reasoning", "response", "auto"], default=None,
                        help="Z = think-block reasoning, the whole reply (no-think runs), or auto (default: the run's setting, else reasoning)")
    parser.add_argument("--scoring", choices=["shared-prefix", "naive"], default=None,
                        help="cross-scoring method (default: the run's setting, else shared-prefix)")


def _resolve_checkpoint(run_dir: Path, name: str | None, rollouts: Path | None, step_of: Any) -> Path:
    """``--checkpoint`` as a folder; without it, the checkpoint that sampled ``rollouts``: step M's
    rollouts come from the weights saved after step M - 1 (``checkpoints/step_{M-1}``)."""
    if name:
        path = Path(name)
        if not path.is_absolute() and not path.exists():
            path = run_dir / "checkpoints" / name
        if path.is_file():
            raise RagenError(f"checkpoint {name} is a file; a checkpoint is a folder (RUN_DIR/checkpoints/step_N)",
                             [f"list {run_dir / 'checkpoints'} for saved steps"])
        if not path.is_dir():
            raise RagenError(f"checkpoint {name} not found (looked for {path})", [f"list {run_dir / 'checkpoints'} for saved steps"])
        return path
    step = step_of(rollouts) if rollouts is not None else None
    if step == 1:
        raise RagenError(f"the rollouts {rollouts} of step 1 were sampled by the run's starting weights, which the run directory "
                         "does not keep", ["name a checkpoint with --checkpoint step_N (or a path)"])
    candidate = run_dir / "checkpoints" / f"step_{step - 1}" if step is not None else None
    if candidate is None or not candidate.is_dir():
        looked = f" (looked for {candidate}: step {step}'s rollouts come from the weights saved after step {step - 1})" if step else ""
        raise RagenError(f"no checkpoint matches the rollouts {rollouts}{looked}", ["name one with --checkpoint step_N (or a path)"])
    return candidate


def _resolve_rollouts(run_dir: Path, given: str | None, checkpoint: Path, step_of: Any) -> Path:
    """``--rollouts``; without it, the rollouts ``checkpoint`` sampled: the weights saved after step
    N sampled step N + 1's rollouts, which step N + 1's logged collapse metrics were computed on
    (before that step's update)."""
    if given:
        return Path(given)
    step = step_of(checkpoint)
    candidate = run_dir / "rollouts" / f"step_{step + 1}.jsonl" if step is not None else None
    if candidate is None or not candidate.is_file():
        looked = f" (looked for {candidate}: the weights saved after step {step} sampled step {step + 1}'s rollouts)" if candidate else ""
        raise RagenError(f"no saved rollouts for checkpoint {checkpoint.name}{looked}",
                         ["a run saves them with save_rollouts=true (resume it with that for a new step), "
                          "or pass --rollouts FILE (another step's rollouts/step_<N>.jsonl)"])
    return candidate


def run_settings(run_dir: Path) -> dict[str, Any]:
    """The collapse diagnostic's settings the run trained with (``diagnostics_config.collapse`` of
    its config.yaml; empty when it has none): an offline recompute starts from them."""
    from ragen_core.config import read_yaml

    path = run_dir / "config.yaml"
    if not path.is_file():
        return {}
    saved = (read_yaml(path).get("diagnostics_config") or {}).get("collapse")
    return dict(saved) if isinstance(saved, dict) else {}


def check_run_dir(run_dir: Path) -> None:
    """Refuse a path that is not a directory: a file (often ``RUN_DIR/metrics.jsonl``) or nothing."""
    if run_dir.is_file():
        folder = run_dir.parent if run_dir.name == "metrics.jsonl" else None
        hint = f"pass its folder: ragen diagnose {shell_word(folder)}" if folder else "pass the folder a 'ragen run' wrote (it holds metrics.jsonl)"
        raise RagenError(f"{run_dir} is a file, not a run directory", [hint])
    if not run_dir.is_dir():
        raise RagenError(f"run directory {run_dir} does not exist", ["pass the folder a 'ragen run' wrote (it holds metrics.jsonl)"])


def parse_num_samples(value: str | None) -> int | str | None:
    """``--num-samples``: None (the default), ``all`` or an integer >= 2 (MI needs two pairs)."""
    if value is None:
        return None
    text = value.strip().lower()
    if text == "all":
        return "all"
    try:
        number = int(text)
    except ValueError:
        number = None
    if number is None or number < 2:
        raise RagenError(f"--num-samples must be an integer >= 2 or 'all', got {value!r}: the cross-scoring needs at least "
                         "two (prompt, reasoning) pairs")
    return number


def resolve_device(name: str) -> str:
    """``--device``: ``cpu``, ``auto``, ``cuda[:N]``, ``mps`` or ``xpu[:N]`` that exists on this machine."""
    from ragen_core.errors import ConfigError
    from ragen_core.trainer.config import DEVICE_PATTERN

    if not re.match(DEVICE_PATTERN, name.strip()):
        raise RagenError(f"--device {name}: not a torch device name; use cpu, auto, cuda, cuda:N, mps, xpu or xpu:N")
    from ragen_core.trainer.setup import resolve_device as resolve

    try:
        return resolve(name.strip())
    except ConfigError as exc:
        reason = exc.message.partition(": ")[2] or exc.message
        raise RagenError(f"--device {name}: {reason}", ["use --device cpu (the default) or --device auto"]) from None


def _check_writable(run_dir: Path) -> None:
    """Raise a one-line RagenError when ``run_dir`` cannot take a new file (read-only, no permission)."""
    from ragen_core.cli import probe_folder

    try:
        probe_folder(run_dir, "ragen-diagnose")
    except OSError as exc:
        raise RagenError(f"cannot write into {run_dir} ({exc.strerror or exc}): the offline metrics and the report go there",
                         ["make the run folder writable, or copy it and diagnose the copy"]) from None


def run(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    check_run_dir(run_dir)
    from ragen_diagnostics import offline, report

    offline_only = [(flag, value) for flag, value, default in (("--num-samples", args.num_samples, None), ("--device", args.device, "cpu"),
                                                                ("--z-source", args.z_source, None), ("--scoring", args.scoring, None))
                    if value != default]
    if offline_only and not (args.checkpoint or args.rollouts):  # they would change nothing: say so, not ignore them
        flags = [flag for flag, _ in offline_only]
        given = " ".join(f"{flag} {value}" for flag, value in offline_only)
        raise RagenError(f"{', '.join(flags)} only {'applies' if len(flags) == 1 else 'apply'} to an offline recompute, which "
                         "--checkpoint or --rollouts asks for",
                         [f"ragen diagnose {shell_word(run_dir)} --checkpoint step_N {given} (it reads the rollouts the run saved for that step, "
                          "or --rollouts FILE); without them diagnose reports the metrics the run logged"])
    if args.checkpoint or args.rollouts:
        num_samples = parse_num_samples(args.num_samples)
        device = resolve_device(args.device)
        rollouts = Path(args.rollouts) if args.rollouts else None
        checkpoint = _resolve_checkpoint(run_dir, args.checkpoint, rollouts, offline.step_of)
        rollouts = _resolve_rollouts(run_dir, args.rollouts, checkpoint, offline.step_of)
        saved = run_settings(run_dir)  # z_source, num_samples, seed, ... as the run computed them; flags win
        given = {"scoring": args.scoring, "z_source": args.z_source, "num_samples": num_samples}
        config: dict[str, Any] = {**saved, **{k: v for k, v in given.items() if v is not None}}
        config.pop("compute_freq", None)
        if saved:
            shown = ", ".join(f"{k}={config[k]}" for k in ("z_source", "num_samples", "scoring") if k in config)
            print(f"settings: the run's diagnostics_config.collapse ({shown}); flags win", file=sys.stderr)
        # the step whose logged metrics this recomputes: that of the rollouts (scored before its update,
        # by the weights saved after the step before), which also seeds the pair sampling as in training
        checkpoint_step = offline.step_of(checkpoint)
        rollouts_step = offline.step_of(rollouts)
        step = rollouts_step or (checkpoint_step + 1 if checkpoint_step is not None else 1)
        if rollouts_step is None:  # filed by guess: say so here and in the report
            print(f"note: {rollouts.name} names no step (a run saves rollouts/step_N.jsonl): its metrics are filed as step {step}, "
                  f"{'the step after checkpoint ' + str(checkpoint.name) if checkpoint_step is not None else 'for want of one'}",
                  file=sys.stderr)
        elif checkpoint_step is not None and rollouts_step != checkpoint_step + 1:
            print(f"note: step {rollouts_step}'s rollouts scored with {checkpoint.name}'s weights (the run's own scoring of them used "
                  f"step_{rollouts_step - 1}'s): filed as step {rollouts_step}, the report names both", file=sys.stderr)
        stages = iter(range(1, 6))

        def progress(line: str) -> None:  # stages: rollouts, checkpoint, 2 families, report
            print(f"diagnose [{next(stages, 5)}/5] {line} ...", file=sys.stderr, flush=True)

        _check_writable(run_dir)  # before the checkpoint loads and the scoring runs: their result is written there
        metrics = offline.diagnose_offline(checkpoint, rollouts, config=config, device=device, step=step, progress=progress)
        keys = [k for k in metrics if k.endswith(("/mi_estimate", "/conditional_entropy_est", "/retrieval_accuracy", "/retrieval_chance_level"))]
        if metrics.get("collapse/skipped_no_reasoning"):
            print("no turn in the rollouts has reasoning (valid_thinking_rate 0): MI metrics skipped; "
                  "for no-think runs pass --z-source response")
        else:
            print(json.dumps({k: round(metrics[k], 6) for k in sorted(keys)}, indent=1))
        if metrics.get("collapse/error"):
            print(f"warning: {int(metrics['collapse/error'])} diagnostic family(ies) failed; see the log above")
        try:
            written_to = offline.save_offline_metrics(run_dir, step, metrics, checkpoint, rollouts,
                                                      step_from="rollouts" if rollouts_step is not None else "checkpoint")
        except OSError as exc:  # the results are printed above: say where they could not go
            raise RagenError(f"the offline metrics printed above were not saved: {exc.strerror or exc}: {exc.filename}",
                             ["make the run folder writable, or copy it and diagnose the copy"]) from None
        print(f"offline metrics of step {step} appended to {written_to}")
    if args.checkpoint or args.rollouts:
        print(f"diagnose [5/5] drawing the report in {run_dir} ...", file=sys.stderr, flush=True)
    logged = report.load_rows(run_dir)  # (training rows, offline rows)
    try:
        written = report.build_report(run_dir, metrics=logged)
    except OSError as exc:  # a read-only run folder, a folder where a file goes: one line, not a traceback
        raise RagenError(f"cannot write the report into {run_dir} ({exc.strerror or exc}: {exc.filename})",
                         ["make the run folder writable (and remove what is in the way), or copy it and diagnose the copy"]) from None
    for path in written:
        print(path)
    if any(path.name == "collapse_regimes.png" for path in written):
        # the training rows, else the offline ones (a run trained without the diagnostic has rows, but no estimate in them)
        for line in report.summary_lines(logged[0]) or report.summary_lines(logged[1]):
            print(line)
        return 0
    rows, offline_rows = logged
    skipped = report.skipped_no_reasoning_steps(rows + offline_rows)
    undefined = sorted({int(r["step"]) for r in rows
                        if any(k.endswith("/mi_defined") and v == 0 for k, v in r.items()) and isinstance(r.get("step"), (int, float))})
    if skipped:
        print(f"note: {run_dir} has no collapse metrics: {report.skipped_note(skipped)}")
    elif undefined:  # the diagnostic ran: turning it on is not the advice
        print(f"note: {run_dir} has no MI estimate: the collapse diagnostic ran (steps {report._step_list(undefined)}) but MI needs at "
              "least 2 prompt columns (distinct first prompts, one per group): train with rollout.env_groups of 2 or more "
              "(see collapse_*/num_columns in metrics.jsonl)")
    else:
        print(f"note: {run_dir} has no collapse metrics (the report shows reward and filter curves only). Turn them on when training: "
              "ragen run ... diagnostics=[collapse]; or compute them afterwards from a checkpoint and its rollouts (a run with "
              f"save_rollouts=true): ragen diagnose {shell_word(run_dir)} --checkpoint step_N")
    return 0
