"""An engine that replays canned replies: drive the rollout layer without a model.

Like pydantic-ai's ``TestModel`` or ``llm-echo``: tests, env debugging and oracle runs can push
exact replies through the real prompt/parse/step/layout path. A reply is either text (encoded
with the tokenizer, then the end-of-turn id is appended as if the model had sampled it) or a
list of token ids returned verbatim (to exercise token-level corner cases such as tags spelled
byte by byte).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ragen_core.interfaces.engine import Engine, Generation, SamplingParams, checked_budgets, per_prompt_seeds

Reply = str | Sequence[int]
#: ``script(call_index, row_index, prompt_ids) -> reply``
ScriptFn = Callable[[int, int, list[int]], Reply]


class ScriptedEngine(Engine):
    """Returns scripted replies; records every call's prompts in :attr:`calls` and seeds in :attr:`seeds`.

    Args:
        script: A list of replies (used per call in order, the same reply for every row, the last
            one repeating) or a function ``(call_index, row_index, prompt_ids) -> reply``.
        tokenizer: Encodes text replies; its ``<|im_end|>`` (or eos) id ends them. May be None
            when :meth:`attach` will give one (an engine built by the registry).
        add_eos: Append the end-of-turn id to text replies (finish ``"stop"``); when False the
            reply counts as cut at the length limit.
    """

    def __init__(self, script: Sequence[Reply] | ScriptFn, tokenizer: Any, *, add_eos: bool = True) -> None:
        super().__init__(None)
        self.script = script
        self.add_eos = add_eos
        self._use_tokenizer(tokenizer)
        self.calls: list[list[list[int]]] = []
        self.seeds: list[list[int] | None] = []
        """Per call: the per-prompt seeds it was given (None when unseeded)."""

    def _reply(self, call: int, row: int, prompt: list[int]) -> Reply:
        if callable(self.script):
            return self.script(call, row, prompt)
        return self.script[min(call, len(self.script) - 1)]

    def _use_tokenizer(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.eos_id = None
        if tokenizer is not None:
            im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
            self.eos_id = im_end if isinstance(im_end, int) and im_end != tokenizer.unk_token_id else tokenizer.eos_token_id

    def attach(self, model: Any, tokenizer: Any) -> None:
        """Nothing to bind (there is no model); a given tokenizer replaces the one from construction."""
        if tokenizer is not None:
            self._use_tokenizer(tokenizer)
        self.policy_version = 0

    def sync_weights(self, weights: Mapping[str, Any], version: int) -> None:
        """Record ``version`` (later replies report it); the weights are not used."""
        self.policy_version = int(version)

    def generate(self, prompts: list[list[int]], params: SamplingParams, seeds: int | Sequence[int] | None = None) -> list[Generation]:
        """The scripted replies (``seeds`` are only recorded: replies do not depend on them)."""
        return self._replies(prompts, seeds, [params.max_new_tokens] * len(prompts))

    def generate_capped(
        self, prompts: list[list[int]], params: SamplingParams, seeds: int | Sequence[int] | None, max_new_tokens: Sequence[int],
    ) -> list[Generation]:
        """The scripted replies, each cut at its own budget; one recorded call, as :meth:`generate`."""
        return self._replies(prompts, seeds, checked_budgets(max_new_tokens, params, len(prompts)))

    def _replies(self, prompts: list[list[int]], seeds: int | Sequence[int] | None, caps: list[int]) -> list[Generation]:
        call = len(self.calls)
        self.calls.append([list(p) for p in prompts])
        self.seeds.append(per_prompt_seeds(seeds, len(prompts)))
        out = []
        for row, prompt in enumerate(prompts):
            reply = self._reply(call, row, list(prompt))
            if isinstance(reply, str):
                ids = list(self.tokenizer.encode(reply, add_special_tokens=False))
                if self.add_eos:
                    ids.append(self.eos_id)
            else:
                ids = [int(i) for i in reply]
            reason = "stop" if ids and ids[-1] == self.eos_id else "length"
            if len(ids) > caps[row]:
                ids, reason = ids[: caps[row]], "length"
            gen = Generation(token_ids=ids, logprobs=[0.0] * len(ids), finish_reason=reason, policy_version=self.policy_version)  # type: ignore[arg-type]
            out.append(gen)
        return out
