"""GRPO step time: RAGEN's trainer vs TRL's GRPOTrainer on the same tiny model (side by side).

Workload (both sides): 4 Bandit prompts x 8 completions = 32 completions, up to 64 new tokens,
single turn, temperature 1.0, one optimiser step over all 32 completions in micro-batches of 8,
no reference model (KL off), no gradient checkpointing, CPU. A step = generation + log-probs +
loss + backward + optimiser. The first step of each side is a warm-up and is not counted.
Both sides see the same prompt tokens (RAGEN's first-turn Bandit prompts, ~940 byte tokens,
given to TRL as plain text). Completions stop at EOS on both sides, so lengths differ somewhat.

RAGEN also runs a second time with the shared-prefix forward switched off
(:data:`ragen_core.trainer.prefix.ENABLED`), and both RAGEN runs print their median time split
(generate / forward-backward / other), so the effect of each part is visible.

TRL is not a dependency of RAGEN. Install it next to the venv without touching torch::

    pip install --target /tmp/trl_pkgs --no-deps trl accelerate datasets pandas psutil dill \\
        multiprocess xxhash requests charset-normalizer idna urllib3 certifi python-dateutil pytz tzdata six
    PYTHONPATH=/tmp/trl_pkgs python bench/bench_grpo_step.py --steps 3

If TRL cannot be imported or fails to run, the script says so and reports only RAGEN's time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GROUPS, GROUP_SIZE, NEW_TOKENS, MICRO = 4, 8, 64, 8


def ragen_step_times(steps: int, workdir: Path, *, shared_prefix: bool = True,
                     tag: str = "ragen") -> tuple[list[float], list[float], dict[str, float]]:
    """Wall and process-CPU step times (warm-up dropped) and the median wall split of the counted steps."""
    from ragen_core.config import load_config
    from ragen_core.trainer import prefix
    from ragen_core.trainer.config import RunConfig
    from ragen_core.trainer.trainer import Trainer

    prefix.ENABLED = shared_prefix
    cfg = load_config(RunConfig, [], [
        "env=bandit", "algo=grpo", f"steps={steps + 1}", f"rollout.env_groups={GROUPS}", f"rollout.group_size={GROUP_SIZE}",
        f"sampling.train.max_new_tokens={NEW_TOKENS}", "optim.mini_batch_size=32", f"optim.micro_batch_size={MICRO}",
        "warm_start.enabled=false", "test_freq=0", "save_freq=0", "progress=false", f"run_dir={workdir / tag}",
        "rollout.max_model_len=4096",
    ])
    trainer = Trainer(cfg)
    trainer.setup()
    times, cpu, splits = [], [], []
    try:
        for step in range(1, steps + 2):
            t0, c0 = time.perf_counter(), time.process_time()
            metrics = trainer.train_step(step)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            gen = metrics.get("timing_s/gen", 0.0)
            fwd_bwd = sum(metrics.get(f"timing_s/{k}", 0.0) for k in ("update_actor", "update_critic", "old_log_prob", "ref", "values"))
            splits.append({"generate": gen, "forward-backward": fwd_bwd, "other": times[-1] - gen - fwd_bwd})
    finally:
        prefix.ENABLED = True
    split = {k: statistics.median(s[k] for s in splits[1:]) for k in splits[0]}
    return times[1:], cpu[1:], split  # drop the warm-up step


def _describe(name: str, times: list[float], split: dict[str, float] | None = None) -> str:
    line = f"{name}: min {min(times):.2f} s, median {statistics.median(times):.2f} s over {len(times)} steps {[f'{t:.2f}' for t in times]}"
    if split:
        line += "\n" + " " * 4 + "median split: " + ", ".join(f"{k} {v:.2f} s" for k, v in split.items())
    return line


def ragen_prompts(tok: object) -> list[list[int]]:
    from ragen_core.interfaces.engine import Engine, Generation
    from ragen_core.interfaces.env_pool import EnvRef
    from ragen_core.rollout.runner import RolloutConfig, RolloutRunner

    captured: list[list[int]] = []

    class Capture(Engine):  # an Engine, so the runner's optional hooks (rollout_done, ...) are there
        def generate(self, prompts, params, seeds=None):
            captured.extend(list(p) for p in prompts)
            return [Generation(token_ids=[0], logprobs=None, finish_reason="stop") for _ in prompts]

    RolloutRunner(EnvRef(name="bandit"), Capture(), tok, RolloutConfig(env_groups=GROUPS, group_size=1, max_model_len=4096)).run(mode="train")
    return captured


def trl_step_times(steps: int, workdir: Path) -> tuple[list[float], list[float]]:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from ragen_core.models import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer("tiny")
    tok.padding_side = "left"
    # the exact first-turn prompts RAGEN's runner builds (chat template, scaffolding, "<think>" prefix),
    # passed as plain text so both sides process the same prompt tokens
    rows = [{"prompt": tok.decode(p, skip_special_tokens=False)} for p in ragen_prompts(tok)]
    data = Dataset.from_list(rows * (steps + 2))

    def reward(completions: list, **_: object) -> list[float]:
        return [float(len(str(c)) % 3) for c in completions]

    args = GRPOConfig(
        output_dir=str(workdir / "trl"), per_device_train_batch_size=MICRO, gradient_accumulation_steps=(GROUPS * GROUP_SIZE) // MICRO,
        num_generations=GROUP_SIZE, max_completion_length=NEW_TOKENS, max_steps=steps + 1, learning_rate=1e-4, beta=0.0,
        temperature=1.0, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, bf16=False, seed=0,
        disable_tqdm=True, dataloader_num_workers=0, gradient_checkpointing=False,  # RAGEN does not checkpoint either
    )
    times: list[float] = []
    cpu: list[float] = []

    class Clock(TrainerCallback):
        t0 = c0 = 0.0

        def on_step_begin(self, *a: object, **k: object) -> None:
            Clock.t0, Clock.c0 = time.perf_counter(), time.process_time()

        def on_step_end(self, *a: object, **k: object) -> None:
            times.append(time.perf_counter() - Clock.t0)
            cpu.append(time.process_time() - Clock.c0)

    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data, processing_class=tok, callbacks=[Clock()])
    trainer.train()
    return times[1:], cpu[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads for both sides (1 on a shared machine)")
    parser.add_argument("--no-plain", action="store_true", help="skip the RAGEN run with the shared-prefix forward switched off")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        ours, ours_cpu, split = ragen_step_times(args.steps, Path(tmp))
        print(_describe("RAGEN GRPO step", ours, split))
        print(_describe("RAGEN GRPO step CPU time", ours_cpu))
        if not args.no_plain:
            plain, plain_cpu, plain_split = ragen_step_times(args.steps, Path(tmp), shared_prefix=False, tag="ragen-plain")
            print(_describe("RAGEN GRPO step, plain forward (shared prefix off)", plain, plain_split))
            print(_describe("RAGEN GRPO step, plain forward, CPU time", plain_cpu))
            print(f"ratio shared / plain forward-backward: {split['forward-backward'] / plain_split['forward-backward']:.2f} (median split)")
        try:
            theirs, theirs_cpu = trl_step_times(args.steps, Path(tmp))
        except Exception as exc:  # noqa: BLE001 - report, do not crash the benchmark
            print(f"TRL could not run here: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            return
        if not theirs:
            print("TRL ran but reported no step times")
            return
        print(_describe("TRL   GRPO step", theirs))
        print(_describe("TRL   GRPO step CPU time", theirs_cpu))
        print(f"ratio RAGEN / TRL: min-to-min {min(ours) / min(theirs):.2f}, median-to-median "
              f"{statistics.median(ours) / statistics.median(theirs):.2f} (lower is faster; min is least disturbed by other load)")
        print(f"ratio RAGEN / TRL process CPU time: median-to-median {statistics.median(ours_cpu) / statistics.median(theirs_cpu):.2f} "
              f"(robust to other processes' load when both sides use {args.threads} thread(s))")


if __name__ == "__main__":
    main()
