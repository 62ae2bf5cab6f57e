"""Supervised warm start: teach a fresh model the reply *format*, never the solution.

A randomly initialised tiny model never emits ``<think>..</think><answer>..</answer>``, so RL
would only ever see format penalties. The warm start generates demonstrations with the env
itself: a scripted engine (:class:`DemoEngine`) answers every prompt of a normal rollout with a
**uniformly random legal action** wrapped in the reply format. The rollout runner produces the
prompts, so demonstrations use exactly the prompt layout of training. The model is then
fine-tuned with cross-entropy on the reply tokens only.

By default (``warm_start.balanced``) the random actions are balanced per state: a state visited
``n`` times shows each of its ``k`` legal actions ``n/k`` times (in random order), so the
warm-started model starts RL without preferences it picked up from sampling noise. On Bandit
this took the format-valid rate after three rounds from 88 % to 97 % and evened out the per-pair
arm preferences (``bench/results/learning_bandit_fresh3.md``).

Legal actions depend on the state (Bandit's arm names change per seed), and an engine sees only
prompt ids. So the demo rollout runs its envs in this process, in a
:class:`~ragen_core.rollout.env_pool.LocalEnvPool` whose env factory wraps each instance in a
:class:`RecordingEnv`: after every reset/step it records, keyed by the observation text, the
state's legal actions (``env.action_names``) or one ``env.random_action(rng)`` for free-text envs
that provide it, into a table that the :class:`DemoEngine` of the same rollout reads (one table
per demo rollout, passed to both; nothing is registered or kept in module state). The engine
decodes the prompt and answers for the latest observation it contains. Envs offering neither
are skipped with a message. No oracle is consulted.

It starts from the warm policy that ships with ragen-core (:mod:`ragen_core.trainer.warm_policy`,
``warm_start.start_from=shipped``, the default for the ``tiny`` model): when that policy's build
measured this run's env settings clearly above the gate (by ``warm_policy.AS_IS_MARGIN``), it is
used as it is (no SFT, no check);
otherwise it is checked on the run's settings and, below the gate, trained further by the rounds
below. ``start_from=scratch`` starts the rounds from the randomly initialised tiny model.

The result is cached as a model folder under ``warm_start.cache_dir/<key>`` where the key hashes
(env, preset, env config, model, prompt-layout and warm-start settings, seed); the batch shape
(``rollout.env_groups``, ``rollout.group_size``) is left out, so resizing a run reuses it.

The gate: only a warm start that reached ``warm_start.target_valid_rate`` is cached, and only a
cached folder whose record says it reached its target is used. A warm start that misses the gate
within its budget stops the run with a one-line :class:`~ragen_core.errors.TrainingError` saying
what it reached and how to go on (RL from a model that rarely writes a valid reply sees format
penalties only and does not learn); ``warm_start.on_gate_miss=continue`` trains from it anyway,
says so, and keeps the miss in the model's record (never in the cache).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragen_core.errors import ConfigError
from ragen_core.interfaces.engine import Engine, Generation, SamplingParams
from ragen_core.interfaces.env import Env, EnvConfig, StepResult
from ragen_core.seeding import derive_seed, make_rng
from ragen_core.trainer.config import RunConfig, prompt_compat_record, rollout_record

_THOUGHTS = ("", "{a}", "I pick {a}.")

LegalActions = dict[str, list[str]]
"""Observation text -> legal actions of that state (filled by :class:`RecordingEnv`, read by
:class:`DemoEngine`; insertion order breaks ties between observations)."""


class RecordingEnv(Env):
    """Delegates to a real env and records each state's legal actions by observation text into ``legal``."""

    def __init__(self, inner: Env, seed: int, legal: LegalActions, *, stray_share: float = 0.0, drawn: list[str] | None = None) -> None:
        self.inner = inner
        self.config = inner.config
        self.action_sep = inner.action_sep
        self.seed = None
        self.legal = legal
        self.stray_share = stray_share
        self.drawn = drawn if drawn is not None else []  # random actions drawn for every state so far (shared by a round's envs)
        self._seed = seed
        self._rng = make_rng(seed, "recording-env")

    def _record(self, obs: str) -> str:
        names = self.inner.action_names
        if names:
            self.legal[obs] = list(names)
        else:
            action = self.inner.random_action(self._rng)
            if action is not None:
                # a share of states get an action drawn for another state (warm_start.stray_share)
                stray = self.drawn and self.stray_share > 0 and float(self._rng.random()) < self.stray_share
                self.legal[obs] = [self.drawn[int(self._rng.integers(len(self.drawn)))] if stray else str(action)]
                self.drawn.append(str(action))
        return obs

    def reset(self, seed: int, *, member: int = 0, mode: str = "train") -> str:
        self.seed = seed
        # every episode draws its own actions: one stream per env instance, seeded alike, made every
        # episode of a round take the same branch (all of a round's SearchQA demos searched, or all finished)
        self._rng = make_rng(self._seed, "recording-env", seed, member)
        return self._record(self.inner.reset(seed, member=member, mode=mode))

    def step(self, action: str) -> StepResult:
        result = self.inner.step(action)
        if isinstance(result, (tuple, list)) and len(result) == 4 and isinstance(result[0], str):  # a plain 4-tuple too, as pools take
            self._record(result[0])
        return result  # anything else: the pool names what is wrong with it

    def render(self) -> str:
        return self.inner.render()

    def instruction(self) -> str:
        return self.inner.instruction()

    def merge_quirk_instruction(self) -> str:
        return str(getattr(self.inner, "merge_quirk_instruction", self.inner.instruction)())

    @property
    def action_names(self) -> list[str] | None:
        return self.inner.action_names

    def close(self) -> None:
        self.inner.close()


class DemoEngine(Engine):
    """A scripted engine replying with a random legal action (looked up in ``legal``) in the reply format.

    Its draws come from its own generator (``seed``), in prompt order; per-prompt ``seeds`` of
    :meth:`generate` are ignored.
    """

    def __init__(self, tokenizer: Any, *, legal: LegalActions | None = None, enable_think: bool = True, seed: int = 0,
                 thoughts: tuple[str, ...] = _THOUGHTS, spaced: bool = False, balance: dict[str, list[str]] | None = None) -> None:
        super().__init__()
        self.tokenizer = tokenizer
        self.legal: LegalActions = legal if legal is not None else {}
        """The table the rollout's :class:`RecordingEnv` instances fill."""
        self.enable_think = enable_think
        self.thoughts = tuple(thoughts) or ("",)
        self.spaced = spaced
        self.balance = balance
        """Per-state queues of actions still to show (``None`` = independent uniform draws)."""
        self.rng = make_rng(seed, "demo-engine")
        end = tokenizer.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tokenizer.get_vocab() else None
        self.end_id = end if isinstance(end, int) else tokenizer.eos_token_id
        self.cut = 0
        """Replies cut to ``max_new_tokens`` (too long even with an empty thought)."""
        self.needed = 0
        """Tokens the longest cut reply needed."""
        self.budget = 0
        """The smallest reply budget a reply was cut at (below ``sampling.train.max_new_tokens``: the env's
        ``max_tokens`` under ``rollout.enforce_env_max_tokens``)."""

    def latest_state(self, prompt_text: str) -> str | None:
        """The recorded observation that appears last in the prompt (the current state)."""
        best, best_pos = None, -1
        for obs in self.legal:
            pos = prompt_text.rfind(obs) if obs else -1
            if pos > best_pos or (pos == best_pos and pos >= 0 and best is not None and len(obs) > len(best)):
                best, best_pos = obs, pos
        return best

    def pick(self, actions: list[str], state: str | None = None) -> str:
        """A uniformly random legal action; balanced per state when :attr:`balance` is set.

        Balanced: each state draws its actions without replacement from a shuffled copy, refilled
        when empty, so over many visits every legal action of a state is shown equally often
        (still random, no oracle). Independent draws leave a state with few visits lopsided, and
        the model copies that lopsidedness as a preference RL then has to undo.
        """
        if self.balance is None or state is None:
            return actions[int(self.rng.integers(len(actions)))]
        queue = self.balance.get(state)
        if not queue or not set(queue) <= set(actions):
            queue = [actions[i] for i in self.rng.permutation(len(actions))]
            self.balance[state] = queue
        return queue.pop()

    def reply_text(self, action: str, thought: str | None = None) -> str:
        sp = " " if self.spaced else ""
        if not self.enable_think:  # the generation prefix "<answer>" is already in the prompt
            return f"{sp}{action}{sp}</answer>"
        if thought is None:
            thought = self.thoughts[int(self.rng.integers(len(self.thoughts)))].format(a=action)
        thought = f"{sp}{thought}{sp}" if thought else sp
        return f"{thought}</think>{sp}<answer>{sp}{action}{sp}</answer>"

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) + [int(self.end_id)]

    def generate(self, prompts: list[list[int]], params: SamplingParams, seeds: int | Sequence[int] | None = None) -> list[Generation]:
        out = []
        for prompt in prompts:
            state = self.latest_state(self.tokenizer.decode(prompt, skip_special_tokens=False))
            actions = self.legal[state] if state is not None else None
            action = self.pick(actions, state) if actions else "?"
            rng_state = self.rng.bit_generator.state
            ids = self._encode(self.reply_text(action))
            if len(ids) > params.max_new_tokens:  # too long for the budget: same action, empty thought
                self.rng.bit_generator.state = rng_state
                ids = self._encode(self.reply_text(action, thought=""))
            if len(ids) > params.max_new_tokens:  # still too long: cut (an invalid reply), and counted
                self.cut += 1
                self.needed = max(self.needed, len(ids))
                self.budget = min(self.budget or params.max_new_tokens, params.max_new_tokens)
            out.append(Generation(token_ids=ids[: params.max_new_tokens], logprobs=None, finish_reason="stop", policy_version=self.policy_version))
        return out


_LOOK_UP: Any = object()


def cache_payload(config: RunConfig, shipped: Any = _LOOK_UP) -> dict[str, Any]:
    """The settings a warm start depends on: hashed into the cache key, kept in ``warm_start.json``
    (``shipped``: the run's shipped policy, already looked up by :func:`shipped_for`)."""
    from ragen_core.trainer.warm_policy import changed_env_settings

    if shipped is _LOOK_UP:
        shipped = shipped_for(config)
    return {
        "env": config.env,
        "preset": config.preset,
        "env_config": changed_env_settings(config),
        "model": config.model,
        # Batch shape (groups x group size) never reaches the demonstrations (one episode per
        # group) nor the check, so changing it keeps the cached warm start; nor does where the envs
        # run (the pool: --workers process / ray, its workers and timeouts), so a run moved to Ray
        # does not warm-start again.
        "rollout": rollout_record(config.rollout, {"env_groups", "group_size", "pool", "pool_config"}),
        "max_new_tokens": config.sampling.train.max_new_tokens,
        # (how a run reacts to a missed gate and how a batch is split for memory do not change the model)
        "warm_start": config.warm_start.model_dump(mode="json", exclude={"cache_dir", "enabled", "on_gate_miss", "micro_batch_size"}),
        "seed": config.seed,
        # the shipped policy a warm start starts from (a rebuilt one is another start)
        "shipped": shipped.digest if shipped is not None else None,
        **prompt_compat_record(config.compat),  # the demonstrations' and the check's system prompts
    }


def shipped_for(config: RunConfig) -> Any:
    """The shipped warm policy this run starts from (``warm_start.start_from=shipped`` and the
    ``tiny`` model), or ``None``."""
    if config.warm_start.start_from != "shipped" or config.model != "tiny":
        return None
    from ragen_core.trainer.warm_policy import policy_for

    return policy_for(config)


def payload_digest(payload: dict[str, Any]) -> str:
    """A short stable digest of a JSON-like settings payload (keys sorted; non-JSON values as ``str``)."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def cache_key(config: RunConfig, payload: dict[str, Any] | None = None) -> str:
    """``<env>-<preset>-<digest of cache_payload(config)>`` (``payload``: that payload, already made)."""
    return f"{config.env}-{config.preset or 'default'}-{payload_digest(payload if payload is not None else cache_payload(config))}"


def cache_root(config: RunConfig) -> Path:
    """``warm_start.cache_dir`` or the default next to the tiny-model cache."""
    if config.warm_start.cache_dir:
        return Path(config.warm_start.cache_dir).expanduser()
    from ragen_core.models import default_cache_dir

    return default_cache_dir().parent / "warmstart"


def cache_folder(config: RunConfig) -> Path:
    """The folder :func:`warm_start` writes (and reuses) for ``config``."""
    return cache_root(config) / cache_key(config)


def enforced_budget_note(config: RunConfig) -> str | None:
    """Why the prompts differ from those shipped warm policies were built on, when
    ``rollout.enforce_env_max_tokens`` makes them state a smaller reply budget than the env's
    ``max_tokens`` ("Max response length: N"), the env's (or preset's) default one, which shipped
    policies saw; ``None`` otherwise (the flag off, the budgets not smaller, a ``max_tokens`` of the
    user's own, with which the prompts differ from the shipped policy's in any case)."""
    if not config.rollout.enforce_env_max_tokens:
        return None
    from ragen_core import registry

    def max_tokens(values: dict[str, Any]) -> int:
        made = registry.make_config("env", config.env, values, preset=config.preset)
        return int(made.max_tokens) if isinstance(made, EnvConfig) else 0

    stated = max_tokens(dict(config.env_config))
    if not stated or stated != max_tokens({}):
        return None  # a max_tokens of the user's own: the prompts differ from the shipped policy's anyway
    low = [m for m in ("train", "val") if getattr(config.sampling, m).max_new_tokens < stated]
    if not low:
        return None
    named = " and ".join(f"sampling.{m}.max_new_tokens={getattr(config.sampling, m).max_new_tokens}" for m in low)
    return (f"rollout.enforce_env_max_tokens=true: the prompts state {named} as the reply budget, not "
            f"env_config.max_tokens={stated} as the shipped warm policy's prompts did; to keep its prompts, raise "
            f"{' and '.join(f'sampling.{m}.max_new_tokens' for m in low)} to {stated}")


def has_random_actions(config: RunConfig) -> bool:
    """True when the env exposes legal actions (``action_names`` or an overridden ``random_action``)."""
    from ragen_core import registry

    env = registry.make_env(config.env, preset=config.preset, **config.env_config)
    try:
        env.reset(config.seed)
        return bool(env.action_names) or env.random_action(make_rng(config.seed, "probe")) is not None
    finally:
        env.close()


def warm_start(config: RunConfig, model: Any, tokenizer: Any, *, device: str = "cpu", verbose: bool = True) -> Any:
    """Return the warm-started model (from cache when possible); ``model`` itself if skipped.

    SFT runs in rounds: each round adds ``warm_start.episodes`` fresh demonstrations, trains
    ``warm_start.epochs`` epochs over all of them, then measures :func:`valid_rate`. Rounds stop
    when the rate reaches ``warm_start.target_valid_rate`` or ``max_rounds`` / ``max_seconds`` run
    out. The measurement is set as ``model.ragen_warm_start`` (a dict with ``valid_rate``,
    ``rounds``, ``reached_target``, ``history``, ...). A model that reached the target is cached
    with that record in ``<folder>/warm_start.json``; one that missed it raises
    :class:`~ragen_core.errors.TrainingError`, or with ``warm_start.on_gate_miss=continue`` is
    returned uncached (see :func:`gate_missed`).
    """
    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer.batch import per_turn_rows, row_count
    from ragen_core.trainer.setup import rollout_config

    ws = config.warm_start
    bars = verbose and config.progress  # a progress bar per SFT round and per valid-rate check (stderr)
    shipped = shipped_for(config)  # looked up once (it reads every shipped policy's build.json)
    payload = cache_payload(config, shipped)
    settings = json.loads(json.dumps(payload, default=str))  # what made the model, kept in its record
    folder = cache_root(config) / cache_key(config, payload)
    stale = (folder / "config.json").is_file() and read_meta(folder).get("reached_target") is False  # cached before the gate existed
    if stale and verbose:
        print(f"warm start: not using cached model {folder}: its record says it missed its target valid rate; warm-starting again")
    if (folder / "config.json").is_file() and not stale:
        warm = load_model_and_tokenizer(str(folder), device=device, safetensors_only=True)[0]  # the cache is written as safetensors
        warm.to(next(model.parameters()).dtype)  # the dtype the run trains in (optim.float32_weights), whatever the cache holds
        meta = read_meta(folder)
        warm.ragen_warm_start = meta
        if verbose:
            rate = meta.get("valid_rate")
            print(f"warm start: using cached model {folder}" + (f" (valid rate {rate:.3f})" if isinstance(rate, float) else ""))
        return warm

    t0 = time.time()
    rounds_dir = rounds_folder(folder)
    old = remove_old_rounds(folder.parent, keep=rounds_dir)
    if old and verbose:
        print(f"warm start: removed {len(old)} interrupted warm start(s) not resumed for {ROUNDS_KEPT_DAYS:.0f} days from {folder.parent} "
              f"({', '.join(p.name for p in old)})")
    opt: Any = None
    saved: dict[str, Any] | None = None
    if shipped is not None:
        from ragen_core.trainer.warm_policy import used_as_is

        shipped.load_into(model)
        record = shipped.record
        entry = shipped.target(config)
        base = {"source": "shipped", "shipped_commit": record.get("commit"), "shipped_built": record.get("built"),
                "target_valid_rate": ws.target_valid_rate, "rounds": 0, "history": [],
                "settings": settings, "check_temperature": config.sampling.train.temperature}
        if used_as_is(entry, ws.target_valid_rate):
            # measured on exactly these env settings when the policy was built: nothing to do
            model.ragen_warm_start = {**base, "valid_rate": entry["valid_rate"], "reached_target": True,
                                      "measured": "when the shipped policy was built (ragen warm-policy show)"}
            if verbose:
                print(f"warm start: the shipped warm policy (valid rate {entry['valid_rate']:.3f} on these env settings, "
                      f"measured when it was built; target {ws.target_valid_rate:.2f})")
            return model
        opt, saved = _resume_rounds(rounds_dir, model, ws.lr)  # an interrupted warm start's rounds: its check is not run again
        check = None if saved is not None else format_check(config, model, tokenizer,
                                                             progress="warm start: checking the shipped warm policy" if bars else None)
        if check is not None and verbose:
            print(f"warm start: the shipped warm policy {shipped.folder.name!r} writes {check.valid_rate:.3f} valid replies on these env settings "
                  f"(target {ws.target_valid_rate:.2f})" + ("" if check.valid_rate >= ws.target_valid_rate else "; training it further"))
            note = enforced_budget_note(config)
            if note and check.valid_rate < ws.target_valid_rate:
                print(f"warm start: {note}")
        if check is not None and check.valid_rate >= ws.target_valid_rate:
            meta = {**base, "valid_rate": check.valid_rate, "reached_target": True, "measured": "checked by this run",
                    "history": [{"round": 0, "valid_rate": check.valid_rate, "seconds": round(time.time() - t0, 1),
                                 "sample_replies": list(check.sample_replies), "action_kinds": check.action_kinds}]}
            model.ragen_warm_start = meta
            save_cached(folder, model, tokenizer, meta, stale=stale)
            return model
    if not has_random_actions(config):
        if verbose:
            print(f"warm start skipped: env {config.env!r} offers no legal actions (no action_names, no random_action); "
                  f"training from the {'shipped warm policy' if shipped is not None else 'base model'}")
        return model
    if opt is None:
        opt, saved = _resume_rounds(rounds_dir, model, ws.lr)
    if verbose and shipped is None and saved is None:  # rounds from the model's own weights: minutes on 2 cores, said before they start
        why = "warm_start.start_from=scratch" if ws.start_from != "shipped" else f"model {config.model!r} has no shipped warm policy"
        print(f"warm start: teaching the reply format from the model's own weights ({why}): rounds of {ws.episodes} demonstrations "
              f"until {ws.target_valid_rate:.2f} valid replies, at most {ws.max_rounds} rounds or {ws.max_seconds:.0f} s "
              "(minutes on 2 cores; the result is cached, so later runs start at once)")
    trajs: list[Any] = []
    balance: dict[str, list[str]] = {}  # per-state action queues, shared by all rounds
    per_turn = per_turn_rows(rollout_config(config))
    history: list[dict[str, Any]] = []
    steps = 0
    if saved is not None:  # an interrupted warm start of these settings: its finished rounds are not done again
        history, steps = saved["history"], saved["steps"]
        t0 = time.time() - saved["elapsed"]
        for rnd in range(len(history)):  # the demonstrations (and balance queues) of those rounds, remade as they were
            trajs += demonstrations(config, tokenizer, round_no=rnd, balance=balance)
        if verbose:
            print(f"warm start: resuming after round {len(history)} of an interrupted warm start of these settings "
                  f"(saved in {rounds_dir}; valid rate then {history[-1]['valid_rate']:.3f})")
    for rnd in range(len(history), ws.max_rounds):
        if verbose:
            print(f"warm start round {rnd + 1}: supervised fine-tuning on {ws.episodes} more random-action demonstrations "
                  f"({config.env}, {len(trajs) + ws.episodes} in all) ...")
        cut: dict[str, int] = {}
        trajs += demonstrations(config, tokenizer, round_no=rnd, balance=balance, cut=cut)
        if rnd == 0:
            refuse_cut_demonstrations(config, cut)
        losses = sft(model, tokenizer, trajs, epochs=ws.epochs, lr=ws.lr, batch_size=ws.batch_size, seed=derive_seed(config.seed, "sft", rnd),
                     optimizer=opt, prompt_loss_weight=ws.prompt_loss_weight, schedule=ws.lr_schedule, per_turn=per_turn,
                     progress=f"warm start round {rnd + 1}: SFT" if bars else None, micro_batch_size=ws.micro_batch_size,
                     deadline=t0 + ws.max_seconds)
        planned = ws.epochs * -(-row_count(trajs, per_turn=per_turn) // ws.batch_size)  # sft's steps: batches of rows
        if verbose and len(losses) < planned:
            print(f"warm start round {rnd + 1}: SFT stopped after {len(losses)} of {planned} steps: warm_start.max_seconds "
                  f"({ws.max_seconds:.0f} s) is spent; checking the valid rate once more")
        steps += len(losses)
        check = format_check(config, model, tokenizer, progress=f"warm start round {rnd + 1}: valid-rate check" if bars else None)
        rate = check.valid_rate
        history.append({"round": rnd + 1, "demonstrations": len(trajs), "sft_steps": steps, "loss": losses[-1] if losses else None,
                        "valid_rate": rate, "seconds": round(time.time() - t0, 1), "sample_replies": list(check.sample_replies),
                        "action_kinds": check.action_kinds})
        if verbose:
            print(f"warm start round {rnd + 1}: valid rate {rate:.3f} (target {ws.target_valid_rate:.2f}; actions "
                  f"{describe_kinds(check.action_kinds)}) after {steps} SFT steps, "
                  f"loss {history[-1]['loss']:.3f}, {time.time() - t0:.0f} s; sample replies: {check.sample_replies[:2]}")
        if rate >= ws.target_valid_rate or time.time() - t0 >= ws.max_seconds:
            break
        if rnd + 1 < ws.max_rounds:  # another round follows: an interruption from here on keeps this one
            save_rounds(rounds_dir, model, opt, {"history": history, "steps": steps, "elapsed": time.time() - t0})
    meta = {"valid_rate": history[-1]["valid_rate"], "target_valid_rate": ws.target_valid_rate, "rounds": len(history),
            "reached_target": history[-1]["valid_rate"] >= ws.target_valid_rate, "history": history,
            "source": "shipped" if shipped is not None else "scratch",
            # what made this folder, so a cached model can be made again (and compared) later
            "settings": settings,
            "check_temperature": config.sampling.train.temperature}
    model.ragen_warm_start = meta
    import shutil

    shutil.rmtree(rounds_dir, ignore_errors=True)  # finished: cached below, or missed (then made again from the start)
    if not meta["reached_target"]:
        return gate_missed(config, model, meta, verbose=verbose)
    save_cached(folder, model, tokenizer, meta, stale=stale)
    return model


_ROUNDS_FILE = "rounds.pt"


def _resume_rounds(folder: Path, model: Any, lr: float) -> tuple[Any, dict[str, Any] | None]:
    """The warm start's optimiser, and the record of the rounds kept in ``folder`` (loaded into
    ``model`` and the optimiser), or None when there are none to resume."""
    import torch

    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    saved = load_rounds(folder, model, opt) if (folder / _ROUNDS_FILE).is_file() else None
    return opt, saved


def rounds_folder(cache_folder: Path) -> Path:
    """``<cache key>.rounds`` beside ``cache_folder``: the finished rounds of a warm start still
    running, or of one interrupted (the model and its optimiser state: about 3x the model's size)."""
    return cache_folder.with_name(cache_folder.name + ".rounds")


ROUNDS_KEPT_DAYS = 7.0
"""How long an interrupted warm start's rounds wait to be resumed: a ``.rounds`` folder not
written for longer (settings no run has used since) is removed when another warm start begins."""


def remove_old_rounds(root: Path, *, keep: Path, now: float | None = None) -> list[Path]:
    """Remove the ``*.rounds`` folders in ``root`` other than ``keep`` whose newest file is older
    than :data:`ROUNDS_KEPT_DAYS` (each holds a model and its optimiser state); return them."""
    import shutil

    limit = (time.time() if now is None else now) - ROUNDS_KEPT_DAYS * 86400
    removed = []
    try:
        folders = [p for p in root.iterdir() if p.name.endswith(".rounds") and p.is_dir() and p != keep]
    except OSError:
        return []
    for folder in sorted(folders):
        try:
            newest = max([folder.stat().st_mtime, *(f.stat().st_mtime for f in folder.iterdir())])
        except OSError:
            continue  # removed meanwhile by another run
        if newest < limit:
            shutil.rmtree(folder, ignore_errors=True)
            if not folder.exists():
                removed.append(folder)
    return removed


def save_rounds(folder: Path, model: Any, optimizer: Any, record: dict[str, Any]) -> None:
    """Keep a warm start's finished rounds (weights, optimiser state, history) in ``folder``,
    replaced whole (a temporary file of this writer's own, renamed): a run interrupted later resumes
    after them. Two runs of one key write the same rounds; a failed write (disk full, a read-only
    cache) is said in one line and the warm start goes on."""
    import tempfile

    import torch

    from ragen_core.trainer.checkpoint import usual_mode

    tmp = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=_ROUNDS_FILE + ".", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "record": json.dumps(record, default=str)}, fh)
        usual_mode(Path(tmp))  # mkstemp's 0600: another user of a shared cache could not resume from it
        os.replace(tmp, folder / _ROUNDS_FILE)
    except (OSError, RuntimeError) as exc:  # torch's writer raises RuntimeError on a full disk
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"warning: warm start: could not keep its finished rounds in {folder} ({why}); "
              "an interruption now starts it again from round 1", file=sys.stderr)
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def load_rounds(folder: Path, model: Any, optimizer: Any) -> dict[str, Any] | None:
    """Load what :func:`save_rounds` kept into ``model`` and ``optimizer`` and return its record;
    None when there is nothing usable (a damaged file is said and ignored)."""
    import torch

    path = folder / _ROUNDS_FILE
    if not path.is_file():
        return None
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
        record: dict[str, Any] = json.loads(saved["record"])
        current = model.state_dict()
        if not record.get("history") or {k: tuple(v.shape) for k, v in saved["model"].items()} != {k: tuple(v.shape) for k, v in current.items()}:
            raise ValueError("not the rounds of this model")  # checked first: a failed load must leave the model as it was
        record["steps"], record["elapsed"] = int(record["steps"]), float(record["elapsed"])
        optimizer.load_state_dict(saved["optimizer"])
        model.load_state_dict(saved["model"])
    except Exception as exc:  # noqa: BLE001 - an unreadable leftover costs the rounds it held, not the run
        print(f"warm start: ignoring {path} ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
              "starting from round 1", file=sys.stderr)
        return None
    return record


def refuse_cut_demonstrations(config: RunConfig, cut: dict[str, int]) -> None:
    """Refuse a warm start whose demonstration replies do not fit ``sampling.train.max_new_tokens``
    (even with an empty thought) too often for the gate to be reachable: every such reply is cut
    before ``</answer>``, so SFT would train for its whole budget towards a rate it cannot reach.

    Raises:
        ConfigError: naming the budget and the tokens the replies need.
    """
    ws = config.warm_start
    replies, n_cut = cut.get("replies", 0), cut.get("cut", 0)
    if replies == 0 or n_cut / replies <= 1.0 - ws.target_valid_rate:
        return
    budget = config.sampling.train.max_new_tokens
    setting = "sampling.train.max_new_tokens"
    fix = f"raise sampling.train.max_new_tokens to {cut['needed']} or more (and sampling.val.max_new_tokens with it)"
    if 0 < cut.get("budget", budget) < budget:  # the env's max_tokens stopped them (rollout.enforce_env_max_tokens)
        budget, setting = cut["budget"], "env_config.max_tokens"
        fix = f"raise env_config.max_tokens to {cut['needed']} or more, or set rollout.enforce_env_max_tokens=false"
        if cut["needed"] > config.sampling.train.max_new_tokens:  # either way sampling.train.max_new_tokens would cut them next
            fix = (f"raise env_config.max_tokens and sampling.train.max_new_tokens to {cut['needed']} or more "
                   "(and sampling.val.max_new_tokens with it)")
    what = (f"warm start: {n_cut} of {replies} demonstration replies need more than {setting}={budget} "
            f"tokens (up to {cut['needed']}), so replies are cut before </answer> and warm_start.target_valid_rate "
            f"{ws.target_valid_rate:g} cannot be reached")
    if ws.on_gate_miss == "continue":  # the user accepted a missed gate: say it, train on
        print(f"warning: {what}; {fix}", file=sys.stderr, flush=True)
        return
    raise ConfigError(what, [fix, "or go on anyway with warm_start.on_gate_miss=continue"])


def save_cached(folder: Path, model: Any, tokenizer: Any, meta: dict[str, Any], *, stale: bool) -> None:
    """Write a warm start that reached its gate into the cache (atomically: a temp folder renamed)."""
    import shutil
    import tempfile

    from ragen_core.models import quiet_progress
    from ragen_core.trainer.checkpoint import current_umask

    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=folder.name + ".tmp-"))  # this writer's own: two runs of a key write at once
    try:
        tmp.chmod(0o777 & ~current_umask())  # mkdtemp's 0700 would make the cached model private
        with quiet_progress():
            model.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        (tmp / META_FILE).write_text(json.dumps(meta, indent=1), encoding="utf-8")
        if stale:
            shutil.rmtree(folder, ignore_errors=True)
        try:
            tmp.rename(folder)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            # another run of this key cached its (same) result first: that one stands
    finally:  # a failed or interrupted write leaves no copy of the model behind
        shutil.rmtree(tmp, ignore_errors=True)


def gate_missed(config: RunConfig, model: Any, meta: dict[str, Any], *, verbose: bool = True) -> Any:
    """A warm start that missed ``warm_start.target_valid_rate``: stop the run, or go on uncached.

    ``warm_start.on_gate_miss=stop`` (default) raises a one-line
    :class:`~ragen_core.errors.TrainingError`; ``continue`` prints what happened and returns
    ``model`` (its record, ``model.ragen_warm_start``, keeps ``reached_target: False``). Either
    way nothing is cached, so the next run warm-starts again instead of reusing this model.
    """
    from ragen_core.errors import TrainingError

    ws = config.warm_start
    what = (f"warm start missed its gate: {meta['valid_rate']:.3f} of replies valid after {meta['rounds']} round(s), "
            f"{meta['history'][-1]['seconds']:.0f} s (target {ws.target_valid_rate:.2f}; budget {ws.max_rounds} rounds / "
            f"{ws.max_seconds:.0f} s); not cached")
    if ws.on_gate_miss == "stop":
        spent = float(meta["history"][-1]["seconds"])
        more = max(2 * ws.max_seconds, 2 * spent, 60.0)  # at least twice what the rounds so far took: one round may outlast the budget
        raise TrainingError(what, [f"give it more time (warm_start.max_seconds={more:.0f}, warm_start.max_rounds="
                                   f"{ws.max_rounds + 2}) or a lower target (warm_start.target_valid_rate), then run again",
                                   "or train from this model anyway with warm_start.on_gate_miss=continue "
                                   "(RL from mostly invalid replies sees format penalties only)"])
    if verbose:
        print(f"{what}; continuing from it as warm_start.on_gate_miss=continue asks")
    return model


META_FILE = "warm_start.json"
"""Warm-start record stored next to the cached weights (valid rate, rounds, per-round history)."""


def read_meta(folder: str | Path) -> dict[str, Any]:
    """The warm-start record of a cached folder (``{}`` when absent or unreadable)."""
    try:
        data = json.loads((Path(folder) / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@dataclass(frozen=True)
class FormatCheck:
    """One measurement of :func:`format_check`."""

    valid_rate: float
    """Share of replies that parse and name only known actions."""
    sample_replies: list[str] = field(default_factory=list)
    """The first few replies (kept in the warm-start record)."""
    action_kinds: dict[str, float] = field(default_factory=dict)
    """Share of each kind of action (:func:`action_kind`) among the well-formed replies' actions,
    most common first: a policy that passes the gate with one kind only (a SearchQA policy that
    never searches) shows here, not in the valid rate."""


def action_kind(action: str) -> str:
    """The leading name of a command-style action (``search[..]`` -> ``search``, ``Up`` -> ``Up``),
    else ``"other"`` (numbers, expressions, code)."""
    match = re.match(r"\s*([A-Za-z][\w-]*)\s*(?:\[|$)", action)
    return match.group(1) if match else "other"


def describe_kinds(kinds: dict[str, float] | None, top: int = 3) -> str:
    """``search 0.68, finish 0.32``: the most common action kinds of a check (``-`` when none)."""
    if not kinds:
        return "-"
    shown = [f"{k} {v:.2f}" for k, v in list(kinds.items())[:top]]
    return ", ".join(shown + (["..."] if len(kinds) > top else []))


def kind_shares(actions: Sequence[str]) -> dict[str, float]:
    """:func:`action_kind` shares of ``actions``, most common first (ties by name)."""
    counts = Counter(action_kind(action) for action in actions)
    return {k: round(n / len(actions), 4) for k, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))}


def format_check(config: RunConfig, model: Any, tokenizer: Any, *, episodes: int | None = None, progress: str | None = None) -> FormatCheck:
    """Share of replies that parse and whose actions are well formed (:func:`well_formed`), sampled like training.

    Plays ``episodes`` (default ``warm_start.check_episodes``) single-member groups with the
    configured engine and the real runner at ``sampling.train`` on seeds disjoint from the
    demonstrations and from training (``derive_seed(seed, "warm-start-check")``). ``progress``
    names a progress bar over the rollout's turns (none when ``None``).
    """
    from tqdm import tqdm

    from ragen_core.trainer.setup import make_engine, make_runner

    n = episodes or config.warm_start.check_episodes
    check_cfg = config.model_copy(update={"seed": derive_seed(config.seed, "warm-start-check")})
    engine = make_engine(check_cfg, model, tokenizer)
    runner = make_runner(check_cfg, engine, tokenizer, "train", groups=n, group_size=1)
    from ragen_core.trainer.progress import bars_drawn

    bar = tqdm(desc=progress, unit="turn", leave=False, disable=progress is None or not bars_drawn())  # in a log: the round lines
    runner.progress = lambda what: bar.update(1) if what.startswith("turn ") else None
    try:
        trajs = runner.run(mode="train", sampling=config.sampling.train)
    finally:
        bar.close()
        runner.close()
        engine.close()  # (a vLLM engine holds its own copy of the weights and GPU memory)
    turns = [t for tr in trajs for t in tr.turns]
    good = [t for t in turns if t.valid and well_formed(t.info)]
    return FormatCheck(len(good) / len(turns) if turns else 0.0, [t.response_text for t in turns[:3]],
                       kind_shares([a for t in good for a in t.actions]))


def well_formed(info: dict[str, Any]) -> bool:
    """Whether a parsed reply's action is well formed for the env: ``info["action_is_well_formed"]``
    when the env reports it (an env whose ``action_is_valid`` also judges the move, as Sudoku's does
    for a clash with the board, says here that it was a placement at all), else ``action_is_valid``
    (true when absent). The warm start teaches the format, so its gate measures this."""
    value = info.get("action_is_well_formed", info.get("action_is_valid", True))
    return value is not False


def valid_rate(config: RunConfig, model: Any, tokenizer: Any, *, episodes: int | None = None) -> float:
    """:func:`format_check`'s valid rate alone."""
    return format_check(config, model, tokenizer, episodes=episodes).valid_rate


def demonstrations(config: RunConfig, tokenizer: Any, *, round_no: int = 0, balance: dict[str, list[str]] | None = None,
                   cut: dict[str, int] | None = None) -> list[Any]:
    """Roll out :class:`DemoEngine` through the normal runner on seeds disjoint from training.

    Round ``r > 0`` of the warm start uses its own seeds, so every round adds new states.
    ``balance`` (see :meth:`DemoEngine.pick`) carries the per-state action queues across rounds;
    ``None`` with ``warm_start.balanced`` starts fresh queues for this call. ``cut``, when given,
    receives ``replies``, ``cut`` (replies longer than ``sampling.train.max_new_tokens`` even with
    an empty thought, or than the env's ``max_tokens`` under ``rollout.enforce_env_max_tokens``),
    ``needed`` (the longest of those, in tokens) and ``budget`` (the smallest budget one was cut at).
    """
    from ragen_core.interfaces.env_pool import EnvRef
    from ragen_core.rollout.env_pool import LocalEnvPool
    from ragen_core.rollout.runner import RolloutRunner, with_overrides
    from ragen_core.trainer.setup import rollout_config

    seed = derive_seed(config.seed, "warm-start") if round_no == 0 else derive_seed(config.seed, "warm-start", round_no)
    ws = config.warm_start
    demo_cfg = config.model_copy(update={"seed": seed})
    if ws.max_turns is not None:
        demo_cfg = demo_cfg.model_copy(update={"rollout": config.rollout.model_copy(update={"max_turns": ws.max_turns})})
    # demonstrations train on their sampled ids (sft builds no compat.retokenized_text rows)
    runner_config = rollout_config(demo_cfg, "train", groups=ws.episodes, group_size=1).model_copy(update={"retokenized_text": False})
    env = with_overrides(EnvRef(name=config.env, config=dict(config.env_config), preset=config.preset), runner_config)
    legal: LegalActions = {}
    drawn: list[str] = []
    pool = LocalEnvPool(env, env_factory=lambda: RecordingEnv(env.build(), seed, legal, stray_share=ws.stray_share, drawn=drawn))
    queues = (balance if balance is not None else {}) if ws.balanced else None
    engine = DemoEngine(tokenizer, legal=legal, enable_think=config.rollout.enable_think, seed=seed, thoughts=tuple(ws.thoughts),
                        spaced=ws.spaced, balance=queues)
    runner = RolloutRunner(env, engine, tokenizer, runner_config, pool=pool)
    try:
        trajs = runner.run(mode="train", sampling=config.sampling.train)
    finally:
        runner.close()
    if cut is not None:
        cut.update(replies=sum(len(t.turns) for t in trajs), cut=engine.cut, needed=engine.needed, budget=engine.budget)
    return trajs


def reply_logprobs(model: Any, sub: Any) -> tuple[Any, Any]:
    """Log-probs of every token after each row's first reply token, with the prompt prefix cached.

    The prompt before the first reply is run once without gradients and kept as a KV cache
    (:func:`ragen_core.trainer.prefix.run_prefixes`); only the remainder (replies and later
    observations) is run with gradients. Forward values equal a full forward; gradients skip the
    prompt's own activations (about 3x cheaper for long prompts).

    Returns ``(logp, mask)`` in the batch's shifted ``[B, L-1]`` layout: the log-prob of token
    ``t+1`` (0 before the row's first reply token) and the response mask.
    """
    import torch

    from ragen_core.trainer import prefix
    from ragen_core.trainer.modeling import _logp_entropy, token_logprobs

    device = next(model.parameters()).device
    ids, am, mask = sub.input_ids.to(device), sub.attention_mask.to(device), sub.response_mask.to(device)
    lengths = am.sum(1)
    starts = prefix.first_trained(mask, lengths)
    if bool((starts < 1).any()):
        return token_logprobs(model, ids, am)[0], mask
    with torch.no_grad():
        kv, prefix_mask = prefix.run_prefixes(model, ids, starts)
    logits, ids_s = prefix.run_suffixes(model, ids, kv, prefix_mask, starts, lengths)
    logp, _ = _logp_entropy(logits, ids_s.roll(-1, dims=1), 1.0, False)
    plan = prefix.PrefixPlan(cluster=torch.arange(len(ids), device=device), prefix_lens=starts, starts=starts, lengths=lengths,
                             width=int(ids.shape[1]))
    return prefix.to_shifted(logp, plan), mask


def sft(model: Any, tokenizer: Any, trajs: list[Any], *, epochs: int, lr: float, batch_size: int, seed: int,
        optimizer: Any = None, prompt_loss_weight: float = 0.0, schedule: str = "constant", per_turn: bool = False,
        progress: str | None = None, micro_batch_size: int | None = None, deadline: float | None = None) -> list[float]:
    """Cross-entropy on the reply tokens of ``trajs``; returns the loss of every batch.

    ``deadline`` (a ``time.time()`` value): no batch starts after it (the first always runs), so
    a warm start's time budget holds within a round, not only between rounds.

    ``optimizer`` (AdamW at ``lr`` when ``None``) lets rounds continue one optimiser state.
    ``schedule="cosine"`` decays the rate from ``lr`` to 0 over this call's steps (each warm-start
    round restarts it), so the model a round ends with is not tilted by its last few batches.
    ``prompt_loss_weight > 0`` adds that weight times the loss on every other token (prompt,
    observations) and runs the full sequence with gradients; the reported loss is the reply part.
    ``per_turn`` makes every turn its own row (needed when the demonstrations come from a windowed
    context mode, whose turns are not one growing sequence). ``progress`` names a progress bar over
    the steps, showing the latest reply loss (none when ``None``).

    ``micro_batch_size`` rows (default: the whole batch) run forward and backward at a time and
    their gradients add up before the step, so memory grows with the micro-batch, not the batch
    (the activations kept for the backward pass of a multi-turn row are large: ~270 MB for a
    3,200-token Sudoku episode of the tiny model). Each micro-batch's loss is divided by the
    batch's token count, so the step is the whole batch's (up to float summation order).
    """
    import torch

    from ragen_core.trainer.batch import build_batch
    from ragen_core.trainer.modeling import token_logprobs

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    batch = build_batch(trajs, pad, per_turn=per_turn)
    opt = optimizer or torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    rng = make_rng(seed, "sft-order")
    losses: list[float] = []
    device = next(model.parameters()).device
    model.eval()
    total = epochs * -(-len(batch) // batch_size)
    micro = min(micro_batch_size or batch_size, batch_size)
    step = 0
    from tqdm import tqdm

    from ragen_core.trainer.progress import bars_drawn

    bar = tqdm(total=total, desc=progress, unit="step", leave=False, disable=progress is None or not bars_drawn())  # in a log: the round lines
    for _ in range(epochs):
        order = rng.permutation(len(batch)).tolist()
        for start in range(0, len(order), batch_size):
            if deadline is not None and losses and time.time() >= deadline:
                break
            for group in opt.param_groups:
                group["lr"] = lr if schedule == "constant" else lr * 0.5 * (1.0 + math.cos(math.pi * step / total))
            step += 1
            rows = order[start : start + batch_size]
            sub = batch.select(rows)
            # token counts of the whole batch: the micro-batches' losses add up to the batch's mean
            n_reply = sub.response_mask.float().sum().clamp(min=1).to(device)
            n_other = (sub.attention_mask[:, 1:].float() * (1.0 - sub.response_mask.float())).sum().clamp(min=1).to(device)
            opt.zero_grad(set_to_none=True)
            reply_sum = 0.0
            for m in range(0, len(rows), micro):
                part = sub.select(range(m, min(m + micro, len(rows))))
                if prompt_loss_weight > 0:
                    logp, _ = token_logprobs(model, part.input_ids.to(device), part.attention_mask.to(device))
                    mask = part.response_mask.to(device).float()
                    other = part.attention_mask[:, 1:].to(device).float() * (1.0 - mask)
                    reply = -(logp * mask).sum() / n_reply
                    loss = reply + prompt_loss_weight * (-(logp * other).sum() / n_other)
                else:
                    logp, mask = reply_logprobs(model, part)
                    loss = reply = -(logp * mask).sum() / n_reply
                loss.backward()  # gradients add up over the micro-batches
                reply_sum += float(reply.detach())
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(reply_sum)
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
        if deadline is not None and time.time() >= deadline:
            break
    bar.close()
    opt.zero_grad(set_to_none=True)
    return losses
