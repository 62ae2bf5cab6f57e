"""Supervised warm start: teach a fresh model the reply *format*, never the solution.

A randomly initialised tiny model never emits ``<think>..</think><answer>..</answer>``, so RL
would only ever see format penalties. The warm start generates demonstrations with the env
itself: a scripted engine (:class:`DemoEngine`) answers every prompt of a normal rollout with a
**uniformly random legal action** (from ``env.action_names``) wrapped in the reply format. The
rollout runner produces the prompts, so demonstrations use exactly the prompt layout of
training. The model is then fine-tuned with cross-entropy on the reply tokens only.

Envs without a fixed action vocabulary are skipped with a message (their random legal actions
depend on the state, which a prompt-only scripted engine cannot see). No oracle is consulted.

The result is cached as a model folder under ``warm_start.cache_dir/<key>`` where the key hashes
(env, preset, env config, model, rollout/warm-start settings, seed): a second run reuses it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ragen_core.interfaces.engine import Engine, Generation, SamplingParams
from ragen_core.seeding import derive_seed, make_rng
from ragen_core.trainer.config import RunConfig

_THOUGHTS = ("I will try {a}.", "Let me pick {a}.", "Choosing {a} this time.", "{a} seems worth a try.")


class DemoEngine(Engine):
    """A scripted engine replying with a random legal action in the reply format."""

    def __init__(self, tokenizer: Any, action_names: list[str], *, enable_think: bool = True, seed: int = 0) -> None:
        super().__init__()
        self.tokenizer = tokenizer
        self.action_names = list(action_names)
        self.enable_think = enable_think
        self.rng = make_rng(seed, "demo-engine")
        end = tokenizer.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tokenizer.get_vocab() else None
        self.end_id = end if isinstance(end, int) else tokenizer.eos_token_id

    def reply_text(self) -> str:
        action = self.action_names[int(self.rng.integers(len(self.action_names)))]
        if not self.enable_think:  # the generation prefix "<answer>" is already in the prompt
            return f"{action}</answer>"
        thought = _THOUGHTS[int(self.rng.integers(len(_THOUGHTS)))].format(a=action)
        return f"{thought}</think><answer>{action}</answer>"

    def generate(self, prompts: list[list[int]], params: SamplingParams, seed: int | None = None) -> list[Generation]:
        out = []
        for _ in prompts:
            ids = list(self.tokenizer(self.reply_text(), add_special_tokens=False)["input_ids"]) + [int(self.end_id)]
            ids = ids[: params.max_new_tokens]
            out.append(Generation(token_ids=ids, logprobs=None, finish_reason="stop"))
        return out


def cache_key(config: RunConfig) -> str:
    payload = {
        "env": config.env,
        "preset": config.preset,
        "env_config": config.env_config,
        "model": config.model,
        "rollout": config.rollout.model_dump(mode="json"),
        "max_new_tokens": config.sampling.train.max_new_tokens,
        "warm_start": config.warm_start.model_dump(mode="json", exclude={"cache_dir", "enabled"}),
        "seed": config.seed,
    }
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return f"{config.env}-{config.preset or 'default'}-{digest}"


def env_action_names(config: RunConfig) -> list[str] | None:
    from ragen_core import registry

    env = registry.make_env(config.env, preset=config.preset, **config.env_config)
    try:
        env.reset(config.seed)
        names = env.action_names
    finally:
        env.close()
    return list(names) if names else None


def warm_start(config: RunConfig, model: Any, tokenizer: Any, *, device: str = "cpu", verbose: bool = True) -> Any:
    """Return the warm-started model (from cache when possible); ``model`` itself if skipped."""
    from ragen_core.models import load_model_and_tokenizer

    ws = config.warm_start
    folder = Path(ws.cache_dir) / cache_key(config)
    if (folder / "config.json").is_file():
        if verbose:
            print(f"warm start: using cached model {folder}")
        return load_model_and_tokenizer(str(folder), device=device)[0]
    names = env_action_names(config)
    if not names:
        if verbose:
            print(f"warm start skipped: env {config.env!r} has no fixed action vocabulary (action_names); training from the base model")
        return model
    if verbose:
        print(f"warm start: supervised fine-tuning on {ws.episodes} random-action demonstrations ({config.env}) ...")
    trajs = demonstrations(config, tokenizer, names)
    sft(model, tokenizer, trajs, epochs=ws.epochs, lr=ws.lr, batch_size=ws.batch_size, seed=config.seed)
    tmp = folder.with_name(folder.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(tmp), safe_serialization=True)
    tokenizer.save_pretrained(str(tmp))
    if not folder.exists():
        tmp.rename(folder)
    return model


def demonstrations(config: RunConfig, tokenizer: Any, names: list[str]) -> list[Any]:
    """Roll out the scripted :class:`DemoEngine` through the normal runner (seeds disjoint from training)."""
    from ragen_core.trainer.setup import make_runner, sampling_params

    seed = derive_seed(config.seed, "warm-start")
    demo_cfg = config.model_copy(update={"seed": seed})
    engine = DemoEngine(tokenizer, names, enable_think=config.rollout.enable_think, seed=seed)
    runner = make_runner(demo_cfg, engine, tokenizer, "train", groups=config.warm_start.episodes, group_size=1)
    return runner.run(mode="train", sampling=sampling_params(config.sampling.train))


def sft(model: Any, tokenizer: Any, trajs: list[Any], *, epochs: int, lr: float, batch_size: int, seed: int) -> list[float]:
    """Cross-entropy on the reply tokens of ``trajs``; returns the loss of every batch."""
    import torch

    from ragen_core.trainer.batch import build_batch
    from ragen_core.trainer.modeling import token_logprobs

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    batch = build_batch(trajs, pad)
    device = next(model.parameters()).device
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    rng = make_rng(seed, "sft-order")
    losses: list[float] = []
    model.eval()
    for _ in range(epochs):
        order = rng.permutation(len(batch)).tolist()
        for start in range(0, len(order), batch_size):
            sub = batch.select(order[start : start + batch_size])
            mask = sub.response_mask.to(device)
            logp, _ = token_logprobs(model, sub.input_ids.to(device), sub.attention_mask.to(device))
            loss = -(logp * mask).sum() / mask.sum().clamp(min=1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(float(loss.detach()))
    opt.zero_grad(set_to_none=True)
    return losses
