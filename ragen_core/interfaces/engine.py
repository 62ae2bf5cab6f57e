"""Rollout engine interface: batched generation over token ids, with versioned weight sync.

The runner hands the engine prompt *token ids* (never text) and receives the sampled ids and
their log-probs, so the update trains on exactly what was sampled. Everything that crosses this
seam is data, so an engine may live in this process (the HF engine), in a vLLM process, or on
another machine:

* :meth:`Engine.attach` binds the engine to the policy once (an in-process engine shares the
  module; a remote one only reads the architecture and the first weights);
* :meth:`Engine.sync_weights` takes a state dict and a **policy version** after every update
  (no live model object needed); every :class:`Generation` says which version sampled it;
* ``generate(prompts, params, seeds)`` takes one seed per prompt (per episode and turn), so a
  reply depends on its own episode's seed, never on its position in the batch or on which other
  episodes are still running.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from pydantic import Field

from ragen_core.specs import PluginConfig, with_overrides


class SamplingParams(PluginConfig):
    """How to sample one reply (the one sampling config: run configs use it too, spec 6.2)."""

    temperature: float = Field(default=1.0, ge=0)
    """Softmax temperature; 0 or ``do_sample: false`` means greedy."""
    top_p: float = Field(default=1.0, gt=0, le=1)
    top_k: int = -1
    """-1 disables top-k."""
    max_new_tokens: int = Field(default=48, ge=1)
    """Generation budget per turn (the reference's ``response_length``, 400 on GPU)."""
    do_sample: bool = True
    """False = greedy."""


@dataclass
class Generation:
    token_ids: list[int]
    """Exactly the sampled ids (including the EOS token if one was sampled)."""
    logprobs: list[float] | None
    """Log-prob of each sampled id under the sampling distribution, when the engine reports them."""
    finish_reason: Literal["stop", "length"]
    policy_version: int = 0
    """The policy version (see :meth:`Engine.sync_weights`) whose weights sampled this reply."""


def per_prompt_seeds(seeds: int | Sequence[int] | None, n: int) -> list[int] | None:
    """One seed per prompt: a sequence is taken as is (its length must be ``n``); an int is a base
    expanded as ``derive_seed(base, i)`` (convenience for tests and one-off calls); None = unseeded.

    Raises:
        ValueError: a sequence of the wrong length; a :class:`~ragen_core.errors.UsageError` (a ValueError)
            for ``seeds`` that is no int, sequence of ints or None, or an element that is no int or
            outside 0 to 2**64 - 1.
    """
    from ragen_core.errors import UsageError
    from ragen_core.seeding import check_key, derive_seed, is_int

    if seeds is None:
        return None
    if is_int(seeds):  # numpy's integers too: np.int64(3) was iterated and raised a bare TypeError
        return [derive_seed(int(seeds), i) for i in range(n)]  # type: ignore[arg-type]
    try:
        items = list(cast("Sequence[int]", seeds))
    except TypeError:
        raise UsageError(f"generate's seeds take an int, a sequence of ints (one per prompt) or None, not "
                         f"{type(seeds).__name__} {seeds!r}") from None
    for i, s in enumerate(items):  # 1.7 was read as seed 1 (int()), True as 1
        if not is_int(s):
            raise UsageError(f"generate's seeds[{i}] takes an int, not {type(s).__name__} {s!r}")
    out = [check_key(int(s), f"generate's seeds[{i}]") for i, s in enumerate(items)]
    if len(out) != n:
        raise ValueError(f"generate got {len(out)} seeds for {n} prompts (one seed per prompt)")
    return out


def checked_budgets(max_new_tokens: Sequence[int], params: SamplingParams, n: int) -> list[int]:
    """Per-prompt reply budgets as ints, each in ``1..params.max_new_tokens``.

    Raises:
        ValueError: not one budget per prompt, or a budget outside that range.
    """
    caps = [int(c) for c in max_new_tokens]
    if len(caps) != n:
        raise ValueError(f"generate_capped got {len(caps)} budgets for {n} prompts (one max_new_tokens per prompt)")
    bad = next((c for c in caps if not 1 <= c <= params.max_new_tokens), None)
    if bad is not None:
        raise ValueError(f"generate_capped got a budget of {bad} tokens: each must be 1..params.max_new_tokens={params.max_new_tokens}")
    return caps


def generate_by_budget(
    engine: Any, prompts: list[list[int]], params: SamplingParams, seeds: int | Sequence[int] | None, max_new_tokens: Sequence[int],
) -> list[Generation]:
    """:meth:`Engine.generate_capped` for any engine: one ``generate`` call per distinct budget
    (prompts of one budget keep their order and their own seeds), replies put back in prompt order."""
    caps = checked_budgets(max_new_tokens, params, len(prompts))
    row_seeds = per_prompt_seeds(seeds, len(prompts))
    out: list[Generation] = [None] * len(prompts)  # type: ignore[list-item]  # every slot is filled below
    for cap in dict.fromkeys(caps):
        rows = [i for i, c in enumerate(caps) if c == cap]
        sub = params if cap == params.max_new_tokens else params.model_copy(update={"max_new_tokens": cap})
        gens = engine.generate([prompts[i] for i in rows], sub, None if row_seeds is None else [row_seeds[i] for i in rows])
        if not isinstance(gens, list) or len(gens) != len(rows):
            return gens  # type: ignore[no-any-return]  # passed on as is: the caller's check names the engine
        for i, gen in zip(rows, gens):
            out[i] = gen
    return out


class Engine(ABC):
    """Base class of engine plugins (see the module docstring for the contract)."""

    config_class: type[PluginConfig] = PluginConfig

    def __init__(self, config: PluginConfig | None = None, **overrides: Any) -> None:
        self.config = with_overrides(self.config_class, config, overrides)
        self.policy_version = 0
        """Version of the weights the engine samples from (set by :meth:`sync_weights`)."""

    def attach(self, model: Any, tokenizer: Any) -> None:
        """Bind to the policy before the first rollout.

        The default takes the tokenizer and the model's current weights as version 0 through
        :meth:`sync_weights`; in-process engines override it to share the module instead.
        """
        self.tokenizer = tokenizer
        self.sync_weights(model.state_dict(), version=0)

    @abstractmethod
    def generate(self, prompts: list[list[int]], params: SamplingParams, seeds: int | Sequence[int] | None = None) -> list[Generation]:
        """Generate one continuation per prompt, in one batched call.

        ``seeds``: one per prompt (see :func:`per_prompt_seeds`); the same prompt, params,
        weights and seed give the same reply whatever else is in the batch.
        """

    def generate_capped(
        self, prompts: list[list[int]], params: SamplingParams, seeds: int | Sequence[int] | None, max_new_tokens: Sequence[int],
    ) -> list[Generation]:
        """:meth:`generate` with a reply budget per prompt (``max_new_tokens[i]``, each at most
        ``params.max_new_tokens``): reply ``i`` is the reply :meth:`generate` gives with
        ``params.max_new_tokens = max_new_tokens[i]`` (the runner's per-env caps, ``rollout.enforce_env_max_tokens``).

        The default makes one :meth:`generate` call per distinct budget, which the seed contract
        makes exact; engines that can stop each row at its own budget in one batch override it.
        """
        return generate_by_budget(self, prompts, params, seeds, max_new_tokens)

    def sync_weights(self, weights: Mapping[str, Any], version: int) -> None:
        """Sample from ``weights`` (a state dict of the attached architecture) from now on.

        ``version`` is the policy version the trainer assigns (the number of optimiser updates
        so far); later generations report it. Engines that share the policy module in-process
        may skip the copy when ``weights`` are that module's own tensors.
        """
        self.policy_version = int(version)

    def rollout_done(self) -> None:  # noqa: B027 - optional hook: by default nothing is kept between calls
        """The runner's rollout has ended: no later prompt extends its replies, so caches kept
        for the next turn can go (before the update needs the memory)."""

    def close(self) -> None:  # noqa: B027 - optional hook: by default there is nothing to release
        """Release resources. Idempotent."""
