"""The shipped warm policy: one tiny model that already writes the reply format for every shipped env.

A warm start from random weights takes minutes per env on a small CPU (several SFT rounds over
multi-turn demonstrations). So ``ragen-core`` ships warm-started tiny policies as package data
(``ragen_core/models/warm/<name>/``): ``tiny-warm`` for every shipped env (fp16 safetensors,
3.6 MB), and policies for single envs where the shared model did not reach the gate, either
whole (``bandit``, 3.6 MB) or as a low-rank delta of ``tiny-warm`` (``delta.safetensors``,
0.25-0.5 MB; :mod:`ragen_core.trainer.lowrank`), made by

.. code-block:: bash

    ragen warm-policy build                              # tiny-warm: every installed env that can be demonstrated
    ragen warm-policy build --envs bandit --name bandit  # one env's targets; see --help
    ragen warm-policy build --envs sudoku --name sudoku --init-from tiny-warm --delta-rank 16   # a delta

which runs the same random-legal-action demonstrations and SFT as :mod:`ragen_core.trainer.warmstart`
over *all* target envs at once (each env's default run config and named recipes, in rounds, until
every target's format-valid rate reaches its own ``warm_start.target_valid_rate``) and records,
beside the weights in ``build.json``: the command line, the git commit, every setting, and for
each target the valid rate measured with that target's config and the config's *check key*.

How a run uses it (``warm_start.start_from="shipped"``, the default, for the ``tiny`` model):

* the run's check key (env, preset, env config, rollout layout, training sampling: everything the
  format check depends on, see :func:`check_key`) is among the build's targets and its measured
  rate clears the run's target by :data:`AS_IS_MARGIN`: the shipped weights are the warm start,
  with no SFT and no check (the record says where the rate was measured);
* otherwise the shipped weights are checked on the run's config first and, if they miss the gate,
  are the starting point of the usual SFT rounds (a third-party env then warm-starts from a model
  that already knows the format), cached as before.

``warm_start.start_from="scratch"`` keeps the warm start from random weights (the learning
results of recipes measured that way say so).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragen_core.distributions import source_commit
from ragen_core.errors import RagenError
from ragen_core.trainer.config import BATCH_ROLLOUT_KEYS, RunConfig, plain_preset, prompt_compat_record, rollout_record

#: Where shipped policies live (package data of ragen-core), one folder each.
SHIPPED_ROOT = Path(__file__).resolve().parents[1] / "models" / "warm"
#: The general policy (every shipped env); others cover a few targets each (``--name`` of the build).
GENERAL = "tiny-warm"
BUILD_FILE = "build.json"
WEIGHTS_FILE = "model.safetensors"
#: A delta policy's weights: low-rank factors and 1-D parameters to add to its base's (``record["delta"]``).
DELTA_FILE = "delta.safetensors"
#: Bump when the build's format changes; a shipped folder of another format is ignored, said.
FORMAT = 1
#: A run uses a shipped policy as it is only when the build measured its settings this far above
#: the run's gate: one 32-episode check near 0.9 valid has a standard error of about 0.05, and
#: picking the best of a build's rounds favours a lucky check (FrozenLake, measured 0.90 in the
#: build, wrote 0.82 and 0.87 on two fresh 32-episode checks). Closer to the gate the run checks
#: the policy on its own seeds first.
AS_IS_MARGIN = 0.05


def used_as_is(entry: dict[str, Any] | None, target_valid_rate: float) -> bool:
    """Whether a build's measurement ``entry`` lets a run with gate ``target_valid_rate`` use the policy unchecked."""
    rate = entry.get("valid_rate") if entry is not None else None
    return isinstance(rate, float) and rate >= round(min(1.0, target_valid_rate + AS_IS_MARGIN), 9)  # (0.9 + 0.05 > 0.95 in floats)


def changed_env_settings(config: RunConfig) -> dict[str, Any]:
    """The env settings of ``config`` that differ from what the env (under its preset) uses anyway,
    as plain data: ``env_config.show_guidance=true`` (the default) is no change, so a run that spells
    out a default finds the policies measured without it. Settings of where the env runs
    (:func:`placement_keys`) are left out. ``config.env_config`` as it is when the env's settings
    cannot be resolved here (the run reports that itself)."""
    from ragen_core import registry
    from ragen_core.errors import RagenError

    try:
        made = registry.make_config("env", config.env, dict(config.env_config), preset=config.preset)
        resolved = made.model_dump(mode="json")
        default = registry.make_config("env", config.env, {}, preset=config.preset).model_dump(mode="json")
        placement = placement_keys(made, registry.get_spec("env", config.env).placement_settings)
    except (RagenError, ValueError):
        return dict(config.env_config)
    for key in placement:
        *parents, leaf = key.split(".")
        for settings in (resolved, default):
            node: Any = settings
            for part in parents:
                node = node.get(part) if isinstance(node, dict) else None
            if isinstance(node, dict):
                node.pop(leaf, None)
    return {key: value for key, value in resolved.items() if value != default.get(key)}


def placement_keys(settings: Any, declared: tuple[str, ...]) -> list[str]:
    """The env's ``placement_settings``, plus every field but ``url`` of each service config in
    ``settings`` (how a server is started and restarted changes nothing the policy sees; which
    server it talks to may)."""
    from ragen_core.services import ServiceConfig

    keys = list(declared)
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if isinstance(value, ServiceConfig):
            keys += [f"{name}.{field}" for field in type(value).model_fields if field != "url"]
    return keys


def check_payload(config: RunConfig) -> dict[str, Any]:
    """What a format check of a model on ``config`` depends on (seeds and batch sizes left out)."""
    return {
        "env": config.env,
        "preset": plain_preset(config.env, config.preset),  # a preset that changes nothing is no preset
        "env_config": changed_env_settings(config),
        "rollout": rollout_record(config.rollout, set(BATCH_ROLLOUT_KEYS)),
        "sampling": config.sampling.train.model_dump(mode="json"),
        **prompt_compat_record(config.compat),  # another system prompt is another check
    }


def check_key(config: RunConfig) -> str:
    """A short digest of :func:`check_payload`."""
    from ragen_core.trainer.warmstart import payload_digest

    return payload_digest(check_payload(config))


@dataclass(frozen=True)
class ShippedPolicy:
    """A built warm policy folder and its record."""

    folder: Path
    record: dict[str, Any]

    @property
    def digest(self) -> str:
        """Digest of the weights file (part of the warm-start cache key of runs that start from it)."""
        return str(self.record.get("weights_sha256", ""))[:16]

    def target(self, config: RunConfig) -> dict[str, Any] | None:
        """The build's measurement for ``config``'s check key (``None`` when it was not a target)."""
        key = check_key(config)
        for entry in self.record.get("targets", []):
            if entry.get("check_key") == key:
                return dict(entry)
        return None

    @functools.cached_property
    def base(self) -> ShippedPolicy | None:
        """For a delta policy, the policy it is a delta of: the folder of that name beside it, else the
        shipped one, whose weights are the ones the delta was trained on; ``None`` for a whole one, or
        when that base is gone or has changed. Looked up once per object (:func:`shipped_policy`
        checks it, :meth:`load_into` uses it)."""
        delta = self.record.get("delta")
        if not isinstance(delta, dict):
            return None
        for root in dict.fromkeys([self.folder.parent, SHIPPED_ROOT]):
            base = shipped_policy(root / str(delta.get("base")))
            if base is not None and base.record.get("weights_sha256") == delta.get("base_weights_sha256") and not base.record.get("delta"):
                return base
        return None

    def load_into(self, model: Any) -> None:
        """Copy the shipped weights into ``model`` (a fresh tiny model), in ``model``'s dtype; a
        delta policy loads its base's weights and adds the delta."""
        from safetensors.torch import load_file

        if self.record.get("delta"):
            from ragen_core.trainer.lowrank import apply_delta

            base = self.base
            if base is None:
                raise RagenError(f"shipped warm policy {self.folder} is a delta of a policy that changed or is missing",
                                 ["rebuild it: ragen warm-policy build --init-from BASE --delta-rank R"])
            base.load_into(model)
            try:
                apply_delta(model, load_file(str(self.folder / DELTA_FILE)))
            except ValueError as exc:
                raise RagenError(f"shipped warm policy {self.folder}: {exc}", ["rebuild it: ragen warm-policy build"]) from None
            return
        state = load_file(str(self.folder / WEIGHTS_FILE))
        own = model.state_dict()
        missing = [k for k in own if k not in state and not k.endswith("lm_head.weight")]
        if missing or any(tuple(state[k].shape) != tuple(own[k].shape) for k in state if k in own):
            raise RagenError(f"shipped warm policy {self.folder} does not fit the tiny model (rebuild it: ragen warm-policy build)")
        model.load_state_dict({k: v.to(own[k].dtype) for k, v in state.items() if k in own}, strict=False)
        if getattr(model.config, "tie_word_embeddings", False):
            model.tie_weights()


def shipped_policies(root: Path | None = None) -> list[ShippedPolicy]:
    """Every usable policy folder under ``root`` (default :data:`SHIPPED_ROOT`), the general one first."""
    root = root or SHIPPED_ROOT
    try:
        folders = sorted(p for p in root.iterdir() if p.is_dir())
    except OSError:
        return []
    found = [policy for f in folders if (policy := shipped_policy(f)) is not None]
    return sorted(found, key=lambda p: p.folder.name != GENERAL)


def policy_for(config: RunConfig) -> ShippedPolicy | None:
    """The shipped policy a run of ``config`` starts from: the one whose build measured these
    settings best (used as is when at or above the gate, else checked and trained further), else
    the one that measured this env best under other settings (checked by the run), else the
    general one, else ``None``."""
    policies = shipped_policies()
    measured = [(float(entry["valid_rate"]), policy) for policy in policies
                if (entry := policy.target(config)) is not None and isinstance(entry.get("valid_rate"), float)]
    if measured:
        return max(measured, key=lambda m: m[0])[1]
    # other settings of a shipped env: the policy that measured best on this env under any
    # settings (the run checks it on its own seeds) writes this env's replies better than the
    # general one (WebShop: the webshop delta checks ~0.93 where the general policy writes ~0.68)
    same_env = [(float(entry["valid_rate"]), policy.folder.name != GENERAL, policy) for policy in policies
                for entry in policy.record.get("targets", []) if entry.get("env") == config.env and isinstance(entry.get("valid_rate"), float)]
    if same_env:
        return max(same_env, key=lambda m: (m[0], m[1]))[2]
    general = [p for p in policies if p.folder.name == GENERAL]
    return general[0] if general else None


def shipped_policy(folder: Path | None = None) -> ShippedPolicy | None:
    """The policy in ``folder`` (default: the general one), or ``None`` when there is none (or it
    was built for another tiny model)."""
    from ragen_core.models.tiny import TINY_VERSION

    folder = folder or SHIPPED_ROOT / GENERAL
    try:
        record = json.loads((folder / BUILD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("format") != FORMAT or record.get("tiny_version") != TINY_VERSION:
        return None
    policy = ShippedPolicy(folder, record)
    if record.get("delta"):
        return policy if (folder / DELTA_FILE).is_file() and policy.base is not None else None
    if not (folder / WEIGHTS_FILE).is_file():
        return None
    return policy


def target_configs(envs: list[str], *, recipes: bool = True) -> list[tuple[str, RunConfig]]:
    """``(label, config)`` of each env's default run and (with ``recipes``) its recipes that start from the shipped policy."""
    from ragen_core import registry
    from ragen_core.config import load_config

    out: list[tuple[str, RunConfig]] = []
    for name in envs:
        out.append((name, load_config(RunConfig, [], [f"env={name}"])))
        if not recipes:
            continue
        spec = registry.get_spec("env", name)
        for recipe in spec.recipes:
            base = spec.recipe(recipe)
            config = load_config(RunConfig, [], [f"env={name}"], base=base)
            if config.warm_start.start_from == "shipped" and config.model == "tiny":
                out.append((f"{name}/{recipe}", config))
    unique: dict[str, tuple[str, RunConfig]] = {}
    for label, config in out:  # recipes that differ only in algorithm share their check
        unique.setdefault(check_key(config), (label, config))
    return list(unique.values())


def default_envs() -> list[str]:
    """Installed envs whose default run can warm-start here (available, with legal actions)."""
    from ragen_core import registry
    from ragen_core.config import load_config
    from ragen_core.trainer.config import check_env_available
    from ragen_core.trainer.warmstart import has_random_actions

    names = []
    for name in registry.names("env"):
        try:
            config = load_config(RunConfig, [], [f"env={name}"])
            check_env_available(config)  # e.g. lean without a toolchain
            if has_random_actions(config):
                names.append(name)
        except RagenError:
            continue
    return names


def build(out: Path, envs: list[str], *, episodes: int = 32, demo_turns: int = 2, epochs: int = 2, lr: float = 1e-3,
          batch_size: int = 16, micro_batch_size: int = 4, max_rounds: int = 20, check_episodes: int = 32, seed: int = 0,
          recipes: bool = True, thoughts: tuple[str, ...] | None = ("",), max_minutes: float | None = None, progress: bool = True,
          init_from: Path | None = None, delta_rank: int | None = None, log: Any = print) -> dict[str, Any]:
    """Warm-start one tiny model on every target of ``envs`` and write it (fp16) and its record to ``out``.

    Each round makes ``episodes`` fresh random-legal-action demonstrations per target (up to 4x as
    many for targets whose demonstrations are shorter than the average; twice as many for targets
    below their gate in the last check, while targets at their gate keep their share: at a
    quarter, MetaMathQA fell from 0.94 to 0.59 valid the next round); cut to their first ``demo_turns`` turns unless the target's own
    ``warm_start.max_turns`` says otherwise; the target's spacing and balancing; ``thoughts``
    replaces every target's reasoning texts, ``None`` keeps each target's own: empty reasoning
    taught Bandit the format in far fewer steps than the default mix, 97 % vs 71 % valid after four
    rounds, bench/results/learning_bandit_fresh3.md), trains ``epochs`` epochs over them, and
    measures every target's valid rate on ``check_episodes`` episodes with its own config. It stops
    when every target clears its ``warm_start.target_valid_rate`` by :data:`AS_IS_MARGIN` (runs then use
    the policy as it is) or after ``max_rounds``; each target's record says whether it reached its
    gate (runs of a target below the as-is line check and warm-start further themselves). No round
    starts after ``max_minutes``. The record is written after every round (``complete`` false until
    the last) and the weights whenever a round is at least as good as the best so far (most targets
    a run may use as they are, then most at their gate, then the highest mean rate; ``kept_round``
    says which; ``history`` keeps every round): the rates swing between rounds at a constant
    learning rate (SearchQA 0.99 -> 0.56 -> 0.27 -> 0.88 in one build), and a build stopped by hand
    keeps its best round so far. A continued build whose base measured every target counts the
    base's rates as its starting point: it writes the starting weights first and only rounds at
    least as good after them.

    ``init_from`` (a built policy's folder) continues a build from its weights instead of the
    tiny model's random ones: the record names it (its weights digest, command, commit, rounds and
    seconds) and this build's rounds make fresh demonstrations (round numbers go on from its).

    ``delta_rank`` (with ``init_from``) keeps ``init_from``'s weights frozen and trains a rank-``r``
    delta on every linear layer plus the 1-D parameters (:mod:`ragen_core.trainer.lowrank`); the
    folder then holds ``delta.safetensors`` (about 0.25 MB at rank 8 instead of 3.6 MB) and a run
    loads ``init_from``'s shipped weights plus the delta (the record names the base and its digest;
    a delta whose base changed is not used).

    A target whose check clears its gate by :data:`AS_IS_MARGIN` (what lets a run use the policy
    unchecked) is checked a second time on fresh seeds in the same round, and its recorded rate is
    the mean of both checks (``checks`` keeps each): the best of many rounds' single checks
    flatters the weights a build ends on.
    """
    import torch

    from ragen_core.models.tiny import TINY_SEED, build_byte_tokenizer, build_tiny_model
    from ragen_core.seeding import derive_seed
    from ragen_core.trainer.batch import per_turn_rows
    from ragen_core.trainer.setup import rollout_config
    from ragen_core.trainer.warmstart import demonstrations, describe_kinds, format_check, sft

    t0 = time.time()
    commit = source_commit()  # the code this build runs (read now: the checkout may change while it trains)
    settings = {"envs": envs, "episodes": episodes, "demo_turns": demo_turns, "epochs": epochs, "lr": lr, "batch_size": batch_size,
                "micro_batch_size": micro_batch_size, "max_rounds": max_rounds, "max_minutes": max_minutes, "check_episodes": check_episodes,
                "seed": seed, "recipes": recipes, "thoughts": None if thoughts is None else list(thoughts), "dtype": "float16"}
    targets = target_configs(envs, recipes=recipes)
    if not targets:
        raise RagenError("no env to build a warm policy for", ["install an env package (ragen plugins lists them)"])
    tokenizer = build_byte_tokenizer()
    model = build_tiny_model(tokenizer, seed=TINY_SEED)
    start: dict[str, Any] | None = None
    frozen: ShippedPolicy | None = None  # a delta build's whole base policy
    attached: Any = None  # a delta build's trainable delta (lowrank.Attached)
    rates: dict[str, float] = {}  # the last check's (a continued build starts from its base's record)
    if delta_rank is not None and init_from is None:
        raise RagenError("a delta build needs the policy it is a delta of", ["add --init-from NAME (such as tiny-warm)"])
    if init_from is not None:
        base = shipped_policy(Path(init_from))
        if base is None:
            raise RagenError(f"--init-from {init_from}: not a built warm policy for this tiny model (or a delta whose base "
                             "is neither beside it nor shipped as it was)",
                             ["name a folder with build.json and model.safetensors or delta.safetensors (ragen warm-policy show lists them)"])
        if delta_rank is not None:  # the delta is trained on (and stored against) a whole policy
            frozen = base.base if base.record.get("delta") else base  # continuing a delta build: its base
            assert frozen is not None  # shipped_policy() returns no delta policy whose base is gone
            if Path(out).resolve() == frozen.folder.resolve():
                raise RagenError(f"a delta of {frozen.folder.name} cannot be written into {frozen.folder.name}'s own folder",
                                 ["give the delta policy its own --name (such as the env's name)"])
            frozen.load_into(model)
            from ragen_core.trainer import lowrank

            attached = lowrank.attach(model, delta_rank, seed=derive_seed(seed, "warm-policy-delta"))
            if base.record.get("delta"):  # go on training the delta it stores
                from safetensors.torch import load_file

                try:
                    lowrank.load_attached(model, attached, load_file(str(base.folder / DELTA_FILE)))
                except ValueError as exc:
                    raise RagenError(f"--init-from {init_from}: {exc}", [f"continue it with its own rank (--delta-rank "
                                                                         f"{base.record['delta'].get('rank')})"]) from None
            settings["delta_rank"] = delta_rank
        else:
            base.load_into(model)  # read now: the build may write into the same folder
        start = {"folder": base.folder.name, "weights_sha256": base.record.get("weights_sha256"), "command": base.record.get("command"),
                 "commit": base.record.get("commit"), "rounds": _last_round(base.record),
                 "seconds": base.record.get("seconds"), "init_from": base.record.get("init_from")}
        settings["init_from"] = base.folder.name
        rates = {t["label"]: t["valid_rate"] for t in base.record.get("targets", []) if isinstance(t.get("valid_rate"), float)}
    first_round = start["rounds"] if start else 0
    trained = attached.parameters(model) if attached is not None else [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trained, lr=lr, weight_decay=0.0)
    demo_configs = []
    for label, config in targets:
        ws = config.warm_start.model_copy(update={"episodes": episodes, **({"thoughts": list(thoughts)} if thoughts is not None else {})})
        demo_configs.append(config.model_copy(update={"seed": derive_seed(seed, "warm-policy", label), "warm_start": ws}))
    per_turn = any(per_turn_rows(rollout_config(c)) for _, c in targets)
    balances: list[dict[str, list[str]]] = [{} for _ in targets]
    history: list[dict[str, Any]] = []
    lengths: dict[str, float] = {}  # mean tokens of a target's (cut) demonstration, from round 1
    mean_len = 1.0
    kept: tuple[tuple[int, int, float], dict[str, float], int] | None = None  # (score, rates, round) of the weights on disk
    if start is not None and all(label in rates for label, _ in targets):
        # a continued build starts from weights its base measured on these targets: it only writes
        # rounds at least that good, and until one is, the folder holds the starting weights themselves
        kept = (_score(targets, rates), {label: rates[label] for label, _ in targets}, first_round)
        _write(Path(out), model, tokenizer, targets, kept[1], [], t0=t0, commit=commit, complete=False, settings=settings,
               start=start, first=True, attached=attached, frozen=frozen, kept_round=first_round)
    for rnd in range(max_rounds):
        trajs: list[Any] = []
        for i, config in enumerate(demo_configs):
            # episodes play with the run's own turn budget (the prompts say it) and are cut to
            # their first ``demo_turns`` turns: the later turns of long episodes cost SFT time and
            # show the same reply format after a longer history.
            # Targets with short demonstrations (Bandit's one short turn) get more of them, up to 4x,
            # so every target costs about the same SFT time per round (lengths from round 1).
            label = targets[i][0]
            scale = min(4.0, max(1.0, mean_len / lengths[label])) if rnd > 0 else 1.0
            behind = label in rates and rates[label] < targets[i][1].warm_start.target_valid_rate
            n = round(episodes * scale * (2 if behind else 1))
            keep = config.warm_start.max_turns or demo_turns
            demo_cfg = config.model_copy(update={"warm_start": config.warm_start.model_copy(update={"episodes": n})})
            made = [dataclasses.replace(t, turns=t.turns[:keep])
                    for t in demonstrations(demo_cfg, tokenizer, round_no=first_round + rnd, balance=balances[i])]
            if rnd == 0:
                lengths[label] = max(1.0, sum(len(t.turns[-1].prompt_ids) + len(t.turns[-1].response_ids) for t in made) / max(1, len(made)))
            trajs += made
        if rnd == 0:
            mean_len = sum(lengths.values()) / len(lengths)
        of_build = f" ({rnd + 1} of at most {max_rounds} in this build; its --init-from policy ran {first_round})" if first_round else ""
        log(f"warm policy round {first_round + rnd + 1}{of_build}: SFT on {len(trajs)} demonstrations of {len(targets)} targets ...")
        losses = sft(model, tokenizer, trajs, epochs=epochs, lr=lr, batch_size=batch_size,
                     seed=derive_seed(seed, "warm-policy-sft", first_round + rnd), optimizer=opt, per_turn=per_turn,
                     micro_batch_size=micro_batch_size,
                     progress=f"warm policy round {first_round + rnd + 1}: SFT" if progress else None)
        rates = {}
        checks: dict[str, list[float]] = {}
        kinds: dict[str, dict[str, float]] = {}
        for label, config in targets:
            check_cfg = config.model_copy(update={"seed": derive_seed(seed, "warm-policy-check", label)})
            first = format_check(check_cfg, model, tokenizer, episodes=check_episodes, progress=f"check {label}" if progress else None)
            checks[label], kinds[label] = [first.valid_rate], first.action_kinds
            if used_as_is({"valid_rate": checks[label][0]}, config.warm_start.target_valid_rate):
                # a second check on fresh seeds before the rate may let runs skip their own
                again = config.model_copy(update={"seed": derive_seed(seed, "warm-policy-confirm", label, first_round + rnd)})
                checks[label].append(format_check(again, model, tokenizer, episodes=check_episodes,
                                                  progress=f"check {label} again" if progress else None).valid_rate)
            rates[label] = sum(checks[label]) / len(checks[label])
        history.append({"round": first_round + rnd + 1, "demonstrations": len(trajs), "loss": losses[-1] if losses else None,
                        "valid_rates": dict(rates), "checks": checks, "action_kinds": kinds, "seconds": round(time.time() - t0, 1)})
        log(f"warm policy round {first_round + rnd + 1}: loss {losses[-1]:.3f}, {time.time() - t0:.0f} s; valid rates "
            + ", ".join(f"{k} {v:.2f} ({describe_kinds(kinds[k])})" for k, v in rates.items()))
        score = _score(targets, rates)
        done = score[0] == len(targets)  # every target usable as is
        over = max_minutes is not None and time.time() - t0 >= 60 * max_minutes
        better = kept is None or score >= kept[0]  # ties go to the later, longer-trained round
        if better:
            kept = (score, dict(rates), first_round + rnd + 1)
        assert kept is not None
        record = _write(Path(out), model, tokenizer, targets, kept[1], history, t0=t0, commit=commit, complete=done or over or rnd + 1 == max_rounds,
                        settings=settings, start=start, first=rnd == 0, attached=attached, frozen=frozen,
                        weights=better, kept_round=kept[2])
        if not better:
            log(f"warm policy round {first_round + rnd + 1}: below round {kept[2]}; the folder keeps round {kept[2]}'s weights")
        if done or over:
            break
    return record


def _score(targets: list[tuple[str, RunConfig]], rates: dict[str, float]) -> tuple[int, int, float]:
    """How good a round's rates are, to keep the best round's weights: targets a run may use as they
    are, then targets at their gate, then the mean rate."""
    gates = {label: config.warm_start.target_valid_rate for label, config in targets}
    return (sum(used_as_is({"valid_rate": rates[label]}, gate) for label, gate in gates.items()),
            sum(rates[label] >= gate for label, gate in gates.items()), sum(rates.values()) / max(1, len(rates)))


def _last_round(record: dict[str, Any]) -> int:
    """Number of the last round of a build (round numbers of a continued build go on from its base's)."""
    history = record.get("history") or [{}]
    return int(history[-1].get("round", len(record.get("history") or [])))


def _init_seconds(start: dict[str, Any] | None) -> float:
    """Build seconds of the chain of policies this one was continued from."""
    total = 0.0
    while isinstance(start, dict):
        total += float(start.get("seconds") or 0.0)
        start = start.get("init_from")
    return total


def _write(out: Path, model: Any, tokenizer: Any, targets: list[tuple[str, RunConfig]], rates: dict[str, float],
           history: list[dict[str, Any]], *, t0: float, commit: str | None, complete: bool, settings: dict[str, Any],
           start: dict[str, Any] | None = None, first: bool = True, attached: Any = None,
           kept_round: int, frozen: ShippedPolicy | None = None, weights: bool = True) -> dict[str, Any]:
    """Write the model (fp16, tied head left out) and its record to ``out``; after every round, so a
    stopped build keeps what it has (``complete`` false until the last). ``weights=False`` writes the
    record only (the round was worse than the weights on disk, from ``kept_round``; ``rates`` are
    that round's). The model config and tokenizer files never change between rounds: written in the
    ``first`` round only."""
    import os

    import torch
    import transformers
    from safetensors.torch import save_file

    from ragen_core.models import quiet_progress
    from ragen_core.models.tiny import TINY_VERSION
    from ragen_core.trainer.checkpoint import usual_mode

    out.mkdir(parents=True, exist_ok=True)
    kept_kinds = next((h.get("action_kinds") or {} for h in history if h.get("round") == kept_round), {})  # (none: the starting weights)
    if attached is not None:
        from ragen_core.trainer.lowrank import delta_state

        weights_file = DELTA_FILE
        state = delta_state(model, attached)
    else:
        weights_file = WEIGHTS_FILE
        state = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    half = {k: v.detach().to(torch.float16).contiguous() for k, v in state.items()}
    if first:
        with quiet_progress():
            model.config.save_pretrained(str(out))
            tokenizer.save_pretrained(str(out))
    if weights:
        save_file(half, str(out / (weights_file + ".tmp")), metadata={"format": "pt"})
        usual_mode(out / (weights_file + ".tmp"))  # safetensors writes 0600; the folder's other files are readable
        os.replace(out / (weights_file + ".tmp"), out / weights_file)
    record = {
        "format": FORMAT,
        "tiny_version": TINY_VERSION,
        "command": " ".join(shlex.quote(a) for a in ["ragen", *sys.argv[1:]]) if Path(sys.argv[0]).name == "ragen" else " ".join(sys.argv),
        "commit": commit,
        "built": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "seconds": round(time.time() - t0, 1),
        "seconds_with_init": round(time.time() - t0 + _init_seconds(start), 1),
        "complete": complete,
        "kept_round": kept_round,
        "init_from": start,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "settings": settings,
        "weights_sha256": hashlib.sha256((out / weights_file).read_bytes()).hexdigest(),
        "delta": None if attached is None or frozen is None else {
            "base": frozen.folder.name, "base_weights_sha256": frozen.record.get("weights_sha256"), "rank": attached.rank},
        "targets": [{"label": label, "env": config.env, "check_key": check_key(config), "check": check_payload(config),
                     "valid_rate": rates.get(label), "target_valid_rate": config.warm_start.target_valid_rate,
                     "reached_target": (rates.get(label) or 0.0) >= config.warm_start.target_valid_rate,
                     "action_kinds": kept_kinds.get(label)}
                    for label, config in targets],
        "history": history,
    }
    tmp = out / (BUILD_FILE + ".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, out / BUILD_FILE)
    return record
