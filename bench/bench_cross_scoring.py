"""Benchmark: shared-prefix vs naive cross-scoring for the collapse diagnostics (spec 17 L21).

Builds a tiny randomly initialised Qwen2 (fixed seed, hidden 128, 4 layers), N = 8 prompts of
300-600 tokens and 8 reasoning samples of 30-60 tokens per prompt (R = 64 rows), and scores the
full R x N matrix both ways in the same process. Prints both wall times side by side, their
ratio, and the largest absolute difference of the matrix and of every collapse metric.

Goal: shared-prefix costs at most a third of naive at equal results.

Usage: ``python bench/bench_cross_scoring.py [--repeats 2] [--micro-batch 16] [--device cpu] [--threads 1]``
"""

from __future__ import annotations

import argparse
import time


def main() -> int:
    import numpy as np
    import torch
    from ragen_diagnostics.estimators import collapse_metrics
    from ragen_diagnostics.scoring import naive_cross_score, shared_prefix_cross_score
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from ragen_core.seeding import make_rng

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default 1: on shared, oversubscribed cores OpenMP spin-waits "
                             "inflate small kernels by 10-30x and make timings meaningless)")
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    torch.manual_seed(1234)
    vocab = 2048
    cfg = Qwen2Config(
        vocab_size=vocab, hidden_size=128, intermediate_size=512, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
    )
    model = Qwen2ForCausalLM(cfg).to(args.device).eval()

    rng = make_rng("bench-cross-scoring")
    prompts = [rng.integers(1, vocab, size=int(rng.integers(300, 601))).tolist() for _ in range(args.prompts)]
    reasonings, true_cols = [], []
    for j in range(args.prompts):
        for _ in range(args.samples):
            reasonings.append(rng.integers(1, vocab, size=int(rng.integers(30, 61))).tolist())
            true_cols.append(j)

    # Warm up both paths, then alternate them so that both see the same machine load
    # (shared CI machines fluctuate); report the best time of each.
    for fn in (naive_cross_score, shared_prefix_cross_score):
        fn(model, prompts[:1], reasonings[: args.micro_batch], micro_batch_size=args.micro_batch)
    times = {"naive": float("inf"), "shared": float("inf")}
    results = {}
    for _ in range(args.repeats):
        for key, fn in (("naive", naive_cross_score), ("shared", shared_prefix_cross_score)):
            start = time.perf_counter()
            results[key] = fn(model, prompts, reasonings, micro_batch_size=args.micro_batch)
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            times[key] = min(times[key], time.perf_counter() - start)
    t_naive, (l_naive, lens) = times["naive"], results["naive"]
    t_shared, (l_shared, _) = times["shared"], results["shared"]
    m_naive = collapse_metrics(l_naive, lens, true_cols).metrics
    m_shared = collapse_metrics(l_shared, lens, true_cols).metrics
    metric_diff = max(abs(m_naive[k] - m_shared[k]) for k in m_naive)
    worst = max(m_naive, key=lambda k: abs(m_naive[k] - m_shared[k]))

    p_tokens = sum(len(p) for p in prompts)
    z_tokens = sum(len(z) for z in reasonings)
    print(f"model: Qwen2 random init, hidden 128, 4 layers, vocab {vocab}; device {args.device}; torch threads {torch.get_num_threads()}")
    print(f"data: N={args.prompts} prompts ({p_tokens} tokens), R={len(reasonings)} reasonings ({z_tokens} tokens), micro-batch {args.micro_batch}")
    naive_tokens = len(reasonings) * p_tokens + args.prompts * z_tokens
    print(f"tokens run through the model: naive {naive_tokens}  shared-prefix {p_tokens + args.prompts * z_tokens}")
    print(f"{'method':<16}{'wall s (best of ' + str(args.repeats) + ', interleaved)':>36}")
    print(f"{'naive':<16}{t_naive:>36.3f}")
    print(f"{'shared-prefix':<16}{t_shared:>36.3f}")
    print(f"ratio shared/naive: {t_shared / t_naive:.3f}  (speed-up x{t_naive / t_shared:.1f}; goal <= 0.333)")
    print(f"max |L_sum diff|: {float(np.max(np.abs(l_naive - l_shared))):.2e}")
    print(f"max |metric diff|: {metric_diff:.2e} (worst: {worst})")
    print(f"mi_estimate naive {m_naive['mi_estimate']:.6f} shared {m_shared['mi_estimate']:.6f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
