"""GRPO step time: RAGEN's trainer vs TRL's GRPOTrainer on the same tiny model (side by side).

Workload (both sides): 4 Bandit prompts x 8 completions = 32 completions, up to 64 new tokens,
single turn, temperature 1.0, one optimiser step over all 32 completions in micro-batches of 8,
no reference model (KL off), no gradient checkpointing, CPU. A step = generation + log-probs +
loss + backward + optimiser. The first step of each side is a warm-up and is not counted.
Both sides see the same prompt tokens (RAGEN's first-turn Bandit prompts, ~940 byte tokens,
given to TRL as plain text). Completions stop at EOS on both sides, so lengths differ somewhat.

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


def ragen_step_times(steps: int, workdir: Path) -> list[float]:
    from ragen_core.config import load_config
    from ragen_core.trainer.config import RunConfig
    from ragen_core.trainer.trainer import Trainer

    cfg = load_config(RunConfig, [], [
        "env=bandit", "algo=grpo", f"steps={steps + 1}", f"rollout.env_groups={GROUPS}", f"rollout.group_size={GROUP_SIZE}",
        f"sampling.train.max_new_tokens={NEW_TOKENS}", "optim.mini_batch_size=32", f"optim.micro_batch_size={MICRO}",
        "warm_start.enabled=false", "test_freq=0", "save_freq=0", "progress=false", f"run_dir={workdir / 'ragen'}",
        "rollout.max_model_len=4096",
    ])
    trainer = Trainer(cfg)
    trainer.setup()
    times = []
    for step in range(1, steps + 2):
        t0 = time.perf_counter()
        trainer.train_step(step)
        times.append(time.perf_counter() - t0)
    return times[1:]  # drop the warm-up step


def ragen_prompts(tok: object) -> list[list[int]]:
    from ragen_core.interfaces.engine import Generation
    from ragen_core.rollout.runner import RolloutConfig, RolloutRunner

    captured: list[list[int]] = []

    class Capture:
        def generate(self, prompts, params, seed=None):
            captured.extend(list(p) for p in prompts)
            return [Generation(token_ids=[0], logprobs=None, finish_reason="stop") for _ in prompts]

    RolloutRunner("bandit", {}, None, Capture(), tok, RolloutConfig(env_groups=GROUPS, group_size=1, max_model_len=4096)).run(mode="train")
    return captured


def trl_step_times(steps: int, workdir: Path) -> list[float]:
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

    class Clock(TrainerCallback):
        t0 = 0.0

        def on_step_begin(self, *a: object, **k: object) -> None:
            Clock.t0 = time.perf_counter()

        def on_step_end(self, *a: object, **k: object) -> None:
            times.append(time.perf_counter() - Clock.t0)

    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data, processing_class=tok, callbacks=[Clock()])
    trainer.train()
    return times[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ours = ragen_step_times(args.steps, Path(tmp))
        print(f"RAGEN GRPO step: min {min(ours):.2f} s, median {statistics.median(ours):.2f} s over {len(ours)} steps {[f'{t:.2f}' for t in ours]}")
        try:
            theirs = trl_step_times(args.steps, Path(tmp))
        except Exception as exc:  # noqa: BLE001 - report, do not crash the benchmark
            print(f"TRL could not run here: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            return
        if not theirs:
            print("TRL ran but reported no step times")
            return
        print(f"TRL   GRPO step: min {min(theirs):.2f} s, median {statistics.median(theirs):.2f} s over {len(theirs)} steps {[f'{t:.2f}' for t in theirs]}")
        print(f"ratio RAGEN / TRL: min-to-min {min(ours) / min(theirs):.2f}, median-to-median "
              f"{statistics.median(ours) / statistics.median(theirs):.2f} (lower is faster; min is least disturbed by other load)")


if __name__ == "__main__":
    main()
