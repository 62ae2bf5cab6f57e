"""The retrieval server killed mid-rollout: the helper restarts it, the episodes whose search hit
the dead server end failed with a reason, and the rollout goes on with the new server."""

from __future__ import annotations

import os
import signal
import time

from ragen_env_searchqa import client as client_mod

from ragen_core.interfaces.env_pool import EnvRef, ResetRequest, StepRequest
from ragen_core.rollout.env_pool import LocalEnvPool

N = 6


def _kill_and_wait(pid: int) -> None:
    """SIGKILL ``pid`` and wait until it is dead (a zombie its parent has not reaped yet, or gone)."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        except FileNotFoundError:
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not die")


def test_server_killed_mid_rollout(tmp_path, monkeypatch):
    env = EnvRef(name="searchqa", config={"retriever": {"cache_dir": str(tmp_path)}, "server": {"backoff_s": 0.05}})
    pool = LocalEnvPool(env)
    assert pool.threads > 1  # async_step: a turn's episodes step together
    try:
        pool.reset([ResetRequest(i, seed=i) for i in range(N)])
        outcomes = pool.step([StepRequest(i, ("search[city river founded]",)) for i in range(N)])
        assert all(o.observation.startswith("Search results for") and not o.done for o in outcomes)
        service = pool.instance(0)._service
        first_pid = service.pid

        # the server dies while the turn's searches are in flight: after the env checked it, before the request. The
        # first batch holds the service's lock from the kill until its request has met the dead server: on a busy
        # machine another episode's ensure_ready() restarted the child (same port) first, and that batch then reached
        # the new one, so no episode failed (helper-69 reproduced it by delaying that thread)
        real_send = client_mod.BatchingClient._send
        armed = [True]
        restart_lock = service._service.lock

        def dying_send(self, batch):
            if armed[0]:
                armed[0] = False
                with restart_lock:
                    _kill_and_wait(first_pid)
                    return real_send(self, batch)
            return real_send(self, batch)

        monkeypatch.setattr(client_mod.BatchingClient, "_send", dying_send)
        outcomes = pool.step([StepRequest(i, ("search[company founder]",)) for i in range(N)])
        failed = [o for o in outcomes if o.done]
        assert failed  # at least the batch that met the dead server
        for o in failed:
            assert o.reward == 0.0 and o.info["success"] is False
            assert "retrieval server died during the search and was restarted" in o.info["error"]
            assert o.observation.startswith("Search failed:")
        for o in outcomes:  # a search sent after the restart reaches the new server normally
            assert o in failed or "[Document 1]" in o.observation
        assert service.alive and service.pid != first_pid

        # the run goes on: new episodes search the restarted server
        pool.reset([ResetRequest(i, seed=10 + i) for i in range(N)])
        outcomes = pool.step([StepRequest(i, (f"search[{pool.instance(i).question.question}]",)) for i in range(N)])
        assert all(o.observation.startswith("Search results for") and "[Document 1]" in o.observation for o in outcomes)
    finally:
        pool.close()
    assert not service.alive  # the last env's close stopped the child


def test_a_search_that_meets_the_restarted_child_loading_ends_as_a_restart(tmp_path, monkeypatch):
    """Another episode restarted the dead child on the same port; this search, addressed before, got the new child's
    "503 still loading" and the episode went on with that as its search results (helper-69's walk)."""
    from ragen_env_searchqa.env import SearchQAEnv

    env = SearchQAEnv(retriever={"cache_dir": str(tmp_path)}, server={"backoff_s": 0.05})
    try:
        env.reset(0)
        assert env.step("search[city river founded]").observation.startswith("Search results for")
        service = env._service
        first_pid = service.pid

        def restarted_meanwhile(self, query, k):
            _kill_and_wait(first_pid)
            assert service.died_since(first_pid)  # (the helper's waiting thread reaps the child a moment later)
            service.ensure_ready()  # what another episode's search does first: restart it on the same port
            raise client_mod.RetrievalError("http", "HTTP 503: index is still loading", status=503)

        monkeypatch.setattr(client_mod.BatchingClient, "search", restarted_meanwhile)
        result = env.step("search[company founder]")
        assert result.done and result.reward == 0.0 and result.info["success"] is False
        assert result.info["error"].startswith("the retrieval server died during the search and was restarted (HTTP 503")
        assert service.alive and service.pid != first_pid
    finally:
        env.close()


def test_a_process_pool_starts_at_most_one_worker_and_server_per_core():
    """Each worker process starts its own retrieval server: the spec's resources.cpus had sized the
    process pool (and a local Ray) at 10 workers per core, each with its server and whole index."""
    from ragen_core.rollout.process_pool import ProcessEnvPool

    assert ProcessEnvPool(EnvRef(name="searchqa")).size <= (os.cpu_count() or 1)


def test_a_silent_server_costs_one_retrieval_timeout_not_two():
    """httpx's timeout is a TransportError too, so the one retry meant for a dropped pooled
    connection waited a second full timeout: each search of a silent server took 2x retrieval_timeout."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepts connections, never answers
    try:
        client = client_mod.BatchingClient(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout_s=1.0, window_s=0.0)
        start = time.monotonic()
        try:
            client.search("who", 3)
        except client_mod.RetrievalError as e:
            assert e.kind == "timeout"
        else:
            raise AssertionError("a silent server must time out")
        # one timeout (1 s) plus scheduling slack; two timeouts take at least 2 s
        assert time.monotonic() - start < 1.9 and client.requests == 1
        client.close()
    finally:
        listener.close()
