"""``ragen warm-policy``: build or show the warm policy that ships with ragen-core.

``ragen warm-policy build`` warm-starts one tiny model on every installed env that can be
demonstrated (each env's default run and its recipes that start from the shipped policy) and
writes it, in float16, with ``build.json`` (command, commit, settings, the valid rate measured for
every target) to ``ragen_core/models/warm/tiny-warm`` or ``--out``. ``ragen warm-policy show``
prints what the shipped one was built from and measured. See :mod:`ragen_core.trainer.warm_policy`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ragen_core.cli import positive_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    b = sub.add_parser("build", help="build the warm policy (minutes on 2 cores)")
    b.add_argument("--name", default="tiny-warm", help="policy name: its folder under ragen_core/models/warm (default tiny-warm, the general one)")
    b.add_argument("--out", help="output folder (default: ragen_core/models/warm/NAME, which needs --replace where a shipped policy is)")
    b.add_argument("--replace", action="store_true", help="let a build without --out write over the shipped policy NAME (maintainers)")
    b.add_argument("--envs", nargs="+", help="envs to include (default: every installed env that can be demonstrated here)")
    b.add_argument("--episodes", type=positive_int, default=32, help="demonstrations per target per round (default 32)")
    b.add_argument("--demo-turns", type=positive_int, default=2, help="turns per demonstration episode (default 2)")
    b.add_argument("--epochs", type=positive_int, default=2, help="SFT epochs per round over its demonstrations (default 2)")
    b.add_argument("--lr", type=float, default=1e-3, help="constant AdamW learning rate (default 1e-3)")
    b.add_argument("--max-rounds", type=positive_int, default=20, help="most rounds (default 20)")
    b.add_argument("--check-episodes", type=positive_int, default=32, help="episodes of each target's valid-rate check (default 32)")
    b.add_argument("--no-recipes", action="store_true", help="only each env's default run, not its recipes")
    b.add_argument("--max-minutes", type=float, help="start no round after this many minutes (the model is written after every round)")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--init-from", metavar="NAME|FOLDER",
                   help="continue from a built policy's weights (a shipped name such as tiny-warm, or a folder) instead of random ones")
    b.add_argument("--delta-rank", type=positive_int, metavar="R",
                   help="with --init-from: keep its weights and store only a rank-R change (about 0.25 MB at R=8 instead of 3.6 MB); "
                        "a run loads the base plus the change")
    b.add_argument("--own-thoughts", action="store_true", help="keep each target's reasoning texts (default: empty reasoning for all)")
    sub.add_parser("show", help="what the shipped warm policy was built from, and its measured valid rates")


def run(args: argparse.Namespace) -> int:
    from ragen_core.trainer import warm_policy

    if args.action == "build":
        out = Path(args.out) if args.out else warm_policy.SHIPPED_ROOT / args.name
        if not args.out and not args.replace and (out / warm_policy.BUILD_FILE).is_file():  # before any env is imported
            from ragen_core.errors import ConfigError

            raise ConfigError(f"{out} holds the shipped {args.name!r} policy: a build without --out would write over it",
                              ["pass --out FOLDER for a policy of your own, or --replace to rebuild the shipped one"])
        import torch

        torch.set_num_threads(max(1, torch.get_num_threads()))
        envs = args.envs or warm_policy.default_envs()
        print(f"building the warm policy for {', '.join(envs)} into {out}")
        record = warm_policy.build(out, envs, episodes=args.episodes, demo_turns=args.demo_turns, epochs=args.epochs, lr=args.lr,
                                   max_rounds=args.max_rounds, check_episodes=args.check_episodes, seed=args.seed,
                                   recipes=not args.no_recipes, thoughts=None if args.own_thoughts else ("",),
                                   max_minutes=args.max_minutes, init_from=_policy_folder(args.init_from), delta_rank=args.delta_rank)
        _show(record)
        missed = [t["label"] for t in record["targets"] if not t["reached_target"]]
        if missed:
            print(f"missed the valid-rate target: {', '.join(missed)} (runs of these check and warm-start further themselves)")
        from ragen_core.errors import shell_word

        # said last: the first line naming the folder is minutes of output back
        print(f"wrote the warm policy to {out} (ragen eval --model {shell_word(str(out))} --env {envs[0]} plays it)")
        return 0
    if args.action == "show":
        policies = warm_policy.shipped_policies()
        if not policies:
            print(f"no shipped warm policy under {warm_policy.SHIPPED_ROOT} (build one: ragen warm-policy build)")
            return 1
        for policy in policies:
            print(f"== {policy.folder.name} ({policy.folder})")
            _show(policy.record)
        return 0
    print("usage: ragen warm-policy build|show")
    return 2


def _policy_folder(name: str | None) -> Path | None:
    """A shipped policy's folder for a bare name, else the path as given."""
    from ragen_core.trainer import warm_policy

    if name is None:
        return None
    shipped = warm_policy.SHIPPED_ROOT / name
    return shipped if "/" not in name and shipped.is_dir() else Path(name)


def _show(record: dict) -> None:  # type: ignore[type-arg]
    from ragen_core.trainer.warmstart import describe_kinds

    print(f"built {record.get('built')} from commit {record.get('commit')} by: {record.get('command')}")
    start = record.get("init_from")
    while isinstance(start, dict):  # a build continued from another (--init-from), back to the first
        print(f"  continued from {start.get('folder')} (weights {str(start.get('weights_sha256'))[:16]}, rounds up to {start.get('rounds')}, "
              f"{start.get('seconds')} s, commit {start.get('commit')}, by: {start.get('command')})")
        start = start.get("init_from")
    delta = record.get("delta")
    if isinstance(delta, dict):
        print(f"  a rank-{delta.get('rank')} delta of {delta.get('base')} (weights {str(delta.get('base_weights_sha256'))[:16]})")
    total = record.get("seconds_with_init")
    chain = f" ({total} s with the builds it continued)" if total and total != record.get("seconds") else ""
    kept = record.get("kept_round")
    last = (record.get("history") or [{}])[-1].get("round")
    stopped = "" if record.get("complete", True) else " (incomplete: stopped during the build)"
    stopped += f"; weights of round {kept} (the best of its rounds; last round {last})" if kept is not None and kept != last else ""
    print(f"{record.get('seconds')} s{chain}{stopped}; settings {json.dumps(record.get('settings'))}")
    for t in record.get("targets", []):
        rate = t.get("valid_rate")
        kinds = f"; actions {describe_kinds(t['action_kinds'])}" if t.get("action_kinds") else ""
        print(f"  {t['label']:<24} valid rate {rate if rate is None else f'{rate:.3f}'} (target {t['target_valid_rate']:.2f})"
              f"{'' if t['reached_target'] else '  MISSED'}{kinds}")
