"""How much shorter a compact BPE vocabulary makes the tiny model's prompts, per env (issue 14).

Run: ``python bench/bench_tokenizer_lengths.py [--vocab 512 1024 2048] [--episodes 40]``.

The tiny model reads bytes (one token per byte, ``ragen_core.models.tiny``). This script measures
the option of a byte-level BPE trained in code on env text: for every installed env it renders
the text a model reads in training (system prompt, then each turn's state block, then a reply in
the format) for episodes driven by random legal actions, trains BPE vocabularies of the given
sizes on episodes of one set of seeds, and counts tokens on episodes of other seeds. Token counts
are exact (no timing), so the figures do not depend on the machine's load. Compute of the tiny
model grows with the token count (linear layers) and faster (attention), and the embedding grows
by ``vocab x hidden`` parameters, both printed.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Iterator

from ragen_core import registry
from ragen_core.models.tiny import TINY_ARCH, build_byte_tokenizer
from ragen_core.rollout.prompts import system_prompt, turn_message
from ragen_core.seeding import make_rng


def episode_text(name: str, seed: int, turns: int = 3) -> str:
    """What the model reads in one episode of ``name``: prompt, states and format replies."""
    env = registry.make_env(name)
    try:
        obs = env.reset(seed=seed)
        text = system_prompt(env.instruction(), action_names=env.action_names, max_actions_per_episode=10)
        rng = make_rng(seed, "bench-tokenizer")
        for turn in range(1, turns + 1):
            text += turn_message(turn, obs, actions_left=10 - turn, max_tokens=100)
            names = env.action_names
            action = names[int(rng.integers(len(names)))] if names else env.random_action(rng)
            if action is None:
                oracle = env.oracle_actions()
                action = oracle[0] if oracle else "1"
            text += f"<think> I pick {action}. </think> <answer> {action} </answer>"
            obs, _, done, _ = env.step(str(action))
            if done:
                break
        return text
    finally:
        env.close()


def corpus(names: list[str], seeds: range) -> Iterator[str]:
    for name in names:
        for seed in seeds:
            yield episode_text(name, seed)


def train_bpe(texts: list[str], vocab_size: int) -> object:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    parser.add_argument("--episodes", type=int, default=40, help="training and measuring episodes per env")
    args = parser.parse_args()

    names = []
    for name in registry.names("env"):
        try:
            episode_text(name, 0)
            names.append(name)
        except Exception as exc:  # noqa: BLE001 - an env that needs a server or toolchain is left out, said
            print(f"# {name}: left out ({type(exc).__name__}: {str(exc)[:80]})")
    train = list(corpus(names, range(args.episodes)))
    held = {name: [episode_text(name, 10_000 + s) for s in range(args.episodes)] for name in names}
    byte_tok = build_byte_tokenizer()
    byte_len = {n: statistics.mean(len(byte_tok(t)["input_ids"]) for t in texts) for n, texts in held.items()}
    bpes = {v: train_bpe(train, v) for v in args.vocab}

    hidden = TINY_ARCH["hidden_size"]
    print(f"tokens per episode text (prompt + 3 turns), mean of {args.episodes} held-out seeds; BPE trained on other seeds")
    print(f"{'env':<12}{'bytes':>8}" + "".join(f"{f'bpe{v}':>10}{'ratio':>7}" for v in args.vocab))
    ratios: dict[int, list[float]] = {v: [] for v in args.vocab}
    for name in names:
        row = f"{name:<12}{byte_len[name]:>8.0f}"
        for v, tok in bpes.items():
            n = statistics.mean(len(tok.encode(t).ids) for t in held[name])  # type: ignore[attr-defined]
            ratios[v].append(byte_len[name] / n)
            row += f"{n:>10.0f}{byte_len[name] / n:>6.1f}x"
        print(row)
    print(f"{'geo. mean':<20}" + "".join(f"{'':>10}{statistics.geometric_mean(r):>6.1f}x" for r in ratios.values()))
    print("embedding parameters (tied): " + ", ".join(f"vocab {v}: {v * hidden / 1e6:.2f} M" for v in args.vocab)
          + f" (byte vocab: {len(byte_tok) * hidden / 1e6:.2f} M; the rest of the tiny model ~1.75 M)")


if __name__ == "__main__":
    main()
