"""Where the HF engine's decode time goes: the engine's generate against a bare transformers loop.

    python bench/bench_hf_decode.py                      # CUDA, Qwen2.5-0.5B-shaped model built in code (bench/gpu_check.py)
    python bench/bench_hf_decode.py --device cpu --preset tiny --dtype float32   # the same on a CPU (how it is tried out)

All three run in one process on the same model, batch and number of new tokens, one after the
other, each after one warm-up call:

* ``engine``: ``HFEngine.generate`` (sampling, stop ids, KV-cache bookkeeping, log-probs), with its
  own split of the time into model forwards (synchronised) and the rest;
* ``bare``: prefill + a greedy loop of ``model(tok, cache=...)`` without attention mask;
* ``bare+mask``: the same loop passing the growing 2-D attention mask, as the engine must with
  left-padded prompts.

It prints milliseconds per decode step for each (the median of three interleaved rounds), the
engine's ratio to ``bare+mask``, and, from one more call under cProfile, the functions where the
engine's own Python time goes (top 12 by self time). No figure is asserted: the point is the
side-by-side ratio on the machine at hand. Results of a run on an H200: ``bench/results/gpu_session_h200.md``.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import io
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


def _gpu_check():
    spec = importlib.util.spec_from_file_location("ragen_gpu_check", REPO / "bench" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bare_loop(model, prompts: torch.Tensor, new_tokens: int, with_mask: bool) -> float:
    """Seconds per decode step of a greedy prefill + loop over ``prompts`` (no padding)."""
    from transformers import DynamicCache

    from ragen_core.engines.hf import _cache_kwarg

    kw = _cache_kwarg(model)  # 'cache' or 'past_key_values', whichever this transformers takes
    device = prompts.device
    with torch.no_grad():
        cache = DynamicCache(config=model.config)
        mask = torch.ones_like(prompts) if with_mask else None
        out = model(input_ids=prompts, attention_mask=mask, use_cache=True, logits_to_keep=1, **{kw: cache})
        tok = out.logits[:, -1, :].argmax(-1)
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(new_tokens):
            if mask is not None:
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            out = model(input_ids=tok[:, None], attention_mask=mask, use_cache=True, **{kw: cache})
            tok = out.logits[:, -1, :].argmax(-1)
            tok.tolist()  # the engine reads every step's tokens on the host (stop ids): so does this loop
        _sync(device)
    return (time.perf_counter() - t0) / new_tokens


def _engine_ms(engine, prompts, params, device) -> float:
    _sync(device)
    t0 = time.perf_counter()
    replies = engine.generate(prompts, params, seeds=list(range(len(prompts))))
    _sync(device)
    return 1e3 * (time.perf_counter() - t0) / max(len(r.token_ids) for r in replies)


def run_variants(engine, model, prompts, batch, params, new_tokens: int, device: torch.device) -> None:
    """ms/step of the engine and the bare loops with one change each, every one measured in this process."""
    from contextlib import nullcontext

    from torch.nn.attention import SDPBackend, sdpa_kernel

    import ragen_core.engines._kv as kv

    kernels = {"any kernel": None, "flash only": SDPBackend.FLASH_ATTENTION, "efficient only": SDPBackend.EFFICIENT_ATTENTION,
               "math only": SDPBackend.MATH}
    print("\nvariants (ms per decode step; 'error' = that kernel refused these inputs):")
    for label, backend in kernels.items():
        row = []
        for name, fn in (
            ("engine", lambda: _engine_ms(engine, prompts, params, device)),
            ("bare+mask", lambda: 1e3 * bare_loop(model, batch, new_tokens, with_mask=True)),
            ("bare", lambda: 1e3 * bare_loop(model, batch, new_tokens, with_mask=False)),
        ):
            try:
                with nullcontext() if backend is None else sdpa_kernel([backend]):
                    row.append(f"{name} {fn():7.2f}")
            except RuntimeError as exc:  # a refused kernel: report and go on
                row.append(f"{name} error ({type(exc).__name__}: {str(exc).splitlines()[0][:80]})")
        print(f"  {label:15s} " + " | ".join(row))
    original = kv.use_growable_layers
    kv.use_growable_layers = lambda cache, reserve: None  # plain DynamicLayer: torch.cat per step
    try:
        print(f"  engine without growable KV layers: {_engine_ms(engine, prompts, params, device):7.2f}")
    finally:
        kv.use_growable_layers = original


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--preset", default="qwen2.5-0.5b")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--variants", action="store_true",
                    help="also time the engine without its growable KV layers and each loop under one SDPA kernel at a time "
                         "(CUDA: which attention kernel the decode steps get)")
    args = ap.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("bench_hf_decode: no CUDA device is visible to torch (use --device cpu)", file=sys.stderr)
        return 2

    from ragen_core.engines.config import HFEngineConfig
    from ragen_core.engines.hf import HFEngine
    from ragen_core.interfaces.engine import SamplingParams
    from ragen_core.models import load_model_and_tokenizer

    gc = _gpu_check()
    folder, n_params = gc.build_model(args.preset, Path(tempfile.mkdtemp(prefix="ragen-hf-decode-")) / "model", args.dtype)
    model, tok = load_model_and_tokenizer(str(folder))
    device = torch.device(args.device)
    model.to(device).eval()
    # distinct prompts (no shared prefill), no id the engine stops on: every reply runs its full length
    gen = torch.Generator().manual_seed(0)
    stop = set(tok.all_special_ids)
    ids = [i for i in range(len(tok)) if i not in stop]
    prompts = [[ids[j] for j in torch.randint(len(ids), (args.prompt_len,), generator=gen).tolist()] for _ in range(args.batch)]
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"{where} | torch {torch.__version__} | {args.preset} {n_params / 1e6:.0f}M {args.dtype} | batch {args.batch} x "
          f"prompt {args.prompt_len} + {args.new_tokens} new tokens")

    engine = HFEngine(HFEngineConfig(reuse_kv_cache=False), model=model, tokenizer=tok)
    params = SamplingParams(do_sample=True, temperature=1.0, max_new_tokens=args.new_tokens)
    engine.generate(prompts, params, seeds=list(range(args.batch)))  # warm-up
    batch = torch.tensor(prompts, device=device)
    bare_loop(model, batch, 8, with_mask=False)  # warm-up
    # three rounds, the three timings interleaved in each: one slow moment of the machine lands in
    # one round, and the medians are compared (a lent VM's step times varied up to 2x between calls)
    rounds: dict[str, list[float]] = {"engine": [], "engine forwards": [], "bare": [], "bare+mask": []}
    for _ in range(3):
        engine.stats.update(forward_s=0.0)
        rounds["engine"].append(_engine_ms(engine, prompts, params, device))
        rounds["engine forwards"].append(1e3 * engine.stats["forward_s"] / args.new_tokens)
        rounds["bare"].append(1e3 * bare_loop(model, batch, args.new_tokens, with_mask=False))
        rounds["bare+mask"].append(1e3 * bare_loop(model, batch, args.new_tokens, with_mask=True))
    med = {k: statistics.median(v) for k, v in rounds.items()}
    for name, values in rounds.items():
        print(f"{name:16s} {med[name]:7.2f} ms/step median (rounds: {', '.join(f'{v:.2f}' for v in values)})")
    print(f"ratio engine / bare+mask: {med['engine'] / med['bare+mask']:.2f}; bare+mask / bare: {med['bare+mask'] / med['bare']:.2f} "
          "(the engine's steps include its prefill)")
    if args.variants:
        run_variants(engine, model, prompts, batch, params, args.new_tokens, device)
    profiler = cProfile.Profile()  # a separate call: cProfile slows Python-heavy code, so it times nothing above
    profiler.enable()
    engine.generate(prompts, params, seeds=list(range(args.batch)))
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(12)
    print("\nengine.generate, top 12 functions by self time (one more call under cProfile; CUDA time shows up where the host waits):")
    print("\n".join(line for line in text.getvalue().splitlines() if line.strip())[-3000:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
