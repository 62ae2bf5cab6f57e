"""The multi-turn rollout loop (spec 6.1): one batched ``generate`` per turn for all live episodes.

``RolloutRunner.run`` resets a pool of ``env_groups x group_size`` envs, then for each turn
builds the prompt ids of every episode that is still running, samples all replies in *one*
engine call, parses them, steps the envs, and records a :class:`~ragen_core.rollout.types.Turn`
per episode. Finished episodes leave the batch, so they stop costing compute.

Context modes:

* ``full`` (default): one growing context per episode built by appending ids
  (:mod:`ragen_core.rollout.chat`); ``turns[k+1].prompt_ids`` starts with
  ``turns[k].prompt_ids + turns[k].response_ids``. Train on it with
  :func:`ragen_core.rollout.layout.episode_layout`.
* ``last-k``: each turn's prompt re-renders the last ``max_context_turns`` turns (the current one
  included) as chat messages; train per turn with :func:`~ragen_core.rollout.layout.turn_samples`.
* ``single-turn``: each prompt is ``[system, user]`` where the user message digests the last
  ``max_context_turns - 1`` turns (spec 5.5); train per turn as well.

Length limit (spec 17 L3): a prompt may use at most ``max_model_len - max_new_tokens`` tokens.
In ``full`` mode an episode whose next prompt would not fit ends there, truncated, with
``end_reason = "context_length"``; the other modes first drop history turns.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ragen_core.interfaces.engine import Engine, SamplingParams
from ragen_core.rollout import prompts
from ragen_core.rollout.chat import ChatTokens
from ragen_core.rollout.env_pool import EnvPool, Episode, SeedSchedule
from ragen_core.rollout.parser import ParsedReply, parse_reply
from ragen_core.rollout.types import Trajectory, Turn
from ragen_core.seeding import derive_seed
from ragen_core.specs import PluginConfig


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
    """Prompt + reply budget in tokens; prompts get ``max_model_len - max_new_tokens``."""
    seed_train: int = 10000
    """Base seed of training rollouts (advanced by ``env_groups`` every rollout)."""
    seed_val: int = 123
    """Fixed base seed of validation rollouts."""
    env_workers: int = Field(default=1, ge=1)
    """Threads that step the episodes of a turn concurrently (for envs whose ``step`` waits on
    a server, spec 17 L25); 1 = step in order in the calling thread."""


class RolloutRunner:
    """Runs multi-turn episodes of one env with one engine.

    Args:
        env_name: Registered env name.
        env_config: Env config overrides (``max_turns``/``max_actions_per_turn`` from ``config``
            take precedence when set).
        preset: Optional env preset.
        engine: Any :class:`~ragen_core.interfaces.engine.Engine`.
        tokenizer: The policy's Hugging Face tokenizer (chat template required).
        config: Rollout settings.
    """

    def __init__(
        self,
        env_name: str,
        env_config: dict[str, Any] | None,
        preset: str | None,
        engine: Engine,
        tokenizer: Any,
        config: RolloutConfig | None = None,
    ) -> None:
        self.config = config or RolloutConfig()
        self.env_name = env_name
        self.preset = preset
        self.env_config = dict(env_config or {})
        if self.config.max_turns is not None:
            self.env_config["max_turns"] = self.config.max_turns
        if self.config.max_actions_per_turn is not None:
            self.env_config["max_actions_per_turn"] = self.config.max_actions_per_turn
        self.engine = engine
        self.tokenizer = tokenizer
        self.chat = ChatTokens(tokenizer, prompts.generation_prefix(self.config.enable_think))
        self.seeds = SeedSchedule(self.config.seed_train, self.config.seed_val)
        self._pools: dict[tuple[int, int], EnvPool] = {}

    # ------------------------------------------------------------------ pools
    def pool(self, env_groups: int, group_size: int) -> EnvPool:
        """The (cached) pool of this shape; all pools share one seed schedule."""
        key = (env_groups, group_size)
        if key not in self._pools:
            self._pools[key] = EnvPool(
                self.env_name,
                self.env_config,
                preset=self.preset,
                env_groups=env_groups,
                group_size=group_size,
                format_penalty=self.config.format_penalty,
                seeds=self.seeds,
            )
        return self._pools[key]

    def state_dict(self) -> dict[str, int]:
        """Checkpointable state (the seed counter)."""
        return self.seeds.state_dict()

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.seeds.load_state_dict(state)

    def close(self) -> None:
        for p in self._pools.values():
            p.close()
        self._pools.clear()

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
        """Play one rollout and return one trajectory per env id (group-major order).

        Args:
            mode: ``"train"`` (fresh seeds every call) or ``"val"`` (fixed seeds).
            sampling: Sampling settings for every turn (default :class:`SamplingParams`).
            env_groups: Override of ``config.env_groups`` (e.g. a larger validation set).
            group_size: Override of ``config.group_size``.
            seed: Explicit base seed for this rollout (see :class:`SeedSchedule`).
        """
        sampling = sampling or SamplingParams()
        pool = self.pool(env_groups or self.config.env_groups, group_size or self.config.group_size)
        episodes = pool.reset(mode, seed)
        base = episodes[0].traj.seed if episodes else 0
        budget = self.config.max_model_len - sampling.max_new_tokens
        think = self.config.enable_think
        for ep in episodes:
            env = ep.env
            ep.traj.system_prompt = prompts.system_prompt(
                env.instruction(),
                action_names=env.action_names,
                max_actions_per_episode=env.config.max_actions_per_episode,
                action_sep=env.action_sep,
            )
            ep.extra.update(blocks=[], parsed=[], context=None)
        max_turns = episodes[0].env.config.max_turns if episodes else 0
        for turn_no in range(1, max_turns + 1):
            live: list[Episode] = []
            batch: list[list[int]] = []
            for ep in episodes:
                if ep.done:
                    continue
                ids = self._next_prompt(ep, turn_no, budget, think)
                if ids is None:
                    ep.finish("context_length", truncated=True)
                    continue
                live.append(ep)
                batch.append(ids)
            if not live:
                break
            gens = self.engine.generate(batch, sampling, seed=derive_seed("rollout", mode, base, turn_no))
            prefix = self.chat.generation_prefix
            texts = [prefix + self.tokenizer.decode(gen.token_ids, skip_special_tokens=True) for gen in gens]
            parses = [
                parse_reply(text, think=think, action_sep=ep.env.action_sep, max_actions=ep.env.config.max_actions_per_turn)
                for ep, text in zip(live, texts)
            ]
            shown_obs = [ep.observation for ep in live]
            outcomes = self._step_all(pool, live, parses)
            for ep, ids, gen, text, parsed, shown, outcome in zip(live, batch, gens, texts, parses, shown_obs, outcomes):
                ep.extra["parsed"].append(parsed)
                ep.traj.turns.append(
                    Turn(
                        prompt_ids=ids,
                        response_ids=list(gen.token_ids),
                        response_text=text,
                        reasoning=parsed.reasoning,
                        reasoning_ids=self.chat.encode(parsed.reasoning) if parsed.reasoning is not None else None,
                        answer=parsed.answer,
                        actions=outcome.actions,
                        reward=outcome.reward,
                        penalty=outcome.penalty,
                        valid=outcome.valid,
                        info=outcome.info,
                        observation=shown,
                        response_logprobs=list(gen.logprobs) if gen.logprobs is not None else None,
                        finish_reason=gen.finish_reason,
                    )
                )
        for ep in episodes:
            if not ep.done:
                ep.finish("max_turns", truncated=False)
            ep.traj.final_observation = ep.observation
            ep.extra.clear()
        return [ep.traj for ep in episodes]

    def _step_all(self, pool: EnvPool, live: list[Episode], parses: list[ParsedReply]) -> list[Any]:
        """Step every live episode once; in a thread pool when ``env_workers > 1``.

        Each episode owns its env, so concurrent steps touch disjoint state and the results do
        not depend on the number of workers.
        """
        workers = min(self.config.env_workers, len(live))
        if workers <= 1:
            return [pool.step(ep, parsed) for ep, parsed in zip(live, parses)]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ragen-env") as ex:
            return list(ex.map(pool.step, live, parses))

    # ---------------------------------------------------------------- prompts
    def _block(self, ep: Episode, turn_no: int, think: bool) -> str:
        """State block of the current turn, remembered for re-rendering in windowed modes."""
        block = prompts.turn_message(
            turn_no,
            ep.observation,
            actions_left=ep.actions_left,
            max_tokens=ep.env.config.max_tokens,
            think=think,
            warn_invalid=ep.warn_invalid,
        )
        ep.extra["blocks"].append(block)
        return block

    def _next_prompt(self, ep: Episode, turn_no: int, budget: int, think: bool) -> list[int] | None:
        """Prompt ids for this turn, or None when nothing fits in ``budget`` tokens."""
        block = self._block(ep, turn_no, think)
        turns = ep.traj.turns
        mode = self.config.context_window
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

    def _windowed_prompt(self, ep: Episode, turn_no: int, history: int, think: bool) -> list[int]:
        """Prompt for ``last-k``/``single-turn`` mode showing ``history`` earlier turns."""
        turns = ep.traj.turns
        first = len(turns) - history
        system = {"role": "system", "content": ep.traj.system_prompt}
        if self.config.context_window == "single-turn":
            parsed: list[ParsedReply] = ep.extra["parsed"]
            past = [
                prompts.PastTurn(number=j + 1, observation=turns[j].observation, reply=parsed[j].reconstructed, reward=turns[j].reward)
                for j in range(first, len(turns))
            ]
            user = prompts.memory_message(
                turn_no,
                ep.observation,
                past,
                actions_left=ep.actions_left,
                max_tokens=ep.env.config.max_tokens,
                think=think,
                warn_invalid=ep.warn_invalid,
            )
            return self.chat.prompt([system, {"role": "user", "content": user}])
        blocks: list[str] = ep.extra["blocks"]
        messages = [system]
        for j in range(first, len(turns)):
            head = prompts.reward_prefix(turns[j - 1].reward) if j > first else ""
            messages.append({"role": "user", "content": head + _strip_warning(blocks[j])})
            messages.append({"role": "assistant", "content": turns[j].response_text})
        head = prompts.reward_prefix(turns[-1].reward) if history else ""
        messages.append({"role": "user", "content": head + blocks[-1]})
        return self.chat.prompt(messages)


def _strip_warning(block: str) -> str:
    """History blocks are shown without the invalid-action warning (it concerned that moment)."""
    return block.replace(prompts.INVALID_WARNING + "\n", "")
