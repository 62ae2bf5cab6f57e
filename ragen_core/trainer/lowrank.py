"""Low-rank weight deltas: train a small change on top of a frozen model, store only that change.

A shipped warm policy for one env (:mod:`ragen_core.trainer.warm_policy`, ``--delta-rank``) is
the general policy plus ``B @ A`` on every linear layer (rank ``r``: ``(out + in) * r`` numbers
instead of ``out * in``) and its own 1-D parameters (norms, biases; a few thousand numbers). For
the tiny model (1.8 M parameters, 3.6 MB in float16) rank 8 is about 0.25 MB, so several env
policies fit in the repository where whole copies of the model would not.

While training, :func:`attach` adds the delta with forward hooks: the base weights stay as they
are (frozen), the model's state dict keeps its keys, and the in-process rollout engine, which
shares the module, samples from base + delta. :func:`delta_state` reads the trained delta out;
:func:`apply_delta` adds a stored one into a model's weights (what a run loads).
"""

from __future__ import annotations

from typing import Any

#: Key suffixes of a stored delta: ``<linear>.weight.lora_A`` (rank x in) and ``.lora_B`` (out x rank).
A_SUFFIX = ".lora_A"
B_SUFFIX = ".lora_B"


class Attached:
    """The trainable delta of a model while :func:`attach` is in effect; :meth:`detach` removes it."""

    def __init__(self, factors: dict[str, tuple[Any, Any]], vectors: list[str], handles: list[Any]) -> None:
        self.factors = factors
        """``linear module name -> (A, B)`` (``nn.Parameter``\\ s)."""
        self.vectors = vectors
        """Names of the model's 1-D parameters trained in full."""
        self.handles = handles

    @property
    def rank(self) -> int:
        return int(next(iter(self.factors.values()))[0].shape[0])

    def parameters(self, model: Any) -> list[Any]:
        """Everything the delta trains: the factors and the model's 1-D parameters."""
        named = dict(model.named_parameters())
        return [p for pair in self.factors.values() for p in pair] + [named[n] for n in self.vectors]

    def detach(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []


def attach(model: Any, rank: int, *, seed: int = 0) -> Attached:
    """Freeze ``model`` and give every linear layer of its transformer blocks a trainable rank-``rank``
    delta (``A`` drawn N(0, 1/in), ``B`` zero, so the model starts unchanged); its 1-D parameters
    (norms, biases) stay trainable. The embedding (tied to the output head) stays frozen."""
    import torch

    if rank < 1:
        raise ValueError(f"delta rank must be at least 1, got {rank}")
    gen = torch.Generator().manual_seed(seed)
    factors: dict[str, tuple[Any, Any]] = {}
    handles = []
    for p in model.parameters():
        p.requires_grad_(False)
    vectors = []
    for name, p in model.named_parameters():
        if p.dim() == 1:
            p.requires_grad_(True)
            vectors.append(name)
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear) or ".layers." not in f".{name}":
            continue
        out_f, in_f = module.weight.shape
        a = torch.nn.Parameter(torch.randn(rank, in_f, generator=gen, dtype=torch.float32).to(module.weight) / in_f ** 0.5)
        b = torch.nn.Parameter(torch.zeros(out_f, rank, dtype=module.weight.dtype, device=module.weight.device))
        factors[name] = (a, b)

        def hook(mod: Any, inputs: tuple[Any, ...], output: Any, a: Any = a, b: Any = b) -> Any:
            return output + (inputs[0] @ a.t()) @ b.t()

        handles.append(module.register_forward_hook(hook))
    if not factors:
        raise ValueError("no linear layer under '.layers.' to attach a low-rank delta to")
    return Attached(factors, vectors, handles)


def _stored_keys(model: Any, attached: Attached) -> dict[str, Any]:
    """Every trained tensor under its stored key: ``<name>.weight.lora_A`` / ``.lora_B`` per linear
    layer, the 1-D parameters under their own names."""
    named = dict(model.named_parameters())
    keyed: dict[str, Any] = {}
    for name, (a, b) in attached.factors.items():
        keyed[f"{name}.weight{A_SUFFIX}"] = a
        keyed[f"{name}.weight{B_SUFFIX}"] = b
    keyed.update({name: named[name] for name in attached.vectors})
    return keyed


def delta_state(model: Any, attached: Attached) -> dict[str, Any]:
    """The delta as tensors to store (detached copies, the model's dtype), keyed as :func:`apply_delta` reads them."""
    return {key: param.detach().clone() for key, param in _stored_keys(model, attached).items()}


def load_attached(model: Any, attached: Attached, delta: dict[str, Any]) -> None:
    """Set an attached delta's factors and 1-D parameters to a stored one (to go on training it).
    Raises ``ValueError`` when a key is missing or a shape differs (another rank)."""
    import torch

    with torch.no_grad():
        for key, param in _stored_keys(model, attached).items():
            value = delta.get(key)
            if value is None or tuple(value.shape) != tuple(param.shape):
                got = "missing" if value is None else f"{tuple(value.shape)}"
                raise ValueError(f"stored delta entry {key!r} is {got}, expected {tuple(param.shape)}")
            param.copy_(value.to(param.dtype))


def apply_delta(model: Any, delta: dict[str, Any]) -> None:
    """Add a stored delta into ``model``'s weights in place: ``W += B @ A`` (computed in float32)
    and 1-D parameters replaced. Raises ``ValueError`` naming the first key or shape that does not fit."""
    import torch

    own = model.state_dict()
    with torch.no_grad():
        for key, value in delta.items():
            if key.endswith(A_SUFFIX):
                continue
            if key.endswith(B_SUFFIX):
                weight = key[: -len(B_SUFFIX)]
                a = delta.get(weight + A_SUFFIX)
                if weight not in own or a is None:
                    raise ValueError(f"delta entry {key!r} has no matching weight or lora_A")
                change = value.float() @ a.float()
                if tuple(change.shape) != tuple(own[weight].shape):
                    raise ValueError(f"delta for {weight!r} is {tuple(change.shape)}, the model's weight {tuple(own[weight].shape)}")
                own[weight].add_(change.to(device=own[weight].device, dtype=own[weight].dtype))  # the delta file loads on the CPU
            else:
                if key not in own or tuple(own[key].shape) != tuple(value.shape):
                    raise ValueError(f"delta entry {key!r} does not fit the model")
                own[key].copy_(value.to(own[key].dtype))
