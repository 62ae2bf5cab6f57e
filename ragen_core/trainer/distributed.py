"""Data-parallel training over ``torch.distributed`` ranks (launched with ``torchrun``).

Launch::

    torchrun --nproc_per_node 2 -m ragen_core.cli.main run --env bandit rollout.env_groups=8

``torchrun`` starts one process per rank and sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR`` and ``MASTER_PORT``; :func:`from_env` reads them and joins the process group
(``gloo`` on CPU, ``nccl`` on CUDA, one GPU per rank: ``cuda:LOCAL_RANK``). Without them the run
is one process and every helper below is a no-op.

The design, chosen to be the simplest that is exactly the one-process step on the same global
batch (issue 19, part 3):

* **Every rank holds a full replica.** Rank 0's weights are broadcast after setup (its warm
  start or checkpoint is what everyone trains), and every optimiser step applies the same summed
  gradient on every rank, so the replicas stay identical without ever sending weights again.
* **Rollout: each rank plays its share of the groups** (contiguous, :meth:`World.share`) with the
  seeds the one-process run gives those groups (:func:`rollout_share`), so a reply depends on its
  episode's seed only. The trajectories are gathered to every rank in group order: every rank then
  holds the *global* batch.
* **The filter sees the global batch.** Rank 0 runs the selection and sends it to the others
  (a filter that draws random numbers cannot then pick differently per rank).
* **No-grad forwards are split by rows**: each rank computes the old / reference log-probs and
  values of its share of the rows, the others' rows left 0, and one sum makes the full tensor
  (adding exact zeros: bit-identical to computing every row locally). Advantages are then the
  same pure function of the same tensors on every rank.
* **The update deals micro-batches to ranks.** A mini-batch is cut into the same micro-batches
  as in one process; each rank runs its share of them; losses are normalised by the *global*
  mini-batch's token (or sequence) count, so the per-rank gradients are parts of one sum, and one
  ``all_reduce(SUM)`` of the flattened gradients (the collective DDP runs, without its wrapper,
  so the HF engine, LoRA's adapter switch and the shared-prompt session keep using the plain
  module) gives every rank the one-process gradient. The loss is a token mean over the global
  mini-batch, never a mean of per-rank means. Only the order in which float gradients are added
  changes.
* **Only rank 0 writes**: the run folder, config, logs, metrics, rollouts, checkpoints, plots.
  Validation runs on rank 0 and its metrics are sent to the others, so early stops agree; a
  Ctrl-C seen by any rank stops all of them after the same step.

**FSDP** (``distributed.strategy=fsdp``, for a policy whose weights, gradients and AdamW state do
not fit one GPU several times over): the same design, with the policy and the critic sharded by
FSDP2 (:func:`shard`: each transformer block, then the rest; :attr:`World.sharded`)::

    torchrun --nproc_per_node 2 -m ragen_core.cli.main run --env bandit distributed.strategy=fsdp

* **Generation uses a whole copy.** Before sharding, every rank takes an unsharded frozen copy
  of the policy (:class:`~ragen_core.trainer.async_rollout.PolicyCopy`, the copy async rollout
  samples from); the engine samples it. After each update every rank gathers the full weights
  (:func:`full_state_dict`, a collective) and syncs them into its copy and the engine
  (``sync_weights(state_dict, version)``). Rollouts make different numbers of forward calls per
  rank, so they must never touch the sharded model. The copy costs one whole model per rank
  (weights only: no gradients, no optimiser state); a KL reference is another such copy.
* **Every rank makes the same forward/backward calls**, since each sharded forward all-gathers
  weights with the other ranks: the no-grad passes pad a shorter share of rows with other ranks'
  rows (zeroed after, :func:`rows_summed`), the update pads a shorter share of micro-batches
  with a zero-weight copy of the first, and shared-prompt forwards (whose call count depends on
  the data) are off.
* **Gradients**: FSDP reduce-scatters them in each ``backward``, set to *sum* (divide factor 1),
  so the normalisers stay global as above and :meth:`World.sum_grads` does nothing.
* **Checkpoints** are whole: rank 0 writes the copy's weights, and the critic and optimiser
  states gathered by all ranks (:func:`full_state_dict`, :func:`full_optimizer_state`, keyed as in
  one process), so a one-process run resumes them (with ``distributed.strategy=ddp``).

A rank that fails makes ``torchrun`` end the others. Not supported with several ranks (refused
with a one-line error): ``rollout.async_rollout`` and ``grad_analysis``; with FSDP also LoRA.
FSDP needs several ranks (refused in one process). ``--resume`` loads any whole checkpoint
(:func:`load_full_state`), so a run can move between one process, DDP and FSDP.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from ragen_core.errors import ConfigError, TrainingError


class RankLostError(TrainingError):
    """A collective failed: another rank of the run stopped or crashed (its own log says why)."""


def rank_lost(world: World, exc: BaseException, what: str = "a collective inside FSDP") -> RankLostError | None:
    """``exc`` as a :class:`RankLostError` when it is a backend error of a collective that this
    module did not wrap (FSDP's all-gathers and reduce-scatters run inside forward and backward),
    else None."""
    if not world.parallel or not isinstance(exc, RuntimeError) or isinstance(exc, RankLostError):
        return None
    import torch.distributed as dist

    text = str(exc)
    backend = isinstance(exc, getattr(dist, "DistBackendError", ())) or any(
        marker in text for marker in ("gloo", "NCCL", "Connection closed by peer", "Connection reset by peer"))
    return _lost(world, what, exc) if backend else None


def _lost(world: World, what: str, exc: BaseException) -> RankLostError:
    """The one line for a collective ``what`` that failed with the backend error ``exc``."""
    text = str(exc)
    first = text.splitlines()[0].split(". ")[0] if text else type(exc).__name__
    return RankLostError(f"rank {world.rank}: {what} over {world.size} ranks failed: another rank stopped or crashed ({first[:200]})",
                         ["the first rank to fail says why in its own output (torchrun's summary names it as the root cause)"])


@contextmanager
def _collective(world: World, what: str) -> Iterator[None]:
    """Turn a collective's backend error (gloo: "Connection closed by peer", NCCL: a watchdog
    timeout) into one line that says which rank saw it and where to look."""
    try:
        yield
    except RuntimeError as exc:  # torch.distributed.DistBackendError is a RuntimeError too
        raise _lost(world, what, exc) from exc


@dataclass(frozen=True)
class World:
    """Who this process is among the ranks of a run; ``World()`` is one process."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    device: str = "cpu"
    """Where collectives run: ``cpu`` (gloo) or ``cuda:LOCAL_RANK`` (nccl)."""
    sharded: bool = False
    """``distributed.strategy=fsdp``: the policy is sharded (:func:`shard`); every rank must then
    make the same forward and backward calls, and FSDP sums the gradients itself."""

    @property
    def main(self) -> bool:
        """Rank 0: the rank that writes the run folder and runs validation."""
        return self.rank == 0

    @property
    def parallel(self) -> bool:
        return self.size > 1

    def share(self, n: int) -> range:
        """This rank's contiguous share of ``n`` items; the first ``n % size`` ranks take one more."""
        base, extra = divmod(n, self.size)
        start = self.rank * base + min(self.rank, extra)
        return range(start, start + base + (1 if self.rank < extra else 0))

    # ------------------------------------------------------------------ collectives
    def all_sum(self, tensor: Any) -> Any:
        """The element-wise sum of ``tensor`` over all ranks (a new tensor on ``tensor``'s device)."""
        if not self.parallel:
            return tensor
        import torch.distributed as dist

        out = tensor.detach().to(self.device, copy=True)
        with _collective(self, "a sum (all_reduce)"):
            dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out.to(tensor.device)

    def sum_floats(self, values: list[float]) -> list[float]:
        """Sum a list of floats over ranks (in float64)."""
        if not self.parallel:
            return list(values)
        import torch

        out: list[float] = self.all_sum(torch.tensor(values, dtype=torch.float64)).tolist()
        return out

    def any(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on any rank."""
        return bool(self.sum_floats([float(flag)])[0] > 0) if self.parallel else flag

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank (pickled; the other ranks' argument is ignored)."""
        if not self.parallel:
            return obj
        import torch.distributed as dist

        box = [obj if self.main else None]
        with _collective(self, "a broadcast from rank 0"):
            dist.broadcast_object_list(box, src=0, device=self._object_device())
        return box[0]

    def gather(self, items: list[Any]) -> list[Any]:
        """Every rank's ``items`` concatenated in rank order, on every rank (pickled)."""
        if not self.parallel:
            return list(items)
        import torch.distributed as dist

        boxes: list[Any] = [None] * self.size
        with _collective(self, "a gather (all_gather_object)"):
            dist.all_gather_object(boxes, items)
        return [x for box in boxes for x in box]

    def sync_module(self, module: Any) -> None:
        """Copy rank 0's parameters and buffers into ``module`` on every rank (in place)."""
        if not self.parallel or module is None:
            return
        import torch
        import torch.distributed as dist

        with torch.no_grad():
            for tensor in list(module.parameters()) + list(module.buffers()):
                buf = tensor.detach().to(self.device, copy=True)
                with _collective(self, "copying rank 0's weights"):
                    dist.broadcast(buf, src=0)
                tensor.copy_(buf.to(tensor.device))

    def sum_grads(self, params: Iterable[Any]) -> None:
        """Replace each parameter's gradient by its sum over ranks (one flat ``all_reduce``);
        nothing when :attr:`sharded` (FSDP has already reduce-scattered the sums in ``backward``).

        A parameter that got no gradient on some rank (it ran no micro-batch) takes zeros there;
        one that got none on any rank keeps ``grad=None``, as in one process (AdamW then skips
        it: no decay, no moment update).
        """
        if not self.parallel or self.sharded:
            return
        import torch

        params = list(params)
        present = self.all_sum(torch.tensor([float(p.grad is not None) for p in params]))
        live = [p for p, n in zip(params, present.tolist()) if n > 0]
        for p in live:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        by_dtype: dict[Any, list[Any]] = {}
        for p in live:
            by_dtype.setdefault(p.grad.dtype, []).append(p)
        for group in by_dtype.values():
            flat = self.all_sum(torch.cat([p.grad.reshape(-1) for p in group]))
            offset = 0
            for p in group:
                n = p.grad.numel()
                p.grad.copy_(flat[offset : offset + n].view_as(p.grad))
                offset += n

    def _object_device(self) -> Any:
        import torch

        return torch.device(self.device)


ONE = World()
"""The one-process world."""


def from_env(device: str = "auto") -> World:
    """The world ``torchrun`` describes in the environment (joining its process group), else :data:`ONE`.

    Args:
        device: The run's ``device`` setting; CUDA (or ``auto`` with a GPU) uses ``nccl`` and
            ``cuda:LOCAL_RANK``, anything else ``gloo`` on the CPU.

    Raises:
        ConfigError: ``WORLD_SIZE`` > 1 without ``RANK`` / ``MASTER_ADDR`` (not a torchrun launch), or a
            CUDA rank whose ``LOCAL_RANK`` has no GPU of its own (more ranks than GPUs on the node).
    """
    size = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if size <= 1:
        return ONE
    missing = [k for k in ("RANK", "MASTER_ADDR", "MASTER_PORT") if not os.environ.get(k)]
    if missing:
        raise ConfigError(f"WORLD_SIZE={size} but {', '.join(missing)} is not set: a data-parallel run is started by torchrun",
                          ["torchrun --nproc_per_node 2 -m ragen_core.cli.main run ...  (or unset WORLD_SIZE for one process)"])
    import torch
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))
    cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    if cuda:
        visible = torch.cuda.device_count()
        if local >= visible:  # torch.cuda.set_device would raise a bare 'invalid device ordinal'
            raise ConfigError(f"torchrun rank with LOCAL_RANK={local} needs cuda:{local}, but this machine shows {visible} CUDA device(s): "
                              "a data-parallel run takes one GPU per rank",
                              [f"torchrun --nproc_per_node {max(visible, 1)} ... (at most one rank per GPU), or device=cpu for gloo ranks"])
        torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
    return World(rank=dist.get_rank(), size=dist.get_world_size(), local_rank=local, device=f"cuda:{local}" if cuda else "cpu")


def shutdown() -> None:
    """Leave the process group, if this process joined one (the end of ``ragen run``)."""
    import sys

    if "torch.distributed" not in sys.modules:
        return
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        # every rank has finished its last collective before any leaves: gloo aborts a rank whose peer closes the
        # connection while it still waits for that collective's last message ('terminate called without an active
        # exception', SIGABRT; seen once in a few full test runs). A rank that died makes the barrier fail: leave anyway.
        with suppress(Exception):
            dist.barrier()
        dist.destroy_process_group()


def check_supported(config: Any, world: World) -> None:
    """Refuse settings that several ranks (or FSDP) do not support (one line naming the setting)."""
    fsdp = config.distributed.strategy == "fsdp"
    if fsdp and not world.parallel:
        raise ConfigError("distributed.strategy=fsdp needs several ranks: it shards the policy over the processes torchrun starts",
                          ["torchrun --nproc_per_node 2 -m ragen_core.cli.main run ...  (or distributed.strategy=ddp)"])
    if not world.parallel:
        return
    # fsdp with LoRA (or with the two below) is refused by RunConfig's validation, before a run starts
    if config.grad_analysis.every > 0:
        raise ConfigError(f"grad_analysis.every={config.grad_analysis.every} is not supported with {world.size} ranks",
                          ["run the gradient analysis in one process (without torchrun)"])
    if getattr(config.rollout, "async_rollout", False):
        raise ConfigError(f"rollout.async_rollout is not supported with {world.size} ranks", ["set rollout.async_rollout=false"])


def rollout_share(runner: Any, sampling: Any, world: World) -> list[Any]:
    """A training rollout of ``runner.config.env_groups`` groups split over the ranks, gathered.

    Each rank plays its share of the groups with the seeds one process gives them (group ``g``
    is reset with ``base + g`` and numbered ``g``), and the seed schedule moves on by the whole
    rollout, as in one process. Returns every rank's trajectories in group order, on every rank.
    """
    if not world.parallel:
        return list(runner.run(mode="train", sampling=sampling))
    n = runner.config.env_groups
    base = runner.seeds.next_base("train", n)
    mine = world.share(n)
    trajs: list[Any] = []
    if len(mine) > 0:
        trajs = runner.run(mode="train", sampling=sampling, env_groups=len(mine), seed=base + mine.start)
        offset = mine.start * runner.config.group_size
        for t in trajs:
            t.group_id += mine.start
            t.env_id += offset
    runner.seeds.counter = base - runner.seeds.train_base + n  # run(seed=...) set it from this rank's share
    return world.gather(trajs)


def rows_summed(world: World, batch: Any, forward: Callable[[list[int]], tuple[Any, Any]], pair: bool = False,
                rows: list[int] | None = None) -> tuple[Any, Any]:
    """``forward(rows)`` (``[B, L-1]`` tensors filled on ``rows`` only; the second is None unless
    ``pair``) over this rank's share of the rows, summed over ranks: each rank fills its own rows
    and the others add exact zeros, so the sum is every row computed once. A rank without rows
    (fewer rows than ranks) adds zeros. Sharded (FSDP), every rank runs the same number of rows
    (so the same forward calls): a shorter share is padded with other ranks' rows, zeroed after.
    ``rows`` (default: all) limits the pass to those rows; the others stay 0."""
    import torch

    wanted = list(range(len(batch))) if rows is None else list(rows)
    if not world.parallel:
        return forward(wanted)
    mine = [wanted[i] for i in world.share(len(wanted))]
    if world.sharded:
        need = -(-len(wanted) // world.size)
        pad = [i for i in wanted if i not in mine][: need - len(mine)]
        first, second = forward(mine + pad)
        for part in (first, second) if pad else ():
            if part is not None:
                part[pad] = 0.0
    elif mine:
        first, second = forward(mine)
    else:
        first = second = torch.zeros((len(batch), batch.input_ids.shape[1] - 1), dtype=torch.float32)
    return world.all_sum(first), (world.all_sum(second) if pair else None)


def shard(model: Any) -> None:
    """FSDP2 (``fully_shard``): shard each transformer block, then the rest, over all ranks.

    Gradients are *summed* over ranks, not averaged (a divide factor of 1, with plain SUM
    collectives, which gloo needs): the losses are normalised by the global batch already, as in
    :meth:`World.sum_grads`. Call it before building the optimiser (the parameters become DTensors).
    """
    import torch
    from torch.distributed.fsdp import FSDPModule, fully_shard

    blocks: Any = next((m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) > 0), [])
    for block in blocks:
        fully_shard(block)
    # the root reshards after forward too (FSDP's default keeps it whole until the backward): between
    # passes ``model.parameters()`` are then always the sharded parameters the optimiser holds
    fully_shard(model, reshard_after_forward=True)
    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.set_gradient_divide_factor(1.0)
            m.set_force_sum_reduction_for_comms(True)


def full_state_dict(model: Any) -> dict[str, Any]:
    """The whole weights of a sharded ``model``, on every rank (a collective: call it on all ranks)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return dict(get_model_state_dict(model, options=StateDictOptions(full_state_dict=True)))


def full_optimizer_state(model: Any, optimizer: Any) -> dict[str, Any]:
    """A sharded model's optimiser state gathered whole (a collective: call it on all ranks), keyed
    by parameter index like ``optimizer.state_dict()`` in one process, so a one-process run loads it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    sd: Any = get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True))
    index = {name: i for i, (name, p) in enumerate((n, p) for n, p in model.named_parameters() if p.requires_grad)}
    return {"state": {index[name]: value for name, value in sd["state"].items()},
            "param_groups": [{**group, "params": [index[name] for name in group["params"]]} for group in sd["param_groups"]]}


def load_full_state(model: Any, optimizer: Any, model_state: Any, optimizer_state: Any) -> None:
    """Load whole (one-process) states into a sharded ``model`` (None: keep its weights) and its
    ``optimizer``: the inverse of :func:`full_state_dict` / :func:`full_optimizer_state` (every rank)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True)
    if model_state is not None:
        set_model_state_dict(model, model_state, options=options)
    names = [name for name, p in model.named_parameters() if p.requires_grad]
    by_name: Any = {"state": {names[i]: value for i, value in optimizer_state["state"].items()},
               "param_groups": [{**group, "params": [names[i] for i in group["params"]]} for group in optimizer_state["param_groups"]]}
    set_optimizer_state_dict(model, optimizer, by_name, options=options)
