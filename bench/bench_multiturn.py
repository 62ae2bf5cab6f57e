"""Multi-turn rollout throughput: 5 turns vs 1 turn at the same generated-token budget.

Runs the real rollout path (prompt building, one batched ``HFEngine.generate`` per turn,
parsing, env steps) on the built-in tiny model and the in-process corridor env, side by side
in one process, and prints generated tokens per second for both and their ratio. Multi-turn
rollouts pay for re-prefilling the growing context every turn; the goal is a ratio >= 0.8.

The random tiny model never emits a valid reply, and EOS is masked out, so every episode lives
for all its turns and every reply uses its full token budget: both settings generate the same
number of tokens. The multi-turn run must also read each turn's new user message (with the
byte-level tiny tokenizer ~370 prompt tokens per turn, ~9x the 40 generated ones), so the
"(generated+prefilled)/s" column is printed too: it shows how much of the gap is that extra
input rather than engine overhead. HFEngine keeps each episode's KV cache between turns
(``reuse_kv_cache``) so history is never prefilled twice; the third row turns that off.

Usage: ``python bench/bench_multiturn.py [--groups 4] [--group-size 4] [--tokens 40] [--turns 5] [--threads 1]``
"""

from __future__ import annotations

import argparse
import tempfile
import time


def rollout_rate(runner, sampling, repeats: int) -> tuple[float, float, int, int]:
    """Best-of-``repeats`` (generated tokens/s, processed tokens/s, generated, prefilled)."""
    best, best_all, tokens, prefilled = 0.0, 0.0, 0, 0
    for _ in range(repeats):
        before = runner.engine.stats["prefill_tokens"]
        t0 = time.perf_counter()
        trajs = runner.run(sampling=sampling)
        dt = time.perf_counter() - t0
        tokens = sum(t.num_generated_tokens for t in trajs)
        prefilled = runner.engine.stats["prefill_tokens"] - before
        best, best_all = max(best, tokens / dt), max(best_all, (tokens + prefilled) / dt)
    return best, best_all, tokens, prefilled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=40, help="new tokens per turn in the multi-turn run")
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is steadiest on a shared machine)")
    args = parser.parse_args()

    import torch

    from ragen_core.engines.hf import HFEngine
    from ragen_core.interfaces.engine import SamplingParams
    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.rollout.runner import RolloutConfig, RolloutRunner
    from ragen_core.testing.toy_env import register_toy_env

    if args.threads:
        torch.set_num_threads(args.threads)
    env = register_toy_env()
    with tempfile.TemporaryDirectory() as cache:
        model, tok = load_model_and_tokenizer("tiny", device=args.device, cache_dir=cache)
    engine = HFEngine(model=model, tokenizer=tok)
    # Make EOS impossible so every reply has exactly its budget (equal work in both settings).
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    bias = torch.zeros(model.config.vocab_size)
    bias[eos] = -1e4
    model.lm_head.register_forward_hook(lambda mod, inp, out: out + bias.to(out.device, out.dtype))

    rates = {}
    settings = [("single", 1, args.tokens * args.turns, True), ("multi", args.turns, args.tokens, True), ("multi-noreuse", args.turns, args.tokens, False)]
    for label, turns, per_turn, reuse in settings:
        engine.config.reuse_kv_cache = reuse
        config = RolloutConfig(env_groups=args.groups, group_size=args.group_size, max_turns=turns, max_model_len=4096)
        runner = RolloutRunner(env, {"max_actions_per_episode": 50}, None, engine, tok, config)
        rate, rate_all, tokens, prefilled = rollout_rate(runner, SamplingParams(max_new_tokens=per_turn), args.repeats)
        rates[label] = rate
        print(
            f"{label:<14s} turns={turns:<2d} new_tokens/turn={per_turn:<4d} kv_reuse={reuse!s:<5s} generated={tokens:<6d} "
            f"prefilled={prefilled:<7d} generated tokens/s={rate:8.1f}  (generated+prefilled)/s={rate_all:8.1f}"
        )
    print(f"ratio multi-turn/single-turn, KV reuse across turns = {rates['multi'] / rates['single']:.2f}x (goal >= 0.8x)")
    print(f"ratio multi-turn/single-turn, re-prefill each turn  = {rates['multi-noreuse'] / rates['single']:.2f}x")


if __name__ == "__main__":
    main()
