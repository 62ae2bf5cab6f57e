"""``ragen run``: train an agent with StarPO.

Examples::

    ragen run --env bandit                         # tiny model, GRPO, CPU-friendly defaults
    ragen run --env bandit --recipe learn           # the env's settings measured to learn
    ragen run --env sokoban --algo ppo --filter snr-topp --steps 200 rollout.group_size=16
    ragen run --env deepcoder --workers ray          # envs in Ray actors (pip install ragen-workers-ray)
    ragen run --config exp.yaml optim.lr=1e-6
    ragen run --resume runs/bandit-grpo-20250101-120000-3f2a steps=40

Precedence: ``--recipe`` (named settings the env ships, see ``ragen plugins show env NAME``) <
``--config`` files (in order) < the flags above < ``dotted.key=value`` overrides.
With ``--resume RUN_DIR`` the run's own ``config.yaml`` is the base and training continues from
its newest intact checkpoint. A new run refuses a ``--run-dir`` that is not empty unless
``--overwrite`` is given (which removes that folder's run files first).

Data-parallel on several processes (or GPUs), see :mod:`ragen_core.trainer.distributed`::

    torchrun --nproc_per_node 2 -m ragen_core.cli.main run --env bandit rollout.env_groups=8
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragen_core.cli import positive_int
from ragen_core.errors import shell_word

if TYPE_CHECKING:  # the trainer config imports pydantic models of every layer; the CLI loads it lazily
    from ragen_core.trainer.config import RunConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", help="env plugin name (see 'ragen plugins')")
    parser.add_argument("--preset", help="env preset, e.g. CoordSokoban")
    parser.add_argument("--recipe", help="named run settings the env ships, e.g. 'learn' (list: ragen plugins show env NAME)")
    parser.add_argument("--algo", help="algorithm plugin: ppo, grpo, drgrpo, dapo (default grpo)")
    parser.add_argument("--filter", help="rollout filter plugin (default none)")
    parser.add_argument("--model", help="'tiny' (default), a local HF model folder, or a Hugging Face model name")
    parser.add_argument("--engine", help="rollout engine plugin: hf (default) or vllm")
    parser.add_argument("--workers", help="env pool that runs the envs: local (default), process, ray (ragen-workers-ray); sets rollout.pool")
    parser.add_argument("--steps", type=positive_int, help="training steps (default: the recipe's or config's, else 20)")
    parser.add_argument("--run-dir", help="output directory (default runs/<env>-<algo>-<time>-<suffix>); must be new or empty")
    parser.add_argument("--overwrite", action="store_true", help="replace the run in a non-empty --run-dir (its metrics, config, checkpoints)")
    parser.add_argument("--config", action="append", default=[], metavar="FILE.yaml", help="YAML config file (repeatable)")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its latest checkpoint")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config (every field, plugin settings too) as YAML and exit")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="dotted config overrides, e.g. rollout.group_size=16")
    parser.epilog = ("Settings: 'ragen run [--env NAME] --print-config' lists every key a key=value may set; "
                     "'ragen plugins show env NAME' says what the env's settings (env_config.KEY) mean.")


def build_config(args: argparse.Namespace) -> RunConfig:
    """Resolve files, flags and overrides into a validated :class:`RunConfig`."""
    from ragen_core.config import load_config, merge_layers, repeated_overrides
    from ragen_core.errors import ConfigError
    from ragen_core.trainer.config import RunConfig
    from ragen_core.trainer.run_dir import read_run_config

    if args.resume and getattr(args, "overwrite", False):
        raise ConfigError("--resume and --overwrite exclude each other", ["--resume continues the run; --overwrite starts it again"])
    resumed = read_run_config(Path(args.resume)) if args.resume else None
    if args.resume:  # before any line about its settings: a run without a checkpoint cannot be resumed
        from ragen_core.trainer.checkpoint import require_checkpoints

        require_checkpoints(Path(args.resume))
    flags: list[str] = []
    for key in ("env", "preset", "algo", "filter", "model", "engine", "steps"):
        value = getattr(args, key, None)
        if value is not None:
            flags.append(f"{key}={value}")
    if getattr(args, "workers", None) is not None:
        flags.append(f"rollout.pool={args.workers}")
    if args.resume:
        flags.append(f"run_dir={args.resume}")
    if args.run_dir:  # after --resume's: one that differs is refused below, with a run_dir= override
        flags.append(f"run_dir={args.run_dir}")
    if args.no_progress:
        flags.append("progress=false")
    bad = [o for o in args.overrides if "=" not in o]
    if bad:
        raise ConfigError(f"unexpected argument {bad[0]!r}: overrides look like dotted.key=value")
    for warning in repeated_overrides(args.overrides) if os.environ.get("RANK", "0") == "0" else []:  # under torchrun: rank 0 says it
        print(f"warning: {warning}", file=sys.stderr)  # (a flag and an override of one key: the override wins, as said above)
    if not args.resume and not args.config and args.env is None and not args.print_config:
        raise ConfigError("ragen run needs --env NAME (or --config FILE / --resume RUN_DIR)", ["example: ragen run --env bandit"])
    if getattr(args, "recipe", None) is not None and not args.recipe.strip():  # '' ran as if no recipe were given
        raise ConfigError("--recipe is empty", ["name one of the env's recipes (ragen plugins show env NAME lists them), or leave --recipe out"])
    files = read_config_files(list(args.config))  # once: the recipe's env and the layers below come from the same read
    base = recipe_base(args, files) if getattr(args, "recipe", None) else resumed
    # the run's config.yaml or a recipe, then the --config files (their data paths made absolute)
    layers = merge_layers(files, base)
    args_ = absolute_paths(flags + list(args.overrides))
    config = load_config(RunConfig, [], args_, base=layers)
    if args.resume and config.run_dir is not None and Path(config.run_dir).resolve() != Path(args.resume).resolve():
        raise ConfigError(f"--resume {args.resume} continues that run in its own folder, so run_dir {config.run_dir} would be ignored",
                          [f"drop --run-dir / run_dir=, or copy the run (cp -r {args.resume} {config.run_dir}) and resume the copy"])
    if base is not None and resumed is None and "algo" in base:
        _check_recipe_algo(args.recipe, base["algo"], config.algo)
    if resumed is not None:  # another env/algo/model is refused before its plugin settings are checked against the run's
        from ragen_core.trainer.run_dir import resume_changes

        resume_changes(resumed, config)
    config = drop_stale_settings(config, layers, args_, resumed=resumed is not None)
    from ragen_core.trainer.config import check_plugin_configs

    check_plugin_configs(config)  # unknown plugins and bad plugin settings fail here (--print-config too), before a model loads
    return config


_PATH_KEY = re.compile(r"(?:^|_)(?:path|dataset|corpus|index|dir|file|data)$")


def absolute_paths(overrides: list[str]) -> list[str]:
    """``overrides`` with every relative path made absolute: a ``model=`` or a setting whose name says
    it holds data (``env_config.dataset_path``, ``corpus``, ``val_dataset``, ``cache_dir``...) whose
    value names a file or folder that exists here. The run's config.yaml records what was read, so
    ``--resume`` or ``ragen eval`` from another folder reads the same file (or names it missing)
    instead of failing, or silently reading another ``mm.jsonl`` found there. Hub ids and paths
    that do not exist are left as typed."""
    out = []
    for item in overrides:
        key, _, value = item.partition("=")
        out.append(f"{key}={_absolute(key, value)}" if not value.startswith(("{", "[")) else item)
    return out


def _absolute(key: str, value: str, beside: Path | None = None) -> str:
    """``value`` of the dotted setting ``key`` made absolute by :func:`absolute_paths`' rule: a path
    that exists here or (``beside``: a config file's folder) next to that file."""
    from ragen_core.models import spells_our_name

    name = key.rsplit(".", 1)[-1]
    data = (key == "model" and not spells_our_name(value)) or (_PATH_KEY.search(name) is not None and key != "run_dir")  # run_dir as given
    path = Path(value).expanduser()
    if not value or not data or path.is_absolute():
        return value
    for found in (path, *([beside / path] if beside is not None else [])):
        if found.exists():
            return str(found.resolve())
    return value


def read_config_files(files: list[str]) -> list[dict[str, Any]]:
    """Each ``--config`` file's settings, read once (a file may be a pipe, ``--config <(...)``), its
    relative data paths made absolute (:func:`absolute_file_paths`)."""
    from ragen_core.config import read_yaml

    return [absolute_file_paths(read_yaml(f), Path(f).expanduser().resolve().parent) for f in files]


def absolute_file_paths(data: Any, beside: Path, key: str = "") -> Any:
    """A ``--config`` file's settings with :func:`absolute_paths`' rule applied to every nested
    value; a relative path may name a file here or next to the config file."""
    if isinstance(data, dict):
        return {k: absolute_file_paths(v, beside, f"{key}.{k}" if key else str(k)) for k, v in data.items()}
    return _absolute(key, data, beside) if isinstance(data, str) else data


def drop_stale_settings(config: RunConfig, layers: dict[str, Any], overrides: list[str], *, resumed: bool = False) -> RunConfig:
    """``config`` loaded again without the settings ``layers`` (the run's config.yaml, a recipe,
    ``--config`` files) hold for a plugin or preset that ``overrides`` replaced, saying so on stderr
    (:func:`ragen_core.trainer.run_dir.stale_plugin_settings`)."""
    from ragen_core.config import load_config
    from ragen_core.trainer.config import RunConfig
    from ragen_core.trainer.run_dir import stale_plugin_settings, without_settings

    stale = stale_plugin_settings(layers, config)
    if not stale:
        return config
    where = "the run's saved" if resumed else "the config's"
    for key, why in stale:
        print(f"{'resume' if resumed else 'config'}: {why}, so {where} {key} is dropped (set new values as overrides)", file=sys.stderr)
    return load_config(RunConfig, [], overrides, base=without_settings(layers, [key for key, _ in stale]))


def recipe_base(args: argparse.Namespace, files: list[dict[str, Any]]) -> dict[str, Any]:
    """The env's recipe ``args.recipe`` as the lowest config layer (env from --env or the files'
    settings, :func:`read_config_files`)."""
    from ragen_core import registry
    from ragen_core.config import merge_layers
    from ragen_core.errors import ConfigError

    if args.resume:
        raise ConfigError("--recipe cannot be combined with --resume", ["the run's config.yaml already holds the recipe's settings; drop --recipe"])
    env = args.env if args.env is not None else merge_layers(files).get("env")
    if not env:
        raise ConfigError("--recipe needs an env", ["example: ragen run --env bandit --recipe learn"])
    return registry.get_spec("env", str(env)).recipe(args.recipe)


def _check_recipe_algo(recipe: str, recipe_algo: str, algo: str) -> None:
    """A recipe's algorithm settings only fit its own algorithm: refuse a different ``--algo``."""
    from ragen_core import registry
    from ragen_core.errors import ConfigError

    if registry.get_spec("algorithm", recipe_algo).name != registry.get_spec("algorithm", algo).name:
        raise ConfigError(f"recipe {recipe!r} is tuned for algo {recipe_algo!r}, not {algo!r}",
                          ["drop --algo, or pick a recipe for that algorithm (ragen plugins show env NAME)"])


def run(args: argparse.Namespace) -> int:
    config = build_config(args)
    if args.print_config:
        import yaml

        from ragen_core.trainer.config import resolved_config, run_warnings

        for warning in run_warnings(config):  # what a run would say first (settings that would go unused)
            print(f"warning: {warning}", file=sys.stderr)
        print(yaml.safe_dump(resolved_config(config), sort_keys=False), end="")
        return 0
    from ragen_core import registry

    if not args.resume:  # a resume loads its checkpoint, not config.model
        from ragen_core.cli.evaluate import check_model_name
        from ragen_core.models import check_tokenizer_files

        check_model_name(config.model)
        check_tokenizer_files(config.model)  # before the run folder is made
    from ragen_core.trainer.trainer import Trainer

    if getattr(args, "recipe", None) and os.environ.get("RANK", "0") == "0":  # under torchrun: rank 0 only
        print(f"recipe {config.env}/{args.recipe}: {registry.get_spec('env', config.env).recipes[args.recipe].summary}")
    with Trainer(config, resume=bool(args.resume), overwrite=bool(getattr(args, "overwrite", False))) as trainer:
        history = trainer.train()  # leaving the block closes the engine (vLLM's engine core), also on an error
    if trainer.world.parallel:  # launched by torchrun (ragen_core.trainer.distributed): rank 0 reports
        from ragen_core.trainer.distributed import shutdown

        shutdown()
        if not trainer.world.main:
            return 0
    last = history[-1] if history else {}
    summary = ", ".join(f"{k}={last[k]:.3f}" for k in ("train/reward", "train/success", "val-env/success") if k in last)
    print(f"run directory: {trainer.run_dir}" + (f" ({summary})" if summary else ""))
    if trainer.stop_reason == "early_stopped/empty_filtered_steps" and trainer.policy_version == trainer.versions_at_start:
        from ragen_core.errors import TrainingError  # the run cannot learn as set: not a success ('&& ragen eval')

        empty = int(last.get("rollout/consecutive_empty_after_filter_steps", 0))
        raise TrainingError(f"the run stopped at step {trainer.start_step - 1 + len(history)} without a single update: "
                            f"{_emptied_by(trainer.empty_causes, empty)} (filter_config.empty_stop_steps)", _empty_hints(trainer.empty_causes))
    signum = trainer.interrupted_by
    done = trainer.start_step - 1 + len(history)  # history: this call's steps, one row each
    if signum is None:
        return 0
    import signal

    name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    if done < config.steps:  # stopped early on purpose: say so, and do not exit 0 ('&& ragen eval')
        print(f"stopped by {name} after step {done} of {config.steps}: continue with 'ragen run --resume {shell_word(trainer.run_dir)}'")
    else:  # the last step finished: the run is complete, but the signal still asked to stop what comes after it
        from ragen_core.trainer.checkpoint import latest_checkpoint

        newest = latest_checkpoint(trainer.run_dir)
        saved = f" and was saved (checkpoints/{newest[1].name})" if newest is not None and newest[0] == done else ""
        print(f"interrupted by {name} during step {done}, the last of {config.steps}: it finished{saved}, so the run finished all its steps")
    return 128 + signum


def _emptied_by(causes: list[str], empty: int) -> str:
    """The streak of ``empty`` steps that stopped a run, said by what emptied them (``causes``: one per step
    of this process, :attr:`~ragen_core.trainer.trainer.Trainer.empty_causes`; a resumed streak's earlier
    steps are said as such)."""
    from collections import Counter

    def steps(n: int) -> str:
        return f"{n} step{'' if n == 1 else 's'}"

    counts = Counter(causes[-empty:] if empty else causes)
    unknown = max(empty - sum(counts.values()), 0)
    if len(counts) == 1 and not unknown:
        return f"{next(iter(counts))} in {steps(empty)} in a row"
    parts = [f"{cause} in {steps(n)}" for cause, n in counts.items()] + ([f"{steps(unknown)} before the resume"] if unknown else [])
    return f"nothing trained in {steps(empty)} in a row ({', '.join(parts)})"


def _empty_hints(causes: list[str]) -> list[str]:
    """What to do about each thing that emptied the steps (see :func:`_emptied_by`)."""
    hints = []
    if any(c.startswith("the filter ") for c in causes):
        hints += ["metrics.jsonl's rollout/dropped/* say why it dropped each group",
                  "a variance filter drops groups whose episodes all score the same: let them differ (a higher "
                  "sampling.train.temperature, a larger rollout.group_size, a warm start), or choose --filter none"]
    if any(c.startswith("the env pool ") for c in causes):
        hints.append("the log above says, per step, how many episodes the env pool ended and the first error "
                     "(rollout/env_lost_groups counts the groups): fix the env, or give its steps more time")
    if any("keep mask" in c for c in causes):
        hints.append("the algorithm's keep mask drops groups whose episodes all score the same (DAPO's dynamic sampling, "
                     "rollout/dynamic_sampling_dropped): let them differ, or choose another algo")
    if any(c.startswith("compat.batch_adjust") for c in causes):
        hints.append("compat.batch_adjust=copy pads the kept rows instead of deleting them")
    return hints
