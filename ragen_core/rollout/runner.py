"""The multi-turn rollout loop (spec 6.1): one batched ``generate`` per turn for all live episodes.

``RolloutRunner.run`` asks its env pool to reset ``env_groups x group_size`` episodes, then for
each turn builds the prompt ids of every episode that is still running, samples all replies in
*one* engine call, parses them, applies the turn rules of :mod:`ragen_core.rollout.episodes`
(map actions, format penalty, action budget), sends all live episodes' actions to the pool in
*one* ``step`` call, and records a :class:`~ragen_core.rollout.types.Turn` per episode.
Finished episodes leave the batch, so they stop costing compute.

The runner never holds an env: the pool (:class:`~ragen_core.interfaces.env_pool.EnvPool`,
``local`` by default) runs them wherever it runs them and answers in plain data. Each reply is
sampled with its own seed, ``derive_seed("rollout", mode, seed, member, turn)``, so it does not
depend on its position in the batch or on which other episodes are still running.

Context modes:

* ``full`` (default): one growing context per episode built by appending ids
  (:mod:`ragen_core.rollout.chat`); ``turns[k+1].prompt_ids`` starts with
  ``turns[k].prompt_ids + turns[k].response_ids``. Train on it with
  :func:`ragen_core.rollout.layout.episode_layout`. With ``retokenized_text`` (the reference's
  text, spec 17 L1) every prompt is the conversation rendered anew, replies reconstructed, and
  each turn records the messages it trains on (``Turn.sample_messages``).
* ``last-k``: each turn's prompt re-renders the last ``max_context_turns`` turns (the current one
  included) as chat messages; train per turn with :func:`~ragen_core.rollout.layout.turn_samples`.
* ``single-turn``: each prompt is ``[system, user]`` where the user message digests the last
  ``max_context_turns - 1`` turns (spec 5.5); train per turn as well.

Length limit (spec 17 L3): a prompt may use at most ``max_model_len - max_new_tokens`` tokens.
In ``full`` mode an episode whose next prompt would not fit ends there, truncated, with
``end_reason = "context_length"``; the other modes first drop history turns. With
``retokenized_text`` a ``full`` prompt first drops its oldest turns as the reference does (spec
5.6, :meth:`~ragen_core.rollout.chat.ChatTokens.truncate_history`; the reply budget stays
reserved, unlike the reference's), and each turn's training messages are cut to ``max_model_len``.

Reply budget (spec 17 L33): an env's ``max_tokens`` is only the length hint its prompts state
("Max response length: N"); every reply may use the rollout's ``max_new_tokens``. With
``enforce_env_max_tokens`` each episode's replies stop at ``min(max_new_tokens, env max_tokens)``
instead (the engine's :meth:`~ragen_core.interfaces.engine.Engine.generate_capped`, so episodes of
envs with different budgets still share one batch), its prompts state that budget, and its prompts
get ``max_model_len`` minus that budget (its replies cannot be longer).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
from collections.abc import Callable, Iterator
from typing import Any, Literal

from pydantic import Field, model_validator

from ragen_core.config import short_repr
from ragen_core.errors import PluginError
from ragen_core.interfaces.engine import Engine, SamplingParams, generate_by_budget
from ragen_core.interfaces.env_pool import EnvFacts, EnvPool, EnvRef, EpisodeStart, ResetRequest, StepOutcome, StepRequest
from ragen_core.registry import plugin_call, plugin_label
from ragen_core.rollout import prompts
from ragen_core.rollout.chat import ChatTokens
from ragen_core.rollout.episodes import (
    EpisodeRecord,
    SeedSchedule,
    aggregate_info,
    apply_outcome,
    plan_turn,
    reset_requests,
    turn_info,
)
from ragen_core.rollout.parser import ParsedReply, parse_reply
from ragen_core.rollout.types import Trajectory, Turn
from ragen_core.seeding import derive_seed
from ragen_core.specs import PluginConfig

logger = logging.getLogger(__name__)
_STARTS_APART_SAID: set[str] = set()
"""Envs whose group members started apart, said once per process."""


class RolloutConfig(PluginConfig):
    """Settings of the rollout loop."""

    env_groups: int = Field(default=8, ge=1)
    """Distinct task instances per rollout."""
    group_size: int = Field(default=16, ge=1)
    """Episodes per task instance (same seed, own member index)."""
    max_turns: int | None = Field(default=None, ge=1)
    """Overrides the env config's ``max_turns`` when set."""
    max_actions_per_turn: int | None = Field(default=None, ge=1)
    """Overrides the env config's ``max_actions_per_turn`` when set."""
    format_penalty: float = -0.1
    """Charged to a turn whose reply had no usable action or an unknown action (<= 0)."""
    enable_think: bool = True
    """Ask for ``<think>...</think><answer>...</answer>`` replies (else answer only)."""
    context_window: Literal["full", "last-k", "single-turn"] = "full"
    """How much history each prompt carries (see the module docstring)."""
    max_context_turns: int | None = Field(default=None, ge=1)
    """Turns per prompt in ``last-k``/``single-turn`` mode, current one included (None = 1)."""
    max_model_len: int = Field(default=3600, ge=16)
    """Prompt + reply budget in tokens; prompts get ``max_model_len`` minus the episode's reply budget
    (``max_new_tokens``, or the env's ``max_tokens`` when smaller and ``enforce_env_max_tokens`` is on)."""
    enforce_env_max_tokens: bool = False
    """Stop each reply at ``min(max_new_tokens, the env's max_tokens)`` and state that budget in the
    prompt; False: the env's ``max_tokens`` is only the prompt's length hint (the reference)."""
    prompt_merge_quirk: bool = False
    """System prompts carry each env's ``merge_quirk_instruction()`` (legend, coordinate hint and
    action list of the env's default config, the reference's quirk: spec 17 L30) instead of its
    ``instruction()``. A run sets it from ``compat.prompt_merge_quirk``."""
    retokenized_text: bool = False
    """History shows each reply's reconstruction (:attr:`ParsedReply.reconstructed`, the reference's
    text: spec 5.3, 17 L1) and every turn records its training messages (``Turn.sample_messages``);
    ``full`` prompts are then rendered and tokenised anew each turn instead of appending ids. A run
    sets it from ``compat.retokenized_text``."""
    seed_train: int = 10000
    """Base seed of training rollouts (advanced by ``env_groups`` every rollout)."""
    seed_val: int = 123
    """Fixed base seed of validation rollouts."""

    @model_validator(mode="after")
    def _turn_window_needs_a_windowed_mode(self) -> RolloutConfig:
        # The reference ignores its max_context_window in full mode without a word (spec 17 L32).
        if self.context_window == "full" and self.max_context_turns is not None:
            raise ValueError(f"max_context_turns={self.max_context_turns} has no effect with context_window='full' (every prompt "
                             "carries the whole episode): set context_window=last-k or single-turn, or max_context_turns=null")
        return self


def with_overrides(env: EnvRef, config: RolloutConfig) -> EnvRef:
    """``env`` with the rollout config's ``max_turns``/``max_actions_per_turn`` in its env config."""
    extra = {k: getattr(config, k) for k in ("max_turns", "max_actions_per_turn") if getattr(config, k) is not None}
    return env.model_copy(update={"config": {**env.config, **extra}}) if extra else env


class RolloutRunner:
    """Runs multi-turn episodes of one env with one engine.

    Args:
        env: The env (name, config overrides, preset); ``max_turns``/``max_actions_per_turn`` from
            ``config`` take precedence over its config when set.
        engine: Any :class:`~ragen_core.interfaces.engine.Engine`.
        tokenizer: The policy's Hugging Face tokenizer (chat template required).
        config: Rollout settings.
        pool: Where the envs run (default: a :class:`~ragen_core.rollout.env_pool.LocalEnvPool`
            of ``env``). A given pool builds its envs from its own ``EnvRef``; the runner's
            ``max_turns``/``max_actions_per_turn`` still apply to its turn rules.
    """

    def __init__(self, env: EnvRef, engine: Engine, tokenizer: Any, config: RolloutConfig | None = None, *, pool: EnvPool | None = None) -> None:
        self.config = config or RolloutConfig()
        self.env = with_overrides(env, self.config)
        self.tag = env.preset or env.name
        if pool is None:
            from ragen_core.rollout.env_pool import LocalEnvPool

            pool = LocalEnvPool(self.env)
        self.pool = pool
        self.engine = engine
        self.tokenizer = tokenizer
        self.chat = ChatTokens(tokenizer, prompts.generation_prefix(self.config.enable_think))
        self.seeds = SeedSchedule(self.config.seed_train, self.config.seed_val)
        self.progress: Callable[[str], None] | None = None
        """Called with a short description after every reset and every turn (the trainer's watchdog)."""
        self.waiting_on: str | None = None
        """The call the rollout is in now ("the step of env 'sokoban' (turn 3 of a train rollout)"; None:
        none): read from another thread to say where a rollout that does not end is stuck."""

    def state_dict(self) -> dict[str, int]:
        """Checkpointable state (the seed counter)."""
        return self.seeds.state_dict()

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.seeds.load_state_dict(state)

    def close(self) -> None:
        """Close the pool (its envs and workers). Idempotent."""
        self.pool.close()

    def _say_if_members_start_apart(self, requests: list[ResetRequest], starts: list[EpisodeStart]) -> None:
        """Warn (once per env and process) when members of one group, reset with one seed, got
        different first observations: an env whose ``reset`` ignores the seed trains without error,
        but the group's advantages then compare episodes that did not start alike."""
        if self.env.name in _STARTS_APART_SAID:
            return
        first: dict[int, str] = {}
        for request, start in zip(requests, starts):
            if first.setdefault(request.seed, start.observation) != start.observation:
                _STARTS_APART_SAID.add(self.env.name)
                logger.warning("env %r gave the members of one group (seed %d) different first observations: reset(seed) must give "
                               "each member the same start, or group-relative advantages compare episodes that began apart "
                               "(ragen_core.testing's env checks test this)", self.env.name, request.seed)
                return

    # -------------------------------------------------------------------- run
    def run(
        self,
        *,
        mode: str = "train",
        sampling: SamplingParams | None = None,
        env_groups: int | None = None,
        group_size: int | None = None,
        seed: int | None = None,
    ) -> list[Trajectory]:
        """Play one rollout and return one trajectory per episode (group-major order).

        Args:
            mode: ``"train"`` (fresh seeds every call) or ``"val"`` (fixed seeds).
            sampling: Sampling settings for every turn (default :class:`SamplingParams`).
            env_groups: Override of ``config.env_groups`` (e.g. a larger validation set).
            group_size: Override of ``config.group_size``.
            seed: Explicit base seed for this rollout (see :class:`SeedSchedule`).
        """
        try:
            return self._play(mode, sampling or SamplingParams(), env_groups or self.config.env_groups, group_size or self.config.group_size, seed)
        finally:  # also when a turn raised: the caches kept for the next turn are never extended
            self.engine.rollout_done()

    def _play(self, mode: str, sampling: SamplingParams, n_groups: int, size: int, seed: int | None) -> list[Trajectory]:
        """The rollout of :meth:`run`, its arguments resolved."""
        requests = reset_requests(self.seeds.next_base(mode, n_groups, seed), n_groups, size, mode,
                                  prompt_merge_quirk=self.config.prompt_merge_quirk)
        with self._waiting_on(f"the reset of env {self.env.name!r} (a {mode} rollout)"), plugin_call(self.pool, "reset"):
            starts = self.pool.reset(requests)
        _replies_match(self.pool, "reset", requests, starts, EpisodeStart)
        self._say_if_members_start_apart(requests, starts)
        self._progress(f"the reset of a {mode} rollout")
        episodes = [self._record(req, start, size, sampling) for req, start in zip(requests, starts)]
        think = self.config.enable_think
        max_turns = max((ep.facts.max_turns for ep in episodes), default=0)
        for turn_no in range(1, max_turns + 1):
            live: list[EpisodeRecord] = []
            batch: list[list[int]] = []
            for ep in episodes:
                if ep.done:
                    continue
                if turn_no > ep.facts.max_turns:
                    ep.finish("max_turns", truncated=False)
                    continue
                ids = self._next_prompt(ep, turn_no, self.config.max_model_len - ep.max_new_tokens, think)
                if ids is None:
                    ep.finish("context_length", truncated=True)
                    continue
                live.append(ep)
                batch.append(ids)
            if not live:
                break
            seeds = [derive_seed("rollout", mode, ep.traj.seed, ep.traj.member, turn_no) for ep in live]
            gens = self._generate(batch, sampling, seeds, [ep.max_new_tokens for ep in live], f"turn {turn_no} of a {mode} rollout")
            if not isinstance(gens, list) or len(gens) != len(batch) or not all(isinstance(getattr(g, "token_ids", None), list) for g in gens):
                raise PluginError(f"{plugin_label(self.engine)}: generate returned {_counted(gens)} for {len(batch)} prompts",
                                  ["generate returns one Generation (token_ids: a list of ints) per prompt, in prompt order"])
            prefix = self.chat.generation_prefix
            texts = [prefix + self.tokenizer.decode(gen.token_ids, skip_special_tokens=True) for gen in gens]
            parses = [
                parse_reply(text, think=think, action_sep=ep.facts.action_sep, max_actions=ep.facts.max_actions_per_turn)
                for ep, text in zip(live, texts)
            ]
            plans = [plan_turn(parsed, ep.facts, ep.actions_left, self.config.format_penalty) for ep, parsed in zip(live, parses)]
            step_requests = [StepRequest(ep.traj.env_id, plan.actions) for ep, plan in zip(live, plans)]
            with self._waiting_on(f"the step of env {self.env.name!r} (turn {turn_no} of a {mode} rollout)"), plugin_call(self.pool, "step"):
                outcomes = self.pool.step(step_requests)
            _replies_match(self.pool, "step", step_requests, outcomes, StepOutcome)
            self._progress(f"turn {turn_no} of a {mode} rollout")
            for ep, ids, gen, text, parsed, plan, outcome in zip(live, batch, gens, texts, parses, plans, outcomes):
                ep.parsed.append(parsed)
                sample = self._sample_messages(ep, parsed) if self.config.retokenized_text else None
                ep.traj.turns.append(
                    Turn(
                        prompt_ids=ids,
                        response_ids=list(gen.token_ids),
                        response_text=text,
                        reasoning=parsed.reasoning,
                        reasoning_ids=self.chat.encode(parsed.reasoning) if parsed.reasoning is not None else None,
                        answer=parsed.answer,
                        actions=list(outcome.executed),
                        reward=outcome.reward,
                        penalty=plan.penalty,
                        valid=plan.valid,
                        info=turn_info(outcome, plan),
                        info_records=[{k: float(v) for k, v in record.items()} for record in outcome.info_records],
                        observation=ep.observation,
                        response_logprobs=list(gen.logprobs) if gen.logprobs is not None else None,
                        finish_reason=gen.finish_reason,
                        policy_version=gen.policy_version,
                        sample_messages=sample,
                    )
                )
                apply_outcome(ep, plan, outcome)
        for ep in episodes:
            if not ep.done:
                ep.finish("max_turns", truncated=False)
            ep.traj.final_observation = ep.observation
            ep.traj.info_metrics = aggregate_info((r for turn in ep.traj.turns for r in turn.info_records), ep.facts.info_metrics)
        return [ep.traj for ep in episodes]

    def _generate(self, batch: list[list[int]], sampling: SamplingParams, seeds: list[int], budgets: list[int], when: str) -> Any:
        """The engine's replies to ``batch``: one ``generate`` call, or ``generate_capped`` when some
        episode's reply budget is below ``sampling.max_new_tokens`` (``enforce_env_max_tokens``)."""
        if all(b == sampling.max_new_tokens for b in budgets):
            with self._waiting_on(f"the engine's generate ({when})"), plugin_call(self.engine, "generate"):
                return self.engine.generate(batch, sampling, seeds)
        # a duck-typed engine gets Engine's default, one generate call per budget: errors name what it has
        method = "generate_capped" if isinstance(self.engine, Engine) else "generate"
        with self._waiting_on(f"the engine's {method} ({when})"), plugin_call(self.engine, method):
            if isinstance(self.engine, Engine):
                return self.engine.generate_capped(batch, sampling, seeds, budgets)
            return generate_by_budget(self.engine, batch, sampling, seeds, budgets)

    @contextlib.contextmanager
    def _waiting_on(self, what: str) -> Iterator[None]:
        """:attr:`waiting_on` is ``what`` while the block runs, and after an interrupt (Ctrl-C, SIGTERM)
        that ended it, so the trainer can say where the aborted step was."""
        self.waiting_on = what
        try:
            yield
        except Exception:
            self.waiting_on = None
            raise
        self.waiting_on = None

    def _progress(self, what: str) -> None:
        if self.progress is not None:
            self.progress(what)

    def _record(self, request: ResetRequest, start: EpisodeStart, group_size: int, sampling: SamplingParams) -> EpisodeRecord:
        """The runner's record of a new episode: trajectory header, system prompt, facts, reply budget."""
        facts = self._facts(start.facts)
        traj = Trajectory(
            env=self.env.name,
            tag=self.tag,
            group_id=request.episode_id // group_size,
            member=request.member,
            seed=request.seed,
            env_id=request.episode_id,
        )
        traj.system_prompt = prompts.system_prompt(
            start.instruction,
            action_names=list(facts.action_names) if facts.action_names is not None else None,
            max_actions_per_episode=facts.max_actions_per_episode,
            action_sep=facts.action_sep,
        )
        budget, hint = sampling.max_new_tokens, facts.max_tokens
        if self.config.enforce_env_max_tokens:
            budget = hint = min(budget, facts.max_tokens)
        return EpisodeRecord(traj=traj, observation=start.observation, facts=facts, max_new_tokens=budget, length_hint=hint)

    def _facts(self, facts: EnvFacts) -> EnvFacts:
        """The pool's facts with this runner's ``max_turns``/``max_actions_per_turn`` overrides."""
        extra = {k: getattr(self.config, k) for k in ("max_turns", "max_actions_per_turn") if getattr(self.config, k) is not None}
        return dataclasses.replace(facts, **extra) if extra else facts

    # ---------------------------------------------------------------- prompts
    def _block(self, ep: EpisodeRecord, turn_no: int, think: bool) -> str:
        """State block of the current turn, remembered for re-rendering in windowed modes."""
        block = prompts.turn_message(
            turn_no,
            ep.observation,
            actions_left=ep.actions_left,
            max_tokens=ep.length_hint,
            think=think,
            warn_invalid=ep.warn_invalid,
        )
        ep.blocks.append(block)
        return block

    def _next_prompt(self, ep: EpisodeRecord, turn_no: int, budget: int, think: bool) -> list[int] | None:
        """Prompt ids for this turn, or None when nothing fits in ``budget`` tokens."""
        block = self._block(ep, turn_no, think)
        turns = ep.traj.turns
        mode = self.config.context_window
        if mode == "full" and self.config.retokenized_text:
            ids = self._retokenized_prompt(ep, budget)
            return ids if len(ids) <= budget else None
        if mode == "full":
            if not turns:
                ids = self.chat.first_prompt(ep.traj.system_prompt, block)
            else:
                last = turns[-1]
                user = prompts.reward_prefix(last.reward) + block
                ids = last.prompt_ids + last.response_ids + self.chat.continuation(last.response_ids, user, system=ep.traj.system_prompt)
            return ids if len(ids) <= budget else None
        k = self.config.max_context_turns or 1
        for history in range(min(k - 1, len(turns)), -1, -1):
            ids = self._windowed_prompt(ep, turn_no, history, think)
            if len(ids) <= budget:
                return ids
        return None

    def _retokenized_prompt(self, ep: EpisodeRecord, budget: int) -> list[int]:
        """``full`` prompt with ``retokenized_text``: the conversation rendered with every reply
        reconstructed (blocks as they were shown, warnings included), its oldest turns dropped to
        fit in ``budget`` as the reference does (spec 5.6, :meth:`ChatTokens.truncate_history`);
        its training messages, without warnings and not truncated, go to ``ep.sample_head``."""
        turns, blocks = ep.traj.turns, ep.blocks
        shown = [{"role": "system", "content": ep.traj.system_prompt}]
        for j, block in enumerate(blocks):
            head = prompts.reward_prefix(turns[j - 1].reward) if j else ""
            shown.append({"role": "user", "content": head + block})
            if j < len(turns):
                shown.append({"role": "assistant", "content": ep.parsed[j].reconstructed})
        ep.sample_head = [{**m, "content": _strip_warning(m["content"])} if m["role"] == "user" else m for m in shown]
        return self.chat.truncate_history(shown, budget, add_generation_prompt=True)[1]

    def _sample_messages(self, ep: EpisodeRecord, parsed: ParsedReply) -> list[dict[str, str]]:
        """``retokenized_text``: the messages this turn trains on; in ``full`` mode the oldest turns
        are dropped until they fit in ``max_model_len`` (spec 5.6, 5.7: the reference truncates its
        training rows apart from its prompts) and a row still too long is kept with a warning."""
        sample = ep.sample_head + [{"role": "assistant", "content": parsed.reconstructed}]
        if self.config.context_window != "full":
            return sample
        kept, ids = self.chat.truncate_history(sample, self.config.max_model_len, add_generation_prompt=False)
        if len(ids) > self.config.max_model_len:
            logger.warning("compat.retokenized_text: episode env_id=%s trains a row of %d tokens, longer than rollout.max_model_len=%d "
                           "even with its oldest turns dropped", ep.traj.env_id, len(ids), self.config.max_model_len)
        return kept

    def _windowed_prompt(self, ep: EpisodeRecord, turn_no: int, history: int, think: bool) -> list[int]:
        """Prompt for ``last-k``/``single-turn`` mode showing ``history`` earlier turns."""
        turns = ep.traj.turns
        first = len(turns) - history
        system = {"role": "system", "content": ep.traj.system_prompt}
        if self.config.context_window == "single-turn":
            parsed: list[ParsedReply] = ep.parsed
            past = [
                prompts.PastTurn(number=j + 1, observation=turns[j].observation, reply=parsed[j].reconstructed, reward=turns[j].reward)
                for j in range(first, len(turns))
            ]
            user = prompts.memory_message(
                turn_no,
                ep.observation,
                past,
                actions_left=ep.actions_left,
                max_tokens=ep.length_hint,
                think=think,
                warn_invalid=ep.warn_invalid,
            )
            if self.config.retokenized_text:  # trained without the warning (spec 5.2)
                ep.sample_head = [system, {"role": "user", "content": prompts.memory_message(
                    turn_no, ep.observation, past, actions_left=ep.actions_left, max_tokens=ep.length_hint, think=think, warn_invalid=False)}]
            return self.chat.prompt([system, {"role": "user", "content": user}])
        blocks = ep.blocks
        messages = [system]
        for j in range(first, len(turns)):
            head = prompts.reward_prefix(turns[j - 1].reward) if j > first else ""
            messages.append({"role": "user", "content": head + _strip_warning(blocks[j])})
            reply = ep.parsed[j].reconstructed if self.config.retokenized_text else turns[j].response_text
            messages.append({"role": "assistant", "content": reply})
        head = prompts.reward_prefix(turns[-1].reward) if history else ""
        messages.append({"role": "user", "content": head + blocks[-1]})
        if self.config.retokenized_text:
            ep.sample_head = messages[:-1] + [{"role": "user", "content": head + _strip_warning(blocks[-1])}]
        return self.chat.prompt(messages)


def _strip_warning(block: str) -> str:
    """History blocks are shown without the invalid-action warning (it concerned that moment)."""
    return block.replace(prompts.INVALID_WARNING + "\n", "")


def _counted(replies: Any) -> str:
    """``3 items`` / ``a dict``: what a plugin returned, for an error line."""
    return f"{len(replies)} items" if isinstance(replies, list) else f"{type(replies).__name__} {str(replies)[:60]!r}"


def _replies_match(pool: Any, what: str, requests: list[Any], replies: Any, kind: type) -> None:
    """A pool's answers are one ``kind`` per request, for its episode, in request order: the runner
    pairs them by position, so a short, reordered or mistyped list trained on wrong data silently.

    Raises:
        PluginError: naming the pool and what it returned.
    """
    hint = [f"{what} returns one {kind.__name__} per request, for that request's episode, in request order "
            "(ragen_core.testing.pool_checks tests a pool)"]
    if not isinstance(replies, list) or len(replies) != len(requests):
        raise PluginError(f"{plugin_label(pool)}: {what} returned {_counted(replies)} for {len(requests)} requests", hint)
    for i, (request, reply) in enumerate(zip(requests, replies)):
        if not isinstance(reply, kind):
            raise PluginError(f"{plugin_label(pool)}: {what} returned {type(reply).__name__} items, not {kind.__name__}", hint)
        if reply.episode_id != request.episode_id:  # type: ignore[attr-defined]  # both reply kinds have one
            raise PluginError(f"{plugin_label(pool)}: {what}'s reply {i} is for episode {reply.episode_id}, its request for "  # type: ignore[attr-defined]
                              f"episode {request.episode_id}", hint)
        reward = getattr(reply, "reward", 0.0)
        if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
            raise PluginError(f"{plugin_label(pool)}: {what} returned reward {reward!r} for episode {reply.episode_id}: "  # type: ignore[attr-defined]
                              "not a finite number", ["the pools' run_actions (ragen_core.rollout.env_pool) checks an env's rewards"])
        records = getattr(reply, "info_records", [])
        if not isinstance(records, list) or not all(isinstance(r, dict) and all(isinstance(k, str) and _finite_number(v) for k, v in r.items())
                                                    for r in records):
            raise PluginError(f"{plugin_label(pool)}: {what} returned info_records {short_repr(records, 60)} for episode "
                              f"{request.episode_id}: not a list of dicts of info key -> finite number",
                              ["the pools' run_actions (ragen_core.rollout.env_pool) keeps one such record per executed action"])


def _finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)
