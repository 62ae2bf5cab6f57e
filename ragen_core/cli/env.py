"""``ragen env``: see and debug environments without a model.

``ragen env play NAME`` lets a person (or a random agent) play an env in the terminal through the
same text interface the LLM uses: the instruction, the observation, one reply per turn (action
names joined by ``||``, or a full ``<answer>...</answer>`` reply; free-form envs such as code take a
multi-line ``<answer>`` or fenced block), rewards and the final result.
``ragen env list`` lists env names with their presets and recipes.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, TextIO

from ragen_core.cli import positive_int
from ragen_core.errors import RagenError

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["play", "list"], help="play an env, or list envs")
    parser.add_argument("name", nargs="?", help="env name (play)")
    parser.add_argument("--preset", help="named preset of the env (e.g. CoordSokoban)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode")
    parser.add_argument("--agent", choices=["human", "random"], default="human", help="who plays (default: human)")
    parser.add_argument("--episodes", type=positive_int, default=1,
                        help="episodes to play (several end with their mean reward, success rate and the env's info metrics)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="env config override (repeatable; KEY or env_config.KEY, as in ragen run)")


def split_reply(text: str, env: Any) -> list[str]:
    """Turn a typed reply into action strings, mapped case-insensitively onto the vocabulary."""
    match = _ANSWER.search(text)
    body = match.group(1) if match else text
    sep = env.action_sep
    parts = [p.strip() for p in body.split(sep)] if sep else [body.strip()]
    parts = [p for p in parts if p]
    names = env.action_names
    if names:
        lookup = {n.lower(): n for n in names}
        return [lookup.get(p.lower(), p) for p in parts]
    return parts


def read_reply(inp: TextIO, free_form: bool) -> str | None:
    """One typed reply (None at end of input).

    For free-form envs (no action vocabulary, no separator: code, proofs) a first line that
    opens ``<answer>`` or a ``` fence without closing it continues up to the line holding
    ``</answer>`` or the closing fence, so a pasted program arrives whole.
    """
    line = inp.readline()
    if not line:
        return None
    first, text = line.strip(), line
    end = None
    if free_form and first.startswith("<answer>") and "</answer>" not in first:
        end = "</answer>"
    elif free_form and first.startswith("```") and first.count("```") == 1:
        end = "```"
    while end is not None:
        more = inp.readline()
        if not more:
            break
        text += more
        if end in more and (end == "</answer>" or more.strip().startswith(end)):
            break
    return text.rstrip("\n")


def play(env: Any, *, seed: int, agent: str, out: TextIO, inp: TextIO, rng: Any, name: str | None = None,
         preset: str | None = None) -> dict[str, Any]:
    """Play one episode; returns ``{"reward", "success", "actions", "info_metrics"}`` (the episode's
    value of each info metric the env declares, aggregated as a rollout does).

    Resets and steps go through the checks a rollout makes (:func:`~ragen_core.rollout.env_pool.reset_env`,
    :func:`~ragen_core.rollout.env_pool.run_actions`): an env that raises, or returns an observation
    that is not a str, is one :class:`~ragen_core.errors.EnvError` line naming it, as in ``ragen run``.
    """
    from ragen_core.interfaces.env import checked_info_metrics
    from ragen_core.interfaces.env_pool import EnvRef, ResetRequest
    from ragen_core.rollout.env_pool import episode_label, reset_env, run_actions
    from ragen_core.rollout.episodes import aggregate_info

    cfg = env.config
    label = episode_label(EnvRef(name=name or type(env).__name__, preset=preset), seed)
    obs = reset_env(env, ResetRequest(0, seed), label=label).observation
    print(f"=== {type(env).__name__} seed={seed} ===", file=out)
    if env.instruction():
        print(env.instruction(), file=out)
    total, actions_done, success = 0.0, 0, False
    records: list[dict[str, float]] = []  # each action's values of the declared info metrics
    limit_actions, limit_turns = cfg.max_actions_per_episode, cfg.max_turns
    free_form = not env.action_names and env.action_sep is None
    if free_form and agent == "human":
        print("(answer on one line, or over several: start with <answer> or ``` and end with </answer> or ```)", file=out)
    for turn in range(1, limit_turns + 1):
        # what the rollout still allows: the episode's cap, or fewer when the remaining turns cannot reach it
        by_turns = (limit_turns - turn + 1) * cfg.max_actions_per_turn
        left = min(limit_actions - actions_done, by_turns)
        per_turn = f", {cfg.max_actions_per_turn} per turn" if by_turns < limit_actions - actions_done else ""  # why it fell by more
        print(f"\n--- turn {turn}/{limit_turns} ({left} action{'' if left == 1 else 's'} left{per_turn}) ---\n{obs}", file=out)
        if env.action_names:
            print(f"actions: {', '.join(env.action_names)}" + (f"  (join several with ' {env.action_sep} ')" if env.action_sep else ""), file=out)
        if agent == "random":
            action = env.random_action(rng)
            reply = action if action is not None else ""
            print(f"> {reply}", file=out)
        else:
            print("> ", end="", file=out, flush=True)
            typed = read_reply(inp, free_form)
            if typed is None or typed.strip().lower() in {"q", "quit", "exit"}:
                print("\n(quit)", file=out)
                break
            reply = typed
        actions = split_reply(reply, env)[: cfg.max_actions_per_turn]
        if not actions:
            print("(no action: nothing happens; the trainer would charge the format penalty)", file=out)
            continue
        done = False
        for action in actions[: limit_actions - actions_done]:
            outcome = run_actions(env, 0, (action,), label=label)
            obs, reward, done, info = outcome.observation, outcome.reward, outcome.done, outcome.info
            actions_done += 1
            total += reward
            records.extend(outcome.info_records)
            valid = info.get("action_is_valid", True)
            print(f"  {action!r}: reward {reward:+.2f}{'' if valid else '  (invalid action)'}", file=out)
            shown = info_line(info)
            if shown:
                print(f"  info: {shown}", file=out)
            said_success = bool(info.get("success", False))
            success = done and said_success  # the trainer's rule: an episode succeeds when it ends (done) with info['success']
            if said_success and not done:
                print("  (info['success'] is True but the env did not say done: the trainer counts a success only "
                      "when the episode ends with it)", file=out)
            if done:
                break
        if done or actions_done >= limit_actions:
            print(f"\n{obs}", file=out)
            break
    else:
        if actions_done:  # the turns ran out: show where the last actions led
            print(f"\n(no turns left)\n{obs}", file=out)
    print(f"\nepisode over: total reward {total:+.2f}, success {success}", file=out)
    return {"reward": total, "success": success, "actions": actions_done,
            "info_metrics": aggregate_info(records, checked_info_metrics(env))}


def info_line(info: dict[str, Any], limit: int = 100) -> str:
    """The step's ``info`` as ``key=value`` pairs (values cut at ``limit`` characters), without the
    flags the play line already shows; what an env says about a step (DeepCoder's ``detail``: why
    the program failed) is otherwise only in the trainer's metrics."""
    from ragen_core.config import short_repr

    return ", ".join(f"{key}={short_repr(value, limit)}" for key, value in info.items()
                     if key not in ("success", "action_is_valid"))


def run(args: argparse.Namespace) -> int:
    from ragen_core import registry
    from ragen_core.config import apply_overrides
    from ragen_core.seeding import make_rng

    if args.action == "list":
        for name in registry.names("env"):
            entry = registry.find("env", name)
            try:
                spec = registry.get_spec("env", name)
                presets = ", ".join(spec.presets)
                recipes = ", ".join(getattr(spec, "recipes", {}))
                presets += f"   recipes: {recipes}" if recipes else ""
            except RagenError as exc:
                presets = f"(broken: {str(exc).splitlines()[0]})"
            print(f"{name:<16} {entry.origin:<30} {presets}")
        return 0
    if not args.name:
        raise RagenError("'ragen env play' needs an env name", ["example: ragen env play sokoban", "list them with 'ragen env list'"])
    from ragen_core.trainer.config import MAX_SEED

    if not 0 <= args.seed <= MAX_SEED - args.episodes:
        raise RagenError(f"--seed {args.seed} is out of range", [f"use 0 to {MAX_SEED - args.episodes} (seeds feed 64-bit generators)"])
    # the env_config. prefix is optional: errors and READMEs name settings as a run spells them
    overrides = apply_overrides({}, [item.removeprefix("env_config.") for item in args.set], example="--set max_turns=3")
    config = registry.make_config("env", args.name, overrides, preset=args.preset, where="env_config")
    for warning in registry.get_spec("env", args.name).check_available(config):  # e.g. no toolchain: refuse before building the env
        print(f"warning: {warning}", file=sys.stderr)
    env = registry.make("env", args.name, config)
    rng = make_rng(args.seed, "play")
    played = []
    try:
        for episode in range(args.episodes):
            played.append(play(env, seed=args.seed + episode, agent=args.agent, out=sys.stdout, inp=sys.stdin, rng=rng, name=args.name,
                               preset=args.preset))
    finally:
        env.close()
    if len(played) > 1:  # hundreds of episodes ended without a word on what they add up to
        wins = sum(bool(p["success"]) for p in played)
        print(f"\n{len(played)} episodes (seeds {args.seed} to {args.seed + len(played) - 1}): mean reward "
              f"{sum(p['reward'] for p in played) / len(played):+.3f}, success {wins}/{len(played)} ({wins / len(played):.0%})")
        from ragen_core.trainer.metrics import info_means

        means = info_means(p["info_metrics"] for p in played)  # what a run logs as info/<key>
        if means:
            print("info metrics (mean over the episodes that reported each): "
                  + ", ".join(f"{key.removeprefix('info/')} {value:.3f}" for key, value in means.items()))
    return 0
