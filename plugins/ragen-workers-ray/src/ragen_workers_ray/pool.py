"""The ``ray`` env pool: env instances in Ray actors, spoken to in plain data.

:class:`RayEnvPool` connects to Ray when it is built (so a cluster address that does not answer
stops a run before any training), then starts actors the first time a reset needs them. A reset
of n episodes uses ``min(workers, ceil(n / envs_per_actor))`` actors; episode ``i`` lives in
actor ``i % count``, which keeps one env instance per episode-id slot, built *inside the actor*
from the :class:`~ragen_core.interfaces.env_pool.EnvRef` (name + config JSON + preset, or its
import-string factory) -- env objects are never pickled. Resets and steps go out as dicts and
starts/outcomes come back as dicts. A step sends one task per episode; an actor runs its tasks
in the order they were sent, one env at a time, and all actors of a turn work at once.

Failures stay local to the episodes they hit, as in the core's ``process`` pool:

* an actor that dies (killed, out of memory, its node lost) while stepping: its unanswered
  episodes come back ``end_reason="failed"``, the error naming the actor, its pid and Ray's reason;
* an actor whose current step takes longer than ``step_timeout_s``: it is killed, that episode
  comes back ``"timeout"`` and the actor's other unanswered episodes ``"failed"``.

Either way the actor is replaced (a fresh one at the next reset), a warning is logged on the
``ragen_workers_ray`` logger, and the rollout goes on; an episode of a replaced actor that was not
stepped in that call comes back ``"failed"`` at its next step. An episode an outcome ended
(``done``, ``"timeout"``, ``"failed"``) is not stepped again: a step for it is refused, as in
every pool. An env that raises or returns a non-finite reward is a bug, as in the other
pools: :class:`~ragen_core.errors.EnvError` with env, seed and member.

Ray itself: with no address (and no ``RAY_ADDRESS``), a Ray already started in this process is
used as it is; otherwise the pool starts a local one (no dashboard) and shuts it down when the
last pool using it closes. The trainer's run variables (``RAGEN_RUN_*``, see
:data:`~ragen_core.interfaces.env_pool.RUN_VARIABLE_PREFIX`) are set in every actor as it starts,
wherever it runs. Envs must be installed where the actors run (or given by an
importable ``EnvRef.factory``); an env registered in this process only is refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import time
from typing import Any

import ray

from ragen_core.errors import ConfigError, EnvError
from ragen_core.interfaces.env_pool import (
    EnvPool,
    EnvPoolConfig,
    EnvRef,
    EpisodeStart,
    ResetRequest,
    StepOutcome,
    StepRequest,
    run_variables,
)
from ragen_core.rollout.env_pool import (
    check_steps,
    episode_labels,
    episode_start_from_dict,
    note_ended,
    replay_worker_logs,
    reset_timeout_error,
)
from ragen_core.specs import EnvResources
from ragen_workers_ray.address import check_reachable, resolve_address
from ragen_workers_ray.config import RayPoolConfig

#: Seconds between the checks, while actors start, that the cluster still has a live node.
LIVENESS_EVERY_S = 5.0


def _live_nodes() -> int | None:
    """How many nodes of the cluster are alive, or None when Ray cannot say (not counted as none)."""
    try:
        return sum(1 for node in ray.nodes() if node.get("Alive"))
    except Exception:  # noqa: BLE001 - an unanswered state query proves nothing either way
        return None

log = logging.getLogger("ragen_workers_ray")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# --------------------------------------------------------------------------- actor side
class EnvActor:
    """Body of one Ray actor: env instances per episode slot, answering with plain dicts.

    Every method returns ``(kind, payload, logs)``: ``("error", one line, logs)`` for an env bug
    (raised as :class:`EnvError` by the pool), so no exception object has to cross the wire; ``logs``
    are the warnings logged in the actor since its last reply, which the pool logs in the trainer's
    process (:class:`~ragen_core.rollout.env_pool.WorkerLogs`). With ``said`` (the pool's Ray queue)
    each warning is put there as it is logged instead: an actor that then dies keeps its last words.
    """

    def __init__(self, env_json: str, said: Any = None) -> None:
        from ragen_core.rollout.env_pool import WorkerLogs

        self.logs = WorkerLogs.install()
        if said is not None:
            pid = os.getpid()

            def forward(records: list[tuple[int, str, str, str | None]]) -> None:
                try:
                    said.put_nowait((pid, records))
                except Exception:  # noqa: BLE001 - the pool (and its queue) is gone: nobody is left to tell
                    pass

            self.logs.forward = forward
        self.ref = EnvRef.model_validate_json(env_json)
        self.envs: dict[int, Any] = {}
        self.labels: dict[int, str] = {}

    def pid(self) -> int:
        return os.getpid()

    def reset(self, requests: list[dict[str, Any]]) -> tuple[str, Any, list[Any]]:
        from ragen_core.rollout.env_pool import reset_slots

        try:
            starts = reset_slots(self.ref, self.envs, self.labels, requests, self._build)
        except Exception as exc:  # noqa: BLE001 - reported to the pool, which raises it there
            return "error", _first_line(exc), self.logs.take()
        return "started", starts, self.logs.take()

    def step(self, episode_id: int, actions: list[str]) -> tuple[str, Any, list[Any]]:
        from ragen_core.rollout.env_pool import run_actions

        try:
            out = run_actions(self.envs[episode_id], episode_id, tuple(actions), label=self.labels[episode_id])
        except Exception as exc:  # noqa: BLE001 - reported to the pool, which raises it there
            return "error", _first_line(exc), self.logs.take()
        return "outcome", dataclasses.asdict(out), self.logs.take()

    def close(self) -> None:
        envs, self.envs = self.envs, {}
        for env in envs.values():
            env.close()

    def _build(self) -> Any:
        try:
            return self.ref.build()
        except Exception as exc:
            raise EnvError(f"ray pool actor (pid {os.getpid()}) could not build env {self.ref.name!r}: {_first_line(exc)}") from exc


# --------------------------------------------------------------------------- Ray itself
@dataclasses.dataclass
class _OwnedRay:
    """A Ray this module started, and how many pools use it (it is shut down when the last one closes)."""

    started: bool = False
    users: int = 0
    sweeper: Any = None
    """:func:`ragen_core.services.sweep_orphans_of` this process: a trainer killed with SIGKILL runs no
    ``ray.shutdown``, and Ray's dashboard and runtime-env agents outlived it."""


_OWNED = _OwnedRay()


def connect(config: RayPoolConfig) -> bool:
    """Make sure this process is connected to Ray; True when this call started a local Ray.

    Raises:
        ConfigError: the address does not answer, or Ray refused to connect to it.
    """
    address = resolve_address(config.address)
    if address is not None:
        check_reachable(address, config.connect_timeout_s, from_env=not config.address)
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"logging_level": logging.WARNING, "runtime_env": config.runtime_env}
    if address is None:
        kwargs.update(num_cpus=config.local_cpus, include_dashboard=False)
    try:
        ray.init(address=address, **kwargs)
    except Exception as exc:
        where = f"the Ray cluster at {address!r}" if address else "a local Ray"
        raise ConfigError(f"ray pool: could not start or join {where}: {_first_line(exc)}",
                          ["see 'ray status' on the cluster's head; without an address the pool starts Ray on this machine"]) from exc
    return address is None


# --------------------------------------------------------------------------- pool side
@dataclasses.dataclass
class _Actor:
    index: int
    handle: Any
    pid: int = 0

    def describe(self) -> str:
        return f"ray pool actor {self.index} (pid {self.pid})"


class RayEnvPool(EnvPool):
    """Env instances in Ray actors (see the module docstring).

    Args:
        env: The env to build in every actor (installed name, or an import-string factory).
        config: Pool settings (:class:`~ragen_workers_ray.config.RayPoolConfig`).

    Raises:
        ConfigError: ``env`` names an env registered in this process only, or Ray cannot be
            reached (:func:`connect`).
    """

    config_class = RayPoolConfig
    config: RayPoolConfig

    def __init__(self, env: EnvRef, config: EnvPoolConfig | None = None, **overrides: Any) -> None:
        super().__init__(env, config, **overrides)
        self.resources = self._env_resources()
        self._connected = False
        self._shares_owned = False
        """This pool counts as a user of a Ray this module started."""
        self._connect()
        self.size = self._fitting_size(ray.cluster_resources())  # type: ignore[no-untyped-call]
        self._actors: dict[int, _Actor] = {}
        self._live: dict[int, int] = {}
        """Running episode id -> index of the actor holding its env."""
        self._lost: dict[int, str] = {}
        """Episode id -> why its env is gone (its actor was replaced)."""
        self._finished: set[int] = set()
        """Episodes of this rollout that are done (their outcome said so)."""
        self._labels: dict[int, str] = {}
        """Episode id -> how errors name it (env, seed, member), from the last reset."""
        self._ended: dict[int, tuple[str, str]] = {}
        """Episode id -> (label, how) of each episode an outcome ended (done, timeout, failed): a step for it is refused."""
        self._said: Any = None
        """Ray queue the actors put their warnings in as they log them (started with the first actor)."""

    def _fitting_size(self, cluster: dict[str, float]) -> int:
        """How many actors to run: ``workers`` (0: as many as the cluster holds).

        A Ray this module started on this machine never grows, so actors beyond what it holds would
        wait ``start_timeout_s`` and fail: ``workers`` is capped to what fits, saying so, and an
        env that needs more than the whole local Ray is refused. A joined cluster may grow
        (autoscaling, nodes joining): its ``workers`` is taken as given.
        """
        r = self.resources
        need = {"CPU": float(r.cpus), "GPU": float(r.gpus)}
        fits = min(int(float(cluster.get(key, 0.0)) // amount) for key, amount in need.items() if amount > 0) if any(
            amount > 0 for amount in need.values()) else 0
        if not _OWNED.started:
            return self.config.workers or max(1, fits)
        have = ", ".join(f"{cluster.get(k, 0.0):g} {k}" for k, v in need.items() if v > 0)
        per = ", ".join(f"{v:g} {k}" for k, v in need.items() if v > 0)
        if fits < 1:
            raise ConfigError(f"ray pool: the local Ray this pool started has {have}, and one actor of env {self.env.name!r} needs {per}",
                              ["raise rollout.pool_config.local_cpus (or run on a machine that has them), or join a cluster with "
                               "rollout.pool_config.address"])
        if self.config.workers > fits:
            log.warning("ray pool: workers=%d, but the local Ray this pool started holds %d actors of env %r (%s; %s each): using %d",
                        self.config.workers, fits, self.env.name, have, per, fits)
            return fits
        return self.config.workers or fits

    def _env_resources(self) -> EnvResources:
        """``resources`` of the env's spec (defaults for a factory); refuses in-process-only envs."""
        if self.env.factory is not None:
            return EnvResources()
        from ragen_core import registry

        if registry.find("env", self.env.name).spec is not None:
            raise ConfigError(
                f"env {self.env.name!r} is registered in this process only; the ray pool builds envs in Ray actors from installed entry points",
                ["install the env's distribution where the actors run, give EnvRef(factory='module:Class'), or use the local pool"],
            )
        return registry.get_spec("env", self.env.name).resources

    def _connect(self) -> None:
        if self._connected:
            return
        if connect(self.config):
            from ragen_core.services import sweep_orphans_of

            _OWNED.started = True
            _OWNED.sweeper = sweep_orphans_of(os.getpid())
        self._shares_owned = _OWNED.started
        if self._shares_owned:
            _OWNED.users += 1
        self._connected = True

    def worker_pids(self) -> dict[int, int]:
        """Actor index -> pid of every running actor."""
        return {k: a.pid for k, a in self._actors.items()}

    # ------------------------------------------------------------------ actors
    def _actor_options(self) -> dict[str, Any]:
        r = self.resources
        options: dict[str, Any] = {"num_cpus": r.cpus, "num_gpus": r.gpus}
        if r.memory_gb is not None:
            options["memory"] = int(r.memory_gb * self.config.envs_per_actor * 2**30)
        return options

    def _actor_runtime_env(self) -> dict[str, Any]:
        """Each actor's ``runtime_env``: ``config.runtime_env`` plus the trainer's run variables
        (``RAGEN_RUN_*``, read now; they win a name both set) in its ``env_vars``.

        ``ray.init`` takes ``config.runtime_env`` only when this pool starts or joins Ray: with Ray
        already running in the process it was ignored in silence, so every actor is given it too
        (Ray lets an actor's fields replace the job's and merges ``env_vars``). An actor on another
        machine does not inherit the trainer's environment either: DeepCoder's "sandbox isolation"
        line, printed once per run, came once more from every remote actor.
        """
        runtime_env = dict(self.config.runtime_env or {})
        passed = {**runtime_env.get("env_vars", {}), **run_variables()}
        if passed:
            runtime_env["env_vars"] = passed
        return {"runtime_env": runtime_env} if runtime_env else {}

    def _start(self, indices: list[int]) -> None:
        """Start the actors ``indices`` (at once) and wait until each answers."""
        remote = ray.remote(EnvActor).options(**self._actor_options(), **self._actor_runtime_env())
        env_json = self.env.model_dump_json()
        if self._said is None:
            from ray.util.queue import Queue

            self._said = Queue(actor_options={"num_cpus": 0})
        new = {k: _Actor(k, remote.remote(env_json, self._said)) for k in indices}
        pids = {k: a.handle.pid.remote() for k, a in new.items()}
        ready = self._wait_started(list(pids.values()), new)
        errors: list[tuple[str, str]] = []
        """(message, hint) per actor that did not come up."""
        for k, a in new.items():
            if pids[k] not in ready:
                errors.append((f"ray pool actor {k} did not start within start_timeout_s={self.config.start_timeout_s:g} "
                               f"(it asks for {self._actor_options()})",
                               "see 'ray status': the cluster needs that much free per actor (set by the env's resources; lower workers)"))
                continue
            try:
                a.pid = int(ray.get(pids[k]))
            except ray.exceptions.RayError as exc:
                errors.append((f"ray pool actor {k} could not start: {_first_line(exc)}",
                               "is ragen-workers-ray (with ragen-core and the env's distribution) installed where the actors run?"))
                continue
            self._actors[k] = a
        if errors:
            for k, a in new.items():
                self._actors.pop(k, None)
                _kill(a.handle)
            raise EnvError(errors[0][0], [errors[0][1]])

    def _wait_started(self, refs: list[Any], new: dict[int, _Actor]) -> list[Any]:
        """The refs of ``refs`` ready within ``start_timeout_s``, looking every few seconds whether
        the cluster still has a live node: a Ray that died (its raylet stopped) fails at once,
        saying so, instead of after ``start_timeout_s`` with a hint about resources."""
        deadline = time.monotonic() + self.config.start_timeout_s
        while True:
            left = deadline - time.monotonic()
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=max(0.0, min(LIVENESS_EVERY_S, left)))
            if len(ready) == len(refs) or left <= LIVENESS_EVERY_S:
                return list(ready)
            if _live_nodes() == 0:
                for a in new.values():
                    _kill(a.handle)
                raise EnvError("ray pool: the Ray cluster has no live node left (its raylet stopped or died), so no actor can start",
                               ["start Ray again (or leave rollout.pool_config.address unset to let RAGEN start one), then "
                                "continue the run with 'ragen run --resume RUN_DIR'"])

    def _hear(self) -> None:
        """Log here the warnings the actors put in the queue since the last call (each prefixed with its actor)."""
        if self._said is None:
            return
        try:
            waiting = self._said.qsize()
            batches = self._said.get_nowait_batch(waiting) if waiting else []
        except Exception:  # noqa: BLE001 - the queue's actor is gone (Ray shut down): nothing to hear
            return
        names = {a.pid: a.describe() for a in self._actors.values()}
        for pid, records in batches:
            replay_worker_logs(records, names.get(pid, f"ray pool actor (pid {pid})"))

    def _replace(self, index: int, why: str) -> None:
        """Kill actor ``index`` and mark every episode it held as lost (a fresh one starts at the next reset)."""
        self._hear()  # its last words before the line that it was replaced
        actor = self._actors.pop(index)
        _kill(actor.handle)
        lost = sorted(eid for eid, k in self._live.items() if k == index and eid not in self._finished)
        for eid in lost:
            del self._live[eid]
            self._lost[eid] = why
        why = why.removeprefix(actor.describe()).lstrip()  # "replaced actor 0 (pid N): died ...", the actor named once
        log.warning("ray pool: replaced %s: %s%s", actor.describe(), why, f"; episodes {lost} failed" if lost else "")

    # ------------------------------------------------------------------ reset
    def reset(self, requests: list[ResetRequest]) -> list[EpisodeStart]:
        from ragen_core.rollout.env_pool import check_resets

        check_resets(requests)
        self._connect()
        self._live, self._lost, self._finished, self._ended = {}, {}, set(), {}
        self._labels = episode_labels(self.env, requests)
        count = min(self.size, max(1, math.ceil(len(requests) / self.config.envs_per_actor)))
        groups: dict[int, list[ResetRequest]] = {}
        for r in requests:
            groups.setdefault(r.episode_id % count, []).append(r)
        starts: dict[int, EpisodeStart] = {}
        errors: list[str] = []
        # An actor that died since the last rollout (killed, its node lost) is found here: it is
        # replaced and its episodes reset once more on the fresh actor.
        dead = self._reset_groups(groups, starts, errors, retry_dead=True)
        if dead:
            self._reset_groups({k: groups[k] for k in dead}, starts, errors, retry_dead=False)
        self._hear()
        if errors:
            raise EnvError(errors[0])
        return [starts[r.episode_id] for r in requests]

    def _reset_groups(
        self, groups: dict[int, list[ResetRequest]], starts: dict[int, EpisodeStart], errors: list[str], *, retry_dead: bool
    ) -> list[int]:
        """Reset each actor's group of episodes (starting missing actors); the actors found dead when ``retry_dead``."""
        missing = [k for k in groups if k not in self._actors]
        if missing:
            self._start(missing)
        refs = {k: self._actors[k].handle.reset.remote([dataclasses.asdict(r) for r in reqs]) for k, reqs in groups.items()}
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=self.config.reset_timeout_s)
        dead: list[int] = []
        for k, ref in refs.items():
            actor = self._actors[k]
            if ref not in ready:
                errors.append(reset_timeout_error(self.env, groups[k], self.config.reset_timeout_s, actor.describe()))
                self._replace(k, "reset timed out")
                continue
            try:
                kind, payload, logs = ray.get(ref)
            except ray.exceptions.RayError as exc:
                self._replace(k, f"died ({_first_line(exc)})")
                if retry_dead:
                    dead.append(k)
                else:
                    errors.append(f"{actor.describe()} died while resetting: {_first_line(exc)}")
                continue
            replay_worker_logs(logs, actor.describe())
            if kind == "error":
                errors.append(payload)
                continue
            for data in payload:
                starts[data["episode_id"]] = episode_start_from_dict(data)
                self._live[data["episode_id"]] = k
        return dead

    # ------------------------------------------------------------------- step
    def step(self, requests: list[StepRequest]) -> list[StepOutcome]:
        check_steps(requests, self._live.keys() | self._lost.keys(), self._ended)
        outcomes: dict[int, StepOutcome] = {}
        queues: dict[int, list[tuple[int, Any]]] = {}
        """Actor index -> (episode id, result ref) still to answer, in the order the actor runs them."""
        for r in requests:
            if r.episode_id in self._lost:
                outcomes[r.episode_id] = StepOutcome(r.episode_id, "", end_reason="failed", error=self._lost[r.episode_id])
        for r in requests:
            if r.episode_id in self._live:
                k = self._live[r.episode_id]
                ref = self._actors[k].handle.step.remote(r.episode_id, list(r.actions))
                queues.setdefault(k, []).append((r.episode_id, ref))
        heard = dict.fromkeys(queues, time.monotonic())
        errors: list[str] = []
        limit = self.config.step_timeout_s
        while queues:
            heads = [q[0][1] for q in queues.values()]
            timeout = None if limit is None else max(0.0, min(heard[k] for k in queues) + limit - time.monotonic())
            ready, _ = ray.wait(heads, num_returns=1, timeout=timeout)
            if ready:  # collect every head that is done by now, not only the first
                ready, _ = ray.wait(heads, num_returns=len(heads), timeout=0)
            done = set(ready)
            now = time.monotonic()
            for k, queue in list(queues.items()):
                eid, ref = queue[0]
                if ref in done:
                    heard[k] = now
                    try:
                        kind, payload, logs = ray.get(ref)
                    except ray.exceptions.RayError as exc:
                        self._fail(k, queue, outcomes, f"{self._actors[k].describe()} died ({_first_line(exc)})", "failed")
                    else:
                        replay_worker_logs(logs, self._actors[k].describe())
                        queue.pop(0)
                        if kind == "error":
                            errors.append(payload)
                        else:
                            outcomes[eid] = _step_outcome(payload)
                            if outcomes[eid].done:  # finished: a later replacement of its actor loses nothing of it
                                self._finished.add(eid)
                elif limit is not None and now - heard[k] >= limit:
                    why = f"{self._actors[k].describe()} did not finish episode {eid}'s step within step_timeout_s={limit:g} and was replaced"
                    self._fail(k, queue, outcomes, why, "timeout")
                if not queue:
                    del queues[k]
        self._hear()
        if errors:
            raise EnvError(errors[0])
        replies = [outcomes[r.episode_id] for r in requests]
        note_ended(self._ended, replies, self._labels.__getitem__)
        return replies

    def _fail(self, index: int, queue: list[tuple[int, Any]], outcomes: dict[int, StepOutcome], why: str, first_reason: str) -> None:
        """End ``queue``'s episodes (the actor's unanswered ones, the current one first) and replace the actor."""
        for n, (eid, _) in enumerate(queue):
            reason = first_reason if n == 0 else "failed"
            outcomes[eid] = StepOutcome(eid, "", end_reason=reason, error=f"{why}; episode {eid} lost its env")  # type: ignore[arg-type]
        self._replace(index, why)
        queue.clear()

    # -------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Close every actor's envs (5 s grace), kill the actors; stop a Ray this pool started. Idempotent."""
        if ray.is_initialized():
            self._hear()  # what the envs logged last (while stepping; close's own are not waited for)
        actors, self._actors = self._actors, {}
        self._live, self._lost, self._finished, self._labels, self._ended = {}, {}, set(), {}, {}
        if actors and ray.is_initialized():
            refs = [a.handle.close.remote() for a in actors.values()]
            ray.wait(refs, num_returns=len(refs), timeout=5.0)
            for a in actors.values():
                _kill(a.handle)
        said, self._said = self._said, None
        if said is not None and ray.is_initialized():
            with contextlib.suppress(Exception):
                said.shutdown()
        if self._shares_owned:
            _OWNED.users -= 1
            if _OWNED.users <= 0:
                _OWNED.started, _OWNED.users = False, 0
                sweeper, _OWNED.sweeper = _OWNED.sweeper, None
                try:
                    ray.shutdown()
                finally:
                    if sweeper is not None:  # Ray stopped its own processes: nothing is left to sweep
                        sweeper.stop()
        self._connected = self._shares_owned = False


def _kill(handle: Any) -> None:
    """Kill an actor for good (no restart); one that is already gone is fine."""
    try:
        ray.kill(handle, no_restart=True)
    except Exception:  # noqa: BLE001 - already gone: nothing left to kill
        pass


def _step_outcome(data: dict[str, Any]) -> StepOutcome:
    return StepOutcome(**data)
