"""Token-level conversation building on top of any tokenizer's chat template.

The first prompt of an episode is rendered with the tokenizer's chat template and tokenised
once. Every later prompt (``full`` context mode) is the previous prompt, plus exactly the ids
the model sampled, plus the tokens of the *template text that follows an assistant message*:
the end-of-turn marker (only if the model did not sample it), the next user message, the
assistant header and the generation prefix. History is never decoded and re-tokenised, so the
context the model sees and the sequence the trainer trains on are the sampled ids (spec 17 L1;
``compat.retokenized_text`` brings the reference's re-rendered text back).

The template text around an assistant message is discovered by rendering a conversation with a
sentinel assistant message and cutting at the sentinel, so any chat template that places
message content verbatim (ChatML/Qwen, Llama 3, ...) works without per-model code.
"""

from __future__ import annotations

from typing import Any

_SENTINEL = "\x00RAGEN_ASSISTANT_CONTENT\x00"


class ChatTokens:
    """Builds prompt token ids for one tokenizer and one generation prefix.

    Args:
        tokenizer: A Hugging Face tokenizer with a chat template.
        generation_prefix: Text appended after the assistant header (``"<think>"``).
    """

    def __init__(self, tokenizer: Any, generation_prefix: str = "") -> None:
        self.tokenizer = tokenizer
        self.generation_prefix = generation_prefix
        im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        if isinstance(im_end, int) and im_end != tokenizer.unk_token_id and im_end is not None:
            self.end_of_turn_id: int = im_end
        else:
            self.end_of_turn_id = int(tokenizer.eos_token_id)
        self.end_of_turn_text: str = tokenizer.decode([self.end_of_turn_id])
        tail = self._after_sentinel([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}], None, add_generation_prompt=False)
        if not tail.startswith(self.end_of_turn_text):
            # The template closes assistant turns with something other than the eos token; we
            # then always append the template's own closing text after the sampled reply.
            self.end_of_turn_text = ""

    # ------------------------------------------------------------------ text
    def render(self, messages: list[dict[str, str]], *, add_generation_prompt: bool = True) -> str:
        """Template text of ``messages`` (plus assistant header and prefix when generating)."""
        text: str = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
        return text + self.generation_prefix if add_generation_prompt else text

    def _after_sentinel(self, head: list[dict[str, str]], next_user: str | None, *, add_generation_prompt: bool) -> str:
        messages = head + [{"role": "assistant", "content": _SENTINEL}]
        if next_user is not None:
            messages.append({"role": "user", "content": next_user})
        text: str = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
        return text[text.index(_SENTINEL) + len(_SENTINEL) :]

    # ------------------------------------------------------------------ ids
    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def first_prompt(self, system: str, user: str) -> list[int]:
        """Ids of ``[system, user]`` + assistant header + generation prefix."""
        return self.encode(self.render([{"role": "system", "content": system}, {"role": "user", "content": user}]))

    def prompt(self, messages: list[dict[str, str]]) -> list[int]:
        """Ids of an arbitrary message list + assistant header + generation prefix."""
        return self.encode(self.render(messages))

    def truncate_history(self, messages: list[dict[str, str]], limit: int, *, add_generation_prompt: bool) -> tuple[list[dict[str, str]], list[int]]:
        """``(kept, ids)``: ``messages`` with their oldest turns dropped until their rendering
        fits in ``limit`` tokens, and the ids of that rendering: the reference's history
        truncation (spec 5.6; ``compat.retokenized_text``).

        While the rendering (with the assistant header and generation prefix when
        ``add_generation_prompt``) is longer than ``limit`` and more than two non-system messages
        remain, the oldest non-system messages go: a (user, assistant, user starting with
        ``Reward``) triple, else a (user, assistant) pair, else one message. The system message is
        always kept. ``ids`` may still be longer than ``limit``; the caller decides what then.
        """
        out = list(messages)
        first = 1 if out and out[0]["role"] == "system" else 0
        ids = self.encode(self.render(out, add_generation_prompt=add_generation_prompt))
        while len(ids) > limit and len(out) - first > 2:
            roles = [m["role"] for m in out[first : first + 3]]
            if roles == ["user", "assistant", "user"] and out[first + 2]["content"].startswith("Reward"):
                del out[first : first + 3]
            elif roles[:2] == ["user", "assistant"]:
                del out[first : first + 2]
            else:
                del out[first]
            ids = self.encode(self.render(out, add_generation_prompt=add_generation_prompt))
        return out, ids

    def continuation(self, response_ids: list[int], next_user: str, *, system: str = "s") -> list[int]:
        """Ids to append after a sampled reply so the context asks for the next reply.

        Includes the end-of-turn token when the reply does not already end with it (it was cut
        at the length limit or stopped on another stop id), then the next user message in
        template form, the assistant header and the generation prefix.
        """
        head = [{"role": "system", "content": system}, {"role": "user", "content": "u"}]
        tail = self._after_sentinel(head, next_user, add_generation_prompt=True) + self.generation_prefix
        if self.end_of_turn_text and response_ids and response_ids[-1] == self.end_of_turn_id:
            tail = tail[len(self.end_of_turn_text) :]
        return self.encode(tail)


#: Turn-start tokens of the chat templates the reference's shifted mask knows (spec 5.7): ChatML
#: (Qwen) and Llama 3.
TURN_START_TOKENS = ("<|im_start|>", "<|start_header_id|>")


def turn_start_id(tokenizer: Any) -> int:
    """Id of the token that opens every message of ``tokenizer``'s chat template: the first of
    :data:`TURN_START_TOKENS` that is one token of the vocabulary and occurs once per message when
    a system, a user and an assistant message are rendered (what ``compat.shifted_mask`` counts).

    Raises:
        ConfigError: no such token (one line naming the setting to turn off).
    """
    from ragen_core.errors import ConfigError

    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False)
        ids = list(tokenizer.encode(text, add_special_tokens=False))
    except Exception:  # noqa: BLE001 - any template failure means: no identifiable turn start
        ids = []
    for token in TURN_START_TOKENS:
        tid = tokenizer.convert_tokens_to_ids(token)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id and ids.count(tid) == len(messages):
            return tid
    raise ConfigError(f"compat.shifted_mask needs a chat template that opens every message with one of {', '.join(TURN_START_TOKENS)}; "
                      "this tokenizer's does not: set compat.shifted_mask=false")
