"""The retrieval server killed mid-rollout: the helper restarts it, the episodes whose search hit
the dead server end failed with a reason, and the rollout goes on with the new server."""

from __future__ import annotations

import os
import signal

from ragen_core.interfaces.env_pool import EnvRef, ResetRequest, StepRequest
from ragen_core.rollout.env_pool import LocalEnvPool

N = 6


def test_server_killed_mid_rollout(tmp_path):
    env = EnvRef(name="searchqa", config={"retriever": {"cache_dir": str(tmp_path)}, "server": {"backoff_s": 0.05}})
    pool = LocalEnvPool(env)
    assert pool.threads > 1  # async_step: a turn's episodes step together
    try:
        pool.reset([ResetRequest(i, seed=i) for i in range(N)])
        service = pool.instance(0)._service
        first_pid = service.pid
        outcomes = pool.step([StepRequest(i, ("search[city river founded]",)) for i in range(N)])
        assert all(o.observation.startswith("Search results for") and not o.done for o in outcomes)

        os.kill(first_pid, signal.SIGKILL)
        outcomes = pool.step([StepRequest(i, ("search[company founder]",)) for i in range(N)])
        failed = [o for o in outcomes if o.done]
        # the searches that hit the dead server fail with the reason; a thread that reached the
        # service only after the restart searches the new server normally
        assert failed
        for o in failed:
            assert o.reward == 0.0 and o.info["success"] is False
            assert "retrieval server died during the search and was restarted" in o.info["error"]
            assert o.observation.startswith("Search failed:")
        for o in outcomes:
            assert o in failed or "[Document 1]" in o.observation
        assert service.alive and service.pid != first_pid

        # the run goes on: new episodes search the restarted server
        pool.reset([ResetRequest(i, seed=10 + i) for i in range(N)])
        outcomes = pool.step([StepRequest(i, (f"search[{pool.instance(i).question.question}]",)) for i in range(N)])
        assert all(o.observation.startswith("Search results for") and "[Document 1]" in o.observation for o in outcomes)
    finally:
        pool.close()
    assert not service.alive  # the last env's close stopped the child
