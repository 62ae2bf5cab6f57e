"""Supervised warm start: teach a fresh model the reply *format*, never the solution.

A randomly initialised tiny model never emits ``<think>..</think><answer>..</answer>``, so RL
would only ever see format penalties. The warm start generates demonstrations with the env
itself: a scripted engine (:class:`DemoEngine`) answers every prompt of a normal rollout with a
**uniformly random legal action** wrapped in the reply format. The rollout runner produces the
prompts, so demonstrations use exactly the prompt layout of training. The model is then
fine-tuned with cross-entropy on the reply tokens only.

Legal actions depend on the state (Bandit's arm names change per seed), and an engine sees only
prompt ids. So the env is wrapped (:class:`RecordingEnv`, registered in-process for the duration
of the demo rollout): after every reset/step it records, keyed by the observation text, the
state's legal actions (``env.action_names``) or one ``env.random_action(rng)`` for free-text envs
that provide it. The engine decodes the prompt and answers for the latest observation it
contains. Envs offering neither are skipped with a message. No oracle is consulted.

The result is cached as a model folder under ``warm_start.cache_dir/<key>`` where the key hashes
(env, preset, env config, model, rollout/warm-start settings, seed): a second run reuses it.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from pathlib import Path
from typing import Any

from ragen_core.interfaces.engine import Engine, Generation, SamplingParams
from ragen_core.interfaces.env import Env, StepResult
from ragen_core.seeding import derive_seed, make_rng
from ragen_core.trainer.config import RunConfig

_THOUGHTS = ("", "{a}", "I pick {a}.")


_LEGAL: dict[str, list[str]] = {}
"""Observation text -> legal actions of that state (filled by :class:`RecordingEnv`)."""


class RecordingEnv(Env):
    """Delegates to a real env and records each state's legal actions by observation text."""

    def __init__(self, inner: Env, seed: int) -> None:
        self.inner = inner
        self.config = inner.config
        self.action_sep = inner.action_sep
        self.seed = None
        self._rng = make_rng(seed, "recording-env")

    def _record(self, obs: str) -> str:
        names = self.inner.action_names
        if names:
            _LEGAL[obs] = list(names)
        else:
            action = self.inner.random_action(self._rng)
            if action is not None:
                _LEGAL[obs] = [str(action)]
        return obs

    def reset(self, seed: int, *, member: int = 0, mode: str = "train") -> str:
        self.seed = seed
        return self._record(self.inner.reset(seed, member=member, mode=mode))

    def step(self, action: str) -> StepResult:
        result = self.inner.step(action)
        self._record(result.observation)
        return result

    def render(self) -> str:
        return self.inner.render()

    def instruction(self) -> str:
        return self.inner.instruction()

    @property
    def action_names(self) -> list[str] | None:
        return self.inner.action_names

    def close(self) -> None:
        self.inner.close()


class DemoEngine(Engine):
    """A scripted engine replying with a random legal action (see :data:`_LEGAL`) in the reply format."""

    def __init__(self, tokenizer: Any, *, enable_think: bool = True, seed: int = 0) -> None:
        super().__init__()
        self.tokenizer = tokenizer
        self.enable_think = enable_think
        self.rng = make_rng(seed, "demo-engine")
        end = tokenizer.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tokenizer.get_vocab() else None
        self.end_id = end if isinstance(end, int) else tokenizer.eos_token_id

    def legal_actions(self, prompt_text: str) -> list[str] | None:
        best, best_pos = None, -1
        for obs, actions in _LEGAL.items():
            pos = prompt_text.rfind(obs) if obs else -1
            if pos > best_pos or (pos == best_pos and pos >= 0 and best is not None and len(obs) > len(best[0])):
                best, best_pos = (obs, actions), pos
        return best[1] if best else None

    def reply_text(self, actions: list[str] | None, thought: str | None = None) -> str:
        action = actions[int(self.rng.integers(len(actions)))] if actions else "?"
        if not self.enable_think:  # the generation prefix "<answer>" is already in the prompt
            return f"{action}</answer>"
        if thought is None:
            thought = _THOUGHTS[int(self.rng.integers(len(_THOUGHTS)))].format(a=action)
        return f"{thought}</think><answer>{action}</answer>"

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) + [int(self.end_id)]

    def generate(self, prompts: list[list[int]], params: SamplingParams, seed: int | None = None) -> list[Generation]:
        out = []
        for prompt in prompts:
            actions = self.legal_actions(self.tokenizer.decode(prompt, skip_special_tokens=False))
            state = self.rng.bit_generator.state
            ids = self._encode(self.reply_text(actions))
            if len(ids) > params.max_new_tokens:  # too long for the budget: same action, empty thought
                self.rng.bit_generator.state = state
                ids = self._encode(self.reply_text(actions, thought=""))
            out.append(Generation(token_ids=ids[: params.max_new_tokens], logprobs=None, finish_reason="stop"))
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


def cache_root(config: RunConfig) -> Path:
    """``warm_start.cache_dir`` or the default next to the tiny-model cache."""
    if config.warm_start.cache_dir:
        return Path(config.warm_start.cache_dir).expanduser()
    from ragen_core.models import default_cache_dir

    return default_cache_dir().parent / "warmstart"


def has_random_actions(config: RunConfig) -> bool:
    """True when the env exposes legal actions (``action_names`` or an overridden ``random_action``)."""
    from ragen_core import registry

    env = registry.make_env(config.env, preset=config.preset, **config.env_config)
    try:
        env.reset(config.seed)
        return bool(env.action_names) or env.random_action(make_rng(config.seed, "probe")) is not None
    finally:
        env.close()


def warm_start(config: RunConfig, model: Any, tokenizer: Any, *, device: str = "cpu", verbose: bool = True) -> Any:
    """Return the warm-started model (from cache when possible); ``model`` itself if skipped."""
    from ragen_core.models import load_model_and_tokenizer

    ws = config.warm_start
    folder = cache_root(config) / cache_key(config)
    if (folder / "config.json").is_file():
        if verbose:
            print(f"warm start: using cached model {folder}")
        return load_model_and_tokenizer(str(folder), device=device)[0]
    if not has_random_actions(config):
        if verbose:
            print(f"warm start skipped: env {config.env!r} offers no legal actions (no action_names, no random_action); "
                  "training from the base model")
        return model
    if verbose:
        print(f"warm start: supervised fine-tuning on {ws.episodes} random-action demonstrations ({config.env}) ...")
    trajs = demonstrations(config, tokenizer)
    sft(model, tokenizer, trajs, epochs=ws.epochs, lr=ws.lr, batch_size=ws.batch_size, seed=config.seed)
    tmp = folder.with_name(folder.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(tmp), safe_serialization=True)
    tokenizer.save_pretrained(str(tmp))
    if not folder.exists():
        tmp.rename(folder)
    return model


def demonstrations(config: RunConfig, tokenizer: Any) -> list[Any]:
    """Roll out :class:`DemoEngine` through the normal runner on seeds disjoint from training."""
    from ragen_core import registry
    from ragen_core.specs import EnvSpec
    from ragen_core.trainer.setup import make_runner, sampling_params

    seed = derive_seed(config.seed, "warm-start")
    inner = registry.get_spec("env", config.env)
    name = f"warmstart-{inner.name}"[:60]

    def factory(cfg: Any) -> RecordingEnv:
        return RecordingEnv(registry.make("env", config.env, cfg), seed)

    globals()["_factory"] = factory
    registry.register(EnvSpec(name=name, summary="warm-start recorder", config_model=inner.config_model,
                              factory=f"{__name__}:_factory", presets=dict(inner.presets)))
    _LEGAL.clear()
    try:
        demo_cfg = config.model_copy(update={"seed": seed, "env": name})
        engine = DemoEngine(tokenizer, enable_think=config.rollout.enable_think, seed=seed)
        runner = make_runner(demo_cfg, engine, tokenizer, "train", groups=config.warm_start.episodes, group_size=1)
        return runner.run(mode="train", sampling=sampling_params(config.sampling.train))
    finally:
        registry.unregister("env", name)
        _LEGAL.clear()


def reply_logprobs(model: Any, sub: Any) -> tuple[Any, Any]:
    """Log-probs of every token after each row's first reply token, with the prompt prefix cached.

    The prompt before the first reply is run once without gradients and kept as a KV cache; only
    the remainder (replies and later observations) is run with gradients. Forward values equal a
    full forward; gradients skip the prompt's own activations (about 3x cheaper for long prompts).

    Returns ``(logp, mask)`` shaped ``[B, S-1]``: log-prob of suffix token ``j+1`` and whether it
    is a sampled reply token.
    """
    import torch

    device = next(model.parameters()).device
    lengths = sub.attention_mask.sum(1).tolist()
    splits = []
    for i in range(len(sub)):
        nz = torch.nonzero(sub.response_mask[i]).flatten()
        splits.append(int(nz[0]) if len(nz) else int(lengths[i]) - 1)
    if min(splits) < 1:
        from ragen_core.trainer.modeling import token_logprobs

        logp, _ = token_logprobs(model, sub.input_ids.to(device), sub.attention_mask.to(device))
        return logp, sub.response_mask.to(device)
    b, p_len = len(sub), max(splits)
    s_len = max(int(n) - s for n, s in zip(lengths, splits))
    pad = int(sub.input_ids[0, -1]) if sub.input_ids.shape[1] else 0
    pre_ids = torch.full((b, p_len), pad, dtype=torch.long)
    pre_mask = torch.zeros((b, p_len), dtype=torch.long)
    suf_ids = torch.full((b, s_len), pad, dtype=torch.long)
    suf_mask = torch.zeros((b, s_len), dtype=torch.long)
    tgt_mask = torch.zeros((b, max(s_len - 1, 1)), dtype=torch.float32)
    for i, (n, s) in enumerate(zip(lengths, splits)):
        n = int(n)
        pre_ids[i, p_len - s :] = sub.input_ids[i, :s]
        pre_mask[i, p_len - s :] = 1
        suf_ids[i, : n - s] = sub.input_ids[i, s:n]
        suf_mask[i, : n - s] = 1
        tgt_mask[i, : n - s - 1] = sub.response_mask[i, s : n - 1]
    pre_pos = (pre_mask.cumsum(1) - 1).clamp(min=0)
    suf_pos = torch.as_tensor(splits).unsqueeze(1) + torch.arange(s_len).unsqueeze(0)
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    params = inspect.signature(model.forward).parameters
    kw = "cache" if "cache" in params else "past_key_values"
    keep = {"logits_to_keep": 1} if "logits_to_keep" in params else {}  # prefix logits are not needed
    with torch.no_grad():
        model(input_ids=pre_ids.to(device), attention_mask=pre_mask.to(device), position_ids=pre_pos.to(device), use_cache=True,
              **{kw: cache}, **keep)
    out = model(input_ids=suf_ids.to(device), attention_mask=torch.cat([pre_mask, suf_mask], 1).to(device), position_ids=suf_pos.to(device),
                use_cache=True, **{kw: cache})
    logits = out.logits[:, :-1, :].float()
    targets = suf_ids[:, 1:].to(device).unsqueeze(-1)
    logp = logits.gather(-1, targets).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    return logp, tgt_mask[:, : logp.shape[1]].to(device)


def sft(model: Any, tokenizer: Any, trajs: list[Any], *, epochs: int, lr: float, batch_size: int, seed: int) -> list[float]:
    """Cross-entropy on the reply tokens of ``trajs``; returns the loss of every batch."""
    import torch

    from ragen_core.trainer.batch import build_batch

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    batch = build_batch(trajs, pad)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    rng = make_rng(seed, "sft-order")
    losses: list[float] = []
    model.eval()
    for _ in range(epochs):
        order = rng.permutation(len(batch)).tolist()
        for start in range(0, len(order), batch_size):
            sub = batch.select(order[start : start + batch_size])
            logp, mask = reply_logprobs(model, sub)
            loss = -(logp * mask).sum() / mask.sum().clamp(min=1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(float(loss.detach()))
    opt.zero_grad(set_to_none=True)
    return losses
