"""The ``process`` env pool: env instances in worker processes, spoken to in plain data.

:class:`ProcessEnvPool` starts up to ``workers`` processes (``spawn`` context, so nothing of the
parent's state leaks in) the first time a reset gives them an episode. Episode id ``i`` lives in
worker ``i % workers``; each worker keeps one env instance per episode-id slot, built *inside the
worker* from the :class:`~ragen_core.interfaces.env_pool.EnvRef` (name + config JSON + preset, or
its import-string factory) -- env objects are never pickled. Requests go out and starts/outcomes
come back as dicts over a pipe; all workers of a turn step their episodes at the same time.

Failures stay local to the episodes they hit:

* a worker that dies (killed, segfault, out of memory) while stepping: its unanswered episodes
  come back ``end_reason="failed"``, the error naming the worker, its pid and exit code;
* a worker whose current step takes longer than ``step_timeout_s``: it is killed, that episode
  comes back ``"timeout"`` and the worker's other unanswered episodes ``"failed"``.

Either way the worker is replaced (a fresh process at the next reset) and the rollout goes on; an
episode of the replaced worker that was not stepped in that call comes back ``"failed"`` at its
next step. An episode an outcome ended (``done``, ``"timeout"``, ``"failed"``) is not stepped
again: a step for it is refused, as in every pool.
An env that raises or returns a non-finite reward is a bug, as in the local pool:
:class:`~ragen_core.errors.EnvError` with env, seed and member. ``close`` stops every worker.

Envs must be *installed* (or given by an importable ``EnvRef.factory``): a worker sees the
entry points of the environment, not envs registered in the parent process with
``registry.register``; the pool refuses those with a one-line error. Workers are spawned, so a
script that uses this pool runs its code under ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import threading
import time
import weakref
from multiprocessing.connection import Connection, wait
from typing import Any

from pydantic import Field

from ragen_core.errors import ConfigError, EnvError
from ragen_core.interfaces.env_pool import (
    EnvPool,
    EnvPoolConfig,
    EnvRef,
    EpisodeStart,
    ResetRequest,
    StepOutcome,
    StepRequest,
)


class ProcessPoolConfig(EnvPoolConfig):
    """Settings of the ``process`` pool."""

    workers: int = Field(default=0, ge=0)
    """Worker processes; 0 = one per ``resources.cpus`` of the env's spec on this machine's cores."""


# --------------------------------------------------------------------------- worker side
def _worker_main(conn: Connection, env_json: str) -> None:
    """Loop of one worker: build envs per episode slot, answer resets and steps with dicts."""
    from ragen_core.rollout.env_pool import WorkerLogs, reset_slots, run_actions
    from ragen_core.services import die_with_parent

    die_with_parent(os.getppid())  # a trainer killed with SIGKILL closes no pipe: a worker mid-step would go on under init
    # Ctrl-C in a terminal reaches the whole foreground process group: the trainer finishes its step
    # on it, so the workers must keep serving that step (they end when the parent closes the pipe).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sending = threading.Lock()  # replies (main thread) and log records (any thread) share the pipe

    def send(message: tuple[Any, ...]) -> None:
        with sending:
            conn.send(message)

    def forward(records: list[tuple[int, str, str, str | None]]) -> None:  # at once: a worker that then dies keeps them
        try:
            send(("log", None, records))
        except (OSError, ValueError):  # the trainer closed the pipe: nobody is left to tell
            pass

    logs = WorkerLogs.install()
    logs.forward = forward
    forward([])  # "started": a worker that dies later is not mistaken for one that could not start (the spawn hint)
    ref = EnvRef.model_validate_json(env_json)
    envs: dict[int, Any] = {}
    labels: dict[int, str] = {}
    while True:
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError):
            break
        if kind == "close":
            break
        try:
            if kind == "reset":
                send(("started", reset_slots(ref, envs, labels, payload, lambda: _build(ref)), logs.take()))
            elif kind == "step":
                for data in payload:
                    eid = data["episode_id"]
                    out = run_actions(envs[eid], eid, tuple(data["actions"]), label=labels[eid])
                    send(("outcome", dataclasses.asdict(out), logs.take()))
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it there
            send(("error", str(exc).splitlines()[0] if str(exc) else type(exc).__name__, logs.take()))
    for env in envs.values():
        env.close()


def _build(ref: EnvRef) -> Any:
    try:
        return ref.build()
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise EnvError(f"process pool worker (pid {os.getpid()}) could not build env {ref.name!r}: {first}") from exc


# --------------------------------------------------------------------------- parent side
@dataclasses.dataclass
class _Worker:
    index: int
    process: Any
    conn: Connection
    answered: bool = False
    """It sent a message: it got past start-up (a spawned worker that fails to import never does)."""

    def describe(self) -> str:
        return f"process pool worker {self.index} (pid {self.process.pid})"


def _stop(worker: _Worker, grace_s: float = 5.0) -> None:
    """Ask a worker to exit; kill it if it does not within ``grace_s``."""
    try:
        worker.conn.send(("close", None))
    except (OSError, ValueError):
        pass
    worker.process.join(grace_s)
    if worker.process.is_alive():
        worker.process.kill()
        worker.process.join(grace_s)
    worker.conn.close()


def _kill(worker: _Worker) -> None:
    worker.process.kill()
    worker.process.join(5.0)
    worker.conn.close()


def _stop_all(workers: dict[int, _Worker]) -> None:
    for w in list(workers.values()):
        _stop(w)
    workers.clear()


class ProcessEnvPool(EnvPool):
    """Env instances in worker processes (see the module docstring).

    Args:
        env: The env to build in every worker (installed name, or an import-string factory).
        config: Pool settings (:class:`ProcessPoolConfig`).

    Raises:
        ConfigError: ``env`` names an env registered in this process only.
    """

    config_class = ProcessPoolConfig
    config: ProcessPoolConfig

    def __init__(self, env: EnvRef, config: EnvPoolConfig | None = None, **overrides: Any) -> None:
        super().__init__(env, config, **overrides)
        cpus = self._env_cpus()
        self.size = self.config.workers or max(1, int((os.cpu_count() or 1) // cpus))
        self._context = multiprocessing.get_context("spawn")
        self._workers: dict[int, _Worker] = {}
        self._live: dict[int, int] = {}
        """Running episode id -> index of the worker holding its env."""
        self._lost: dict[int, str] = {}
        """Episode id -> why its env is gone (its worker was replaced): stepped again, it comes back failed."""
        self._labels: dict[int, str] = {}
        """Episode id -> how errors name it (env, seed, member), from the last reset."""
        self._ended: dict[int, tuple[str, str]] = {}
        """Episode id -> (label, how) of each episode an outcome ended: a step for it is refused."""
        self._finalizer = weakref.finalize(self, _stop_all, self._workers)

    def _env_cpus(self) -> float:
        """``resources.cpus`` of the env's spec (1 for a factory); refuses in-process-only envs."""
        if self.env.factory is not None:
            return 1.0
        from ragen_core import registry

        if registry.find("env", self.env.name).spec is not None:
            raise ConfigError(
                f"env {self.env.name!r} is registered in this process only; "
                "the process pool builds envs in worker processes from installed entry points",
                ["install the env's distribution (pip install -e <its folder>), give EnvRef(factory='module:Class'), or use the local pool"],
            )
        return float(registry.get_spec("env", self.env.name).resources.cpus)

    def worker_pids(self) -> dict[int, int]:
        """Worker index -> pid of every running worker."""
        return {k: w.process.pid for k, w in self._workers.items()}

    def _worker(self, index: int) -> _Worker:
        """The worker ``index``, started (or restarted after a failure) when needed."""
        w = self._workers.get(index)
        if w is not None and w.process.is_alive():
            return w
        if w is not None:
            _kill(w)
        parent, child = self._context.Pipe()
        process = self._context.Process(target=_worker_main, args=(child, self.env.model_dump_json()), name=f"ragen-env-{index}", daemon=True)
        process.start()
        child.close()
        self._workers[index] = w = _Worker(index, process, parent)
        return w

    def _replace(self, w: _Worker, why: str) -> None:
        """Kill ``w`` and mark every episode it held as lost (a fresh worker starts on the next reset)."""
        _kill(w)
        del self._workers[w.index]
        for eid, k in list(self._live.items()):
            if k == w.index:
                del self._live[eid]
                self._lost[eid] = why

    # ------------------------------------------------------------------ reset
    def reset(self, requests: list[ResetRequest]) -> list[EpisodeStart]:
        from ragen_core.rollout.env_pool import check_resets, episode_labels

        check_resets(requests)
        self._live, self._lost, self._ended = {}, {}, {}
        self._labels = episode_labels(self.env, requests)
        groups: dict[int, list[ResetRequest]] = {}
        for r in requests:
            groups.setdefault(r.episode_id % self.size, []).append(r)
        starts: dict[int, EpisodeStart] = {}
        errors: list[tuple[str, list[str]]] = []
        # A worker that dies while resetting (killed, its env's process crashed) is replaced and its
        # episodes reset once more on the fresh worker, as the Ray pool does with an actor.
        dead = self._reset_groups(groups, starts, errors, retry_dead=True)
        if dead:
            self._reset_groups({k: groups[k] for k in dead}, starts, errors, retry_dead=False)
        if errors:
            raise EnvError(errors[0][0], errors[0][1])
        return [starts[r.episode_id] for r in requests]

    def _reset_groups(self, groups: dict[int, list[ResetRequest]], starts: dict[int, EpisodeStart], errors: list[tuple[str, list[str]]],
                      *, retry_dead: bool) -> list[int]:
        """Reset each worker's group of episodes (starting missing workers); returns the workers
        that died doing it when ``retry_dead`` (else their deaths are ``errors``)."""
        from ragen_core.rollout.env_pool import episode_start_from_dict, reset_timeout_error

        pending = {}
        for index, reqs in groups.items():
            w = self._worker(index)
            w.conn.send(("reset", [dataclasses.asdict(r) for r in reqs]))
            pending[index] = w
        dead: list[int] = []
        deadline = None if self.config.reset_timeout_s is None else time.monotonic() + self.config.reset_timeout_s
        while pending:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = set(wait([w.conn for w in pending.values()] + [w.process.sentinel for w in pending.values()], timeout))
            if not ready:
                for index, w in list(pending.items()):
                    self._replace(w, "reset timed out")
                    errors.append((reset_timeout_error(self.env, groups[index], self.config.reset_timeout_s, w.describe()), []))
                break
            for index, w in list(pending.items()):
                if w.conn not in ready and w.process.sentinel not in ready:
                    continue
                message = _recv(w)
                if message is not None and message[0] == "log":  # logged (and replayed here); the reply is still to come
                    continue
                del pending[index]
                if message is None:
                    self._replace(w, "died while resetting")
                    if retry_dead:
                        dead.append(index)
                        continue
                    # a spawned worker that could not even start: the script re-ran its pool at import
                    hints = [] if w.answered else ["a script that starts a process pool must run it under "
                                                   "'if __name__ == \"__main__\":' (workers are spawned)"]
                    errors.append((f"{w.describe()} died with exit code {w.process.exitcode} while resetting", hints))
                elif message[0] == "error":
                    errors.append((message[1], []))
                else:
                    for data in message[1]:
                        starts[data["episode_id"]] = episode_start_from_dict(data)
                        self._live[data["episode_id"]] = index
        return dead

    # ------------------------------------------------------------------- step
    def step(self, requests: list[StepRequest]) -> list[StepOutcome]:
        from ragen_core.rollout.env_pool import check_steps, note_ended

        check_steps(requests, self._live.keys() | self._lost.keys(), self._ended)
        outcomes: dict[int, StepOutcome] = {}
        queues: dict[int, list[int]] = {}
        """Worker index -> its episodes still to answer, in the order it steps them."""
        for r in requests:
            if r.episode_id in self._lost:
                outcomes[r.episode_id] = StepOutcome(r.episode_id, "", end_reason="failed", error=self._lost[r.episode_id])
            else:
                queues.setdefault(self._live[r.episode_id], []).append(r.episode_id)
        actions = {r.episode_id: list(r.actions) for r in requests}
        heard: dict[int, float] = {}
        for index, eids in list(queues.items()):
            w = self._workers[index]
            try:
                w.conn.send(("step", [{"episode_id": e, "actions": actions[e]} for e in eids]))
            except OSError:  # it died since the last call
                w.process.join(5.0)
                self._fail(w, eids, outcomes, f"{w.describe()} died with exit code {w.process.exitcode}", "failed")
                del queues[index]
            heard[index] = time.monotonic()
        errors: list[str] = []
        limit = self.config.step_timeout_s
        while queues:
            workers = [self._workers[k] for k in queues]
            timeout = None if limit is None else max(0.0, min(heard[k] for k in queues) + limit - time.monotonic())
            ready = set(wait([w.conn for w in workers] + [w.process.sentinel for w in workers], timeout))
            for w in workers:
                eids = queues[w.index]
                if w.conn in ready or w.process.sentinel in ready:
                    message = _recv(w)
                    if message is not None and message[0] == "log":  # replayed here; not an answer (the step's clock runs on)
                        continue
                    heard[w.index] = time.monotonic()
                    if message is None:
                        self._fail(w, eids, outcomes, f"{w.describe()} died with exit code {w.process.exitcode}", "failed")
                    elif message[0] == "error":  # the worker stopped its batch at an env bug
                        errors.append(message[1])
                        eids.clear()
                    else:
                        out = StepOutcome(**message[1])
                        outcomes[out.episode_id] = out
                        eids.remove(out.episode_id)
                elif limit is not None and time.monotonic() - heard[w.index] >= limit:
                    why = f"{w.describe()} did not finish episode {eids[0]}'s step within step_timeout_s={limit:g} and was replaced"
                    self._fail(w, eids, outcomes, why, "timeout")
                if not eids:
                    del queues[w.index]
        if errors:
            raise EnvError(errors[0])
        replies = [outcomes[r.episode_id] for r in requests]
        note_ended(self._ended, replies, self._labels.__getitem__)
        return replies

    def _fail(self, w: _Worker, eids: list[int], outcomes: dict[int, StepOutcome], why: str, first_reason: str) -> None:
        """End ``eids`` (the worker's unanswered episodes, the current one first) and replace ``w``."""
        for n, eid in enumerate(eids):
            reason = first_reason if n == 0 else "failed"
            outcomes[eid] = StepOutcome(eid, "", end_reason=reason, error=f"{why}; episode {eid} lost its env")  # type: ignore[arg-type]
        self._replace(w, why)
        eids.clear()

    # -------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Stop every worker (asks first, kills after 5 s). Idempotent."""
        _stop_all(self._workers)
        self._live, self._lost, self._labels, self._ended = {}, {}, {}, {}


def _recv(w: _Worker) -> tuple[str, Any] | None:
    """The worker's next message (waiting for it), or None when the worker is gone. The warnings
    the worker logged are logged here (:class:`~ragen_core.rollout.env_pool.WorkerLogs`): sent as
    they happen, as a ``("log", None)`` message the callers skip, so a worker that dies keeps them."""
    from ragen_core.rollout.env_pool import replay_worker_logs

    try:
        kind, payload, logs = w.conn.recv()
    except (EOFError, OSError):
        w.process.join(5.0)  # reap it, so its exit code is known
        return None
    w.answered = True
    replay_worker_logs(logs, w.describe())
    return kind, payload

