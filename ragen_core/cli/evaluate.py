"""``ragen eval``: evaluate a model on an environment and export every trajectory.

Examples::

    ragen eval --env bandit --model runs/bandit-grpo-X/checkpoints/step_20 --groups 32 --group-size 4
    ragen eval --env sokoban --preset CoordSokoban --model runs/sokoban-ppo-X --out val.jsonl

``--model`` accepts ``warm`` (the default: the shipped warm policy ``ragen run`` starts this env
from with the tiny model), ``warm:NAME`` or a shipped policy folder (``ragen warm-policy show``
lists them; delta policies included), ``tiny`` (the tiny model's random weights), a model folder,
or a run directory (its latest checkpoint is used; ``--env`` may then be left out: the run's env,
preset, env settings and per-episode rollout settings are the base, ``--config`` files go over
them (one naming another preset drops the run's env settings, as ``--preset`` does), and flags and
overrides over those). The first line printed names what was evaluated.
A checkpoint is checked against its manifest first and its weights load from safetensors only;
a damaged one is a one-line error (an older checkpoint is never evaluated in its place).
Prints success rate, mean reward (env reward + format penalty), pass@k (k = group size) and the
env's declared info metrics (``info/<key>``, as a run's validation logs them), and writes one JSON
line per trajectory (spec 14.3, fixed variant):

``{"custom_id", "env", "tag", "group_id", "member", "seed", "system_prompt",
"messages": [system, user (observation 1), assistant (reply 1, with "actions", "reward",
"penalty", "valid"), user (observation 2), ...], "context": exact decoded token sequence,
"success", "return", "env_reward", "penalty", "num_turns", "num_actions", "terminated", "truncated",
"info_metrics"}`` (``info_metrics``: the episode's value of each declared info metric it reported).

Each assistant message carries the reward its own actions earned (no off-by-one), ``return`` is
the episode total including penalties, and ``success`` is the real flag.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ragen_core.cli import positive_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", help="env plugin name (default, with --model RUN_DIR: the run's env)")
    parser.add_argument("--preset", help="env preset")
    parser.add_argument("--model", default="warm",
                        help="'warm' (default: the shipped warm policy a run of this env starts from), 'warm:NAME', "
                             "'tiny' (random weights), a model or shipped-policy folder, or a run directory")
    parser.add_argument("--groups", type=positive_int, default=16, help="number of groups (distinct seeds; default 16)")
    parser.add_argument("--group-size", type=positive_int, default=1, help="episodes per group (k of pass@k; default 1)")
    parser.add_argument("--seed", type=int, default=123, help="base seed of the evaluation set")
    parser.add_argument("--temperature", type=float, default=None, help="sampling temperature (default 0.5)")
    parser.add_argument("--greedy", action="store_true", help="greedy decoding instead of sampling")
    parser.add_argument("--max-new-tokens", type=positive_int, default=None, help="generation budget per turn")
    parser.add_argument("--out", metavar="FILE.jsonl", help="write every trajectory as JSON lines")
    parser.add_argument("--config", action="append", default=[], metavar="FILE.yaml",
                        help="run config for env/rollout settings, over a run directory's own (repeatable)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="dotted RunConfig overrides (env_config.*, rollout.*)")


def resolve_model(model: str) -> str:
    """A run directory resolves to its latest checkpoint folder; a checkpoint must match its manifest.

    Raises:
        ConfigError: A run directory without checkpoints.
        CheckpointError: The checkpoint is damaged (names the file).
    """
    from ragen_core.trainer.checkpoint import STATE_FILE, list_checkpoints, verify_checkpoint, written_by_ragen

    path = Path(model)
    if path.is_dir() and (path / "checkpoints").is_dir():
        found = list_checkpoints(path)
        if not found:
            from ragen_core.errors import ConfigError

            raise ConfigError(f"run directory {path} has no checkpoint yet")
        path = found[-1][1]
        older = [str(p) for _, p in found[:-1]]
    else:
        older = []
    if written_by_ragen(path):
        from ragen_core.errors import CheckpointError

        try:
            verify_checkpoint(path, unused=(STATE_FILE,))  # the optimiser and RNG states: a training resume's, not eval's
        except CheckpointError as exc:
            raise CheckpointError(exc.message, [f"evaluate an older checkpoint: --model {older[-1]}"] if older else []) from None
        return str(path)
    return model


def trajectory_record(index: int, traj: Any, tokenizer: Any = None) -> dict[str, Any]:
    """The JSONL record of one trajectory (see the module docstring)."""
    messages: list[dict[str, Any]] = []
    if traj.system_prompt:
        messages.append({"role": "system", "content": traj.system_prompt})
    for turn in traj.turns:
        messages.append({"role": "user", "content": turn.observation})
        messages.append({
            "role": "assistant",
            "content": turn.response_text,
            "actions": list(turn.actions),
            "reward": float(turn.reward),
            "penalty": float(turn.penalty),
            "valid": bool(turn.valid),
        })
    context = None
    if tokenizer is not None and traj.turns:
        last = traj.turns[-1]
        context = tokenizer.decode(list(last.prompt_ids) + list(last.response_ids))
    return {
        "custom_id": f"traj_{index}",
        "env": traj.env,
        "tag": traj.tag,
        "group_id": traj.group_id,
        "member": traj.member,
        "seed": traj.seed,
        "system_prompt": traj.system_prompt,
        "messages": messages,
        "final_observation": traj.final_observation,
        "context": context,
        "success": bool(traj.success),
        "return": float(traj.total_reward),
        "env_reward": float(traj.env_reward),
        "penalty": float(traj.penalty),
        "num_turns": len(traj.turns),
        "num_actions": traj.num_actions,
        "terminated": bool(traj.terminated),
        "truncated": bool(traj.truncated),
        "info_metrics": dict(getattr(traj, "info_metrics", {})),
    }


def summarize(trajs: list[Any]) -> dict[str, float]:
    """Success rate, mean reward, pass@k over groups (k = largest group size)."""
    from ragen_core.trainer import metrics

    groups: dict[int, list[Any]] = {}
    for t in trajs:
        groups.setdefault(t.group_id, []).append(t)
    k = max((len(g) for g in groups.values()), default=1)
    n = max(len(trajs), 1)
    return {
        "episodes": float(len(trajs)),
        "success": sum(t.success for t in trajs) / n,
        "mean_reward": sum(t.total_reward for t in trajs) / n,
        "mean_env_reward": sum(t.env_reward for t in trajs) / n,
        f"pass@{k}": sum(any(t.success for t in g) for g in groups.values()) / max(len(groups), 1),
        "valid_turn_rate": sum(turn.valid for t in trajs for turn in t.turns) / max(sum(len(t.turns) for t in trajs), 1),
        **metrics.info_means(getattr(t, "info_metrics", {}) for t in trajs),
    }


def evaluate(config: Any, model_path: str, *, groups: int, group_size: int) -> tuple[list[Any], dict[str, float], Any]:
    """Roll out ``groups x group_size`` validation episodes; returns (trajectories, summary, tokenizer)."""
    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer.checkpoint import written_by_ragen
    from ragen_core.trainer.setup import (
        make_engine,
        make_runner,
        resolve_device,
    )

    device = resolve_device(config.device)
    shipped = shipped_policy_named(model_path, config)
    if shipped is not None:
        model, tokenizer = load_model_and_tokenizer("tiny", device=device)
        shipped.load_into(model)
        built_for = {str(t.get("env")) for t in shipped.record.get("targets", [])}
        note = "" if config.env in built_for else f"; not built for {config.env!r}: a run warm-starts further from it"
        print(f"model: shipped warm policy {shipped.folder.name!r} ({shipped.folder}){note}", flush=True)
    else:
        path = resolve_model(model_path)
        model, tokenizer = load_model_and_tokenizer(path, device=device, safetensors_only=written_by_ragen(path))
        if path != model_path:
            print(f"model: {path} (the latest checkpoint of {model_path})", flush=True)
        elif model_path in ("tiny", "tiny-qwen-tok"):
            print(f"model: {model_path} with random weights (untrained; --model warm evaluates the shipped warm policy)", flush=True)
    engine = make_engine(config, model, tokenizer)
    runner = make_runner(config, engine, tokenizer, "val", groups=groups, group_size=group_size)
    started = time.monotonic()
    print(f"evaluating {groups * group_size} episodes ({groups} groups x {group_size}) on {config.env}", file=sys.stderr, flush=True)

    def progress(what: str) -> None:  # one line per turn of the rollout: a long evaluation is seen to move
        what = what.replace(" of a val rollout", "").replace("the reset", "reset")
        print(f"eval: {what} ({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)

    runner.progress = progress
    try:
        trajs = runner.run(mode="val", sampling=config.sampling.val)
    finally:
        runner.close()
        engine.close()
    return trajs, summarize(trajs), tokenizer


#: The most episodes one ``ragen eval`` plays: they are all held at once (an env each, and every
#: trajectory), so --groups 1000000000 grew by ~35 MB/s until the machine ran out of memory.
MAX_EPISODES = 100_000


def run(args: argparse.Namespace) -> int:
    from ragen_core.config import load_config, repeated_overrides
    from ragen_core.errors import ConfigError
    from ragen_core.trainer.config import RunConfig, check_plugin_configs, check_run_available

    if args.greedy and args.temperature is not None:
        raise ConfigError(f"--greedy and --temperature {args.temperature} contradict each other: greedy decoding has no temperature",
                          ["give one of them"])
    if args.greedy and args.group_size > 1:
        print(f"note: greedy replies are the same in every episode of a group, so pass@{args.group_size} is pass@1 unless the env "
              "itself is random", file=sys.stderr)
    if args.groups * args.group_size > MAX_EPISODES:
        raise ConfigError(f"--groups {args.groups} x --group-size {args.group_size} is {args.groups * args.group_size} episodes, more "
                          f"than one evaluation holds at once ({MAX_EPISODES})",
                          ["evaluate in parts with different --seed values and --out files"])

    if not args.model.strip():  # said with eval's default (warm), before the run config's own check (whose default is tiny)
        check_model_name(args.model)
    for warning in repeated_overrides(args.overrides):
        print(f"warning: {warning}", file=sys.stderr)
    from ragen_core.cli.run import read_config_files
    from ragen_core.config import merge_layers

    run_settings = run_env_settings(args.model)
    read = read_config_files(args.config)  # once: a --config <(...) pipe has nothing left to read a second time
    files = merge_layers(read)  # (the env they name, if any; they are merged over the run's settings below)
    file_env = files.get("env") if isinstance(files.get("env"), str) else None
    if args.env is None and file_env is None and run_settings is None:
        check_model_name(args.model)  # a --model that does not exist is the thing to fix first, not the missing --env
        run_dir = _run_dir_of(args.model)
        if run_dir is not None:  # a run directory whose config.yaml is missing or says no env: that file is what to fix
            from ragen_core.config import read_yaml

            hint = "restore it, or give --env NAME (with the run's env settings) to evaluate the model anyway"
            if not (run_dir / "config.yaml").is_file():
                raise ConfigError(f"{run_dir / 'config.yaml'} not found: ragen eval takes a run directory's env from it", [hint])
            read_yaml(run_dir / "config.yaml")  # malformed YAML: its own one-line error, with the line
            raise ConfigError(f"{run_dir / 'config.yaml'} names no env: ragen eval takes a run directory's env from it", [hint])
        raise ConfigError("ragen eval needs --env NAME (or --model naming a run directory, whose env it then uses)",
                          ["example: ragen eval --env bandit"])
    env = args.env or file_env or str(run_settings["env"])  # type: ignore[index]
    if run_settings is not None and run_settings.get("env") != env:
        print(f"note: evaluating on env {env!r}; the run trained on {run_settings.get('env')!r}, so its env settings are not used",
              file=sys.stderr)
        run_settings = None
    elif run_settings is not None:
        preset = f", preset {run_settings['preset']!r}" if run_settings.get("preset") else ""
        over = "--config files, flags and overrides win" if args.config else "flags and overrides win"
        print(f"env settings: from the run's config.yaml (env {env!r}{preset}, and its validation sampling; {over})", file=sys.stderr)
    sizes = {"rollout.env_groups": "--groups", "val_groups": "--groups", "rollout.group_size": "--group-size", "val_group_size": "--group-size"}
    for override in args.overrides:
        key, _, value = (part.strip() for part in override.partition("="))
        if key in sizes:  # the evaluation set is --groups x --group-size: the override was silently ignored
            flag = sizes[key]  # its value as the hint's only when the flag takes it ('--group-size 0' was suggested)
            given = value if value.isdigit() and int(value) >= 1 else \
                f"N ({'episodes per group' if flag == '--group-size' else 'groups of distinct seeds'}, 1 or more)"
            raise ConfigError(f"ragen eval sizes its episodes with {flag}, not {key}", [f"give {flag} {given}"])
    flags = [f"env={env}", f"model={'tiny' if is_shipped_name(args.model) else args.model}", f"seed_val={args.seed}"]
    if args.preset:
        flags.append(f"preset={args.preset}")
    if args.temperature is not None:  # a temperature asks for sampling, also of a run whose validation was greedy
        flags += [f"sampling.val.temperature={args.temperature}", "sampling.val.do_sample=true"]
    if args.greedy:
        flags.append("sampling.val.do_sample=false")
    if args.max_new_tokens is not None:
        flags.append(f"sampling.val.max_new_tokens={args.max_new_tokens}")
    from ragen_core.cli.run import drop_stale_settings

    given = flags + list(args.overrides)
    if run_settings is not None and args.config:  # a file naming another preset or plugin: the run's settings for the old one go,
        from ragen_core.trainer.run_dir import stale_plugin_settings, without_settings  # as with --preset (they were kept silently)

        stale = stale_plugin_settings(run_settings, load_config(RunConfig, [], given, base=merge_layers(read, run_settings)))
        for key, why in stale:
            print(f"config: {why}, so the run's {key} is dropped (set new values in the file or as overrides)", file=sys.stderr)
        run_settings = without_settings(run_settings, [key for key, _ in stale])
    layers = merge_layers(read, run_settings) if run_settings is not None else files
    config = drop_stale_settings(load_config(RunConfig, [], given, base=layers), layers, given)
    if is_shipped_name(args.model) and config.model != "tiny":
        raise ConfigError(f"--model {args.model} is a shipped policy of the tiny model, but model={config.model} is set too",
                          [f"evaluate that model with --model {config.model}"])
    check_plugin_configs(config)  # env, engine and pool settings fail here, before a model loads
    for warning in check_run_available(config):  # a missing data file, vllm or checker, a server or cluster that does not answer: at once
        print(f"warning: {warning}", file=sys.stderr)
    check_model_name(args.model)
    out = check_writable(Path(args.out)) if args.out else None  # before the evaluation, not after it
    trajs, summary, tokenizer = evaluate(config, args.model, groups=args.groups, group_size=args.group_size)
    for key, value in summary.items():
        print(f"{key}: {value:.4f}" if key != "episodes" else f"{key}: {int(value)}")
    if out is not None:
        tmp = out.with_name(f".{out.name}.tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            for i, traj in enumerate(trajs):
                fh.write(json.dumps(trajectory_record(i, traj, tokenizer), default=str) + "\n")
        os.replace(tmp, out)  # a reader never sees half a file
        print(f"wrote {len(trajs)} trajectories to {out}")
    return 0


def check_model_name(model: str) -> None:
    """A ``--model`` that can only be a local path must exist: said at once, before torch loads."""
    from ragen_core.errors import ConfigError
    from ragen_core.models import TINY_NAMES, check_hub_model, check_model_folder

    if not model.strip():
        raise ConfigError("--model is empty", ["name a model: warm (the default), warm:NAME, tiny, a model or run folder, or a hub id"])
    if is_shipped_name(model):
        shipped_policy_named(model, None)  # a wrong name or a stale folder: said now
        return
    path = Path(model)
    if path.is_dir() and not (path / "config.json").is_file():
        steps = sorted((p.name for p in path.glob("step_*") if p.is_dir()), key=lambda n: (len(n), n))
        if steps:  # RUN_DIR/checkpoints
            raise ConfigError(f"--model {model} holds checkpoints, not a model: name one of them",
                              [f"--model {path / steps[-1]} (the latest), or --model {path.parent} for the run's latest"])
        if (path / "config.yaml").is_file() and not any((path / "checkpoints").glob("step_*")):
            why, fix = _no_checkpoint_why(path)
            raise ConfigError(why, [f"{fix}, or evaluate the shipped warm policy: --model warm"])
    if model not in TINY_NAMES and not (Path(model) / "checkpoints").is_dir():  # a run directory resolves to a checkpoint
        check_model_folder(model)
        check_hub_model(model)


def _no_checkpoint_why(run_dir: Path) -> tuple[str, str]:
    """Why the run folder ``run_dir`` (its config.yaml there) holds no checkpoint, from what its
    config.yaml and metrics.jsonl say: it saves none (save_freq=0), they were deleted, or it stopped
    before its first save; and what to do about it."""
    from ragen_core.config import read_yaml
    from ragen_core.errors import RagenError
    from ragen_core.trainer.loggers import is_step, read_complete_rows

    try:
        config = read_yaml(run_dir / "config.yaml") or {}
        logged = max((int(r["step"]) for r in read_complete_rows(run_dir / "metrics.jsonl")[0] if is_step(r.get("step"))), default=0)
    except (RagenError, OSError, ValueError):  # a damaged file: only what is sure
        config, logged = {}, 0
    save_freq, steps = config.get("save_freq"), config.get("steps")
    later = "evaluate it once a step was saved (save_freq)"
    if not logged:
        return f"run directory {run_dir} has no checkpoint yet (it stopped before saving one)", later
    if save_freq == 0:
        return (f"run directory {run_dir} has no checkpoint: it ran with save_freq=0, which saves one only on Ctrl-C / SIGTERM",
                "train with save_freq above 0 (or -1: at the end)")
    restore = f"put its checkpoints back into {run_dir / 'checkpoints'}"
    if isinstance(steps, int) and logged >= steps:
        return (f"run directory {run_dir} has no checkpoint in checkpoints/, though it ran all its {steps} steps "
                "and a run saves its last step: they were deleted or moved"), restore
    of = f" of {steps}" if isinstance(steps, int) else ""
    return (f"run directory {run_dir} has no checkpoint in checkpoints/, though metrics.jsonl logs steps up to {logged}{of}: "
            f"it stopped before its first save (save_freq={save_freq}), or they were deleted"), f"{restore} if they were moved"


def run_env_settings(model: str) -> dict[str, Any] | None:
    """The env settings of the run ``model`` names (a run directory, or a checkpoint inside one):
    ``env``, ``preset``, ``env_config``, the rollout's per-episode settings and the validation
    sampling (``sampling.val``) of its config.yaml, so a run is evaluated on what it trained on
    and sampled as its validation was. None for anything else (a model folder, a shipped
    policy, a hub id) or a config.yaml that cannot be read (loading the model says why)."""
    from ragen_core.config import read_yaml

    run_dir = _run_dir_of(model)
    if run_dir is None or not (run_dir / "config.yaml").is_file():
        return None
    try:
        saved = read_yaml(run_dir / "config.yaml")
    except Exception:  # noqa: BLE001 - not ours to report here
        return None
    if not isinstance(saved, dict) or not isinstance(saved.get("env"), str):
        return None
    out: dict[str, Any] = {key: saved[key] for key in ("env", "preset", "env_config") if key in saved}
    rollout = saved.get("rollout")
    if isinstance(rollout, dict):  # how an episode runs; not how many, nor where (pool) or how (async)
        from ragen_core.trainer.config import BATCH_ROLLOUT_KEYS

        out["rollout"] = {k: v for k, v in rollout.items() if k not in BATCH_ROLLOUT_KEYS}
    sampling = saved.get("sampling")
    if isinstance(sampling, dict) and isinstance(sampling.get("val"), dict):  # how the run's validation sampled its replies
        from ragen_core.trainer.config import SamplingSection

        # the keys this RAGEN knows: a run of another version (or a hand-edited config) is still evaluated, saying so
        out["sampling"] = {"val": {k: v for k, v in sampling["val"].items() if k in SamplingSection.model_fields}}
        dropped = sorted(str(k) for k in sampling["val"] if k not in SamplingSection.model_fields)  # (YAML keys: 1, null too)
        if dropped:
            print(f"note: the run's sampling.val {', '.join(dropped)} {'is not a setting' if len(dropped) == 1 else 'are not settings'} "
                  "of this RAGEN: evaluated without", file=sys.stderr)
    return out


def _run_dir_of(model: str) -> Path | None:
    """The run directory ``model`` names (one with a config.yaml or checkpoints/, or a checkpoint inside one), else None."""
    path = Path(model)
    if (path / "config.yaml").is_file() or (path / "checkpoints").is_dir():
        return path
    return path.parent.parent if path.parent.name == "checkpoints" else None


def is_shipped_name(model: str) -> bool:
    """``warm``, ``warm:NAME`` or a folder holding a shipped policy's ``build.json``."""
    from ragen_core.trainer.warm_policy import BUILD_FILE

    return model == "warm" or model.startswith("warm:") or (Path(model) / BUILD_FILE).is_file()


def shipped_policy_named(model: str, config: Any) -> Any:
    """The shipped policy ``--model`` names (``warm``: the one a run of ``config`` starts from), else None.

    Raises:
        ConfigError: No such shipped policy, or one built for another tiny model.
    """
    from ragen_core.errors import ConfigError
    from ragen_core.trainer import warm_policy as wp

    if not is_shipped_name(model):
        return None
    if model == "warm":
        if config is None:
            return None
        found = wp.policy_for(config)
        if found is None:
            raise ConfigError("--model warm: no shipped warm policy is installed with ragen-core",
                              ["evaluate the tiny model's random weights with --model tiny, or a trained run with --model RUN_DIR"])
        return found
    folder = wp.SHIPPED_ROOT / model.split(":", 1)[1] if model.startswith("warm:") else Path(model)
    found = wp.shipped_policy(folder)
    if found is None:  # only now read every shipped policy's record, for the list of names
        names = [p.folder.name for p in wp.shipped_policies()]
        near = next((n for n in names if n.casefold() == folder.name.casefold()), None) if model.startswith("warm:") else None
        raise ConfigError(f"--model {model}: {folder} is not a usable shipped warm policy (missing, or built for another tiny model)",
                          ([f"did you mean warm:{near}? (names are case-sensitive)"] if near else [])
                          + [f"shipped policies: {', '.join('warm:' + n for n in names) or 'none'}"])
    return found


def _run_file(out: Path) -> tuple[Path, str] | None:
    """``(run folder, what)`` when ``out`` is one of the entries a run writes (its ``metrics.jsonl``,
    ``config.yaml``, a file under ``checkpoints/`` or ``rollouts/``...), written yet or not, else None.
    A run folder holds a config.yaml and a metrics.jsonl or checkpoints/ (a project folder with its
    own config.yaml is none)."""
    from ragen_core.trainer.run_dir import CONFIG_FILE, RUN_ENTRIES

    path = out.resolve()
    for folder in path.parents:
        is_run = (folder / CONFIG_FILE).is_file() and ((folder / "metrics.jsonl").is_file() or (folder / "checkpoints").is_dir())
        if is_run and path.relative_to(folder).parts[0] in RUN_ENTRIES:
            return folder, path.relative_to(folder).as_posix()
    return None


def check_writable(out: Path) -> Path:
    """Make sure ``--out`` can be written (creating its folder) before anything is evaluated.

    Probes with a throwaway file next to ``out``, so an existing ``out`` is left as it is until
    the evaluation has finished.

    Raises:
        ConfigError: ``out`` is a folder, or its folder cannot be created or written.
    """
    from ragen_core.cli import probe_folder
    from ragen_core.errors import ConfigError

    if out.is_dir():
        raise ConfigError(f"--out {out} is a folder", ["pass a file name, e.g. --out val.jsonl"])
    run_file = _run_file(out)
    if run_file is not None:  # eval's trajectories would replace a run's own record (its metrics, its config, a checkpoint)
        run, what = run_file
        raise ConfigError(f"--out {out} is the run {run}'s {what}, which a training run wrote: eval does not write over it",
                          [f"pass another file, e.g. --out {run / 'eval.jsonl'}"])
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        probe_folder(out.parent, out.name)
    except OSError as exc:
        raise ConfigError(f"cannot write --out {out}: {exc.strerror or type(exc).__name__}",
                          ["choose a path in a folder you can write to"]) from None
    return out
