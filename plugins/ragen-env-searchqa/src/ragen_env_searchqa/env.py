"""SearchQA: answer a question by searching a corpus through a retrieval server.

Behaviour (spec 13.8): ``reset`` picks question ``seed mod n`` of the mode's split (validation
reads held-out questions, not training ones) and shows ``Question: ...`` and the action list.
Each ``step`` counts one step, then:

* ``search[q]``: the top ``max_search_results`` passages for ``q``, formatted and truncated;
  reward 0; the episode ends (unanswered) when the step budget is used up (``max_steps``, or
  fewer when the rollout's turns and action caps stop it sooner: :attr:`SearchQAEnv.step_budget`);
* ``finish[a]``: ``a`` is scored against the gold answers (EM, else F1 above a threshold, see
  :mod:`ragen_env_searchqa.answer`); the episode ends;
* any other non-empty text: an answer attempt in free form; the answer is extracted from it
  (:func:`~ragen_env_searchqa.answer.extract_answer`), scored, and the episode ends, with
  ``action_is_valid`` False (with ``free_form_answers=False`` it is an invalid action instead, as an
  empty one is);
* an empty action (or ``search[]``): invalid, reward 0, not done unless the budget is used up.

The server: with ``server.url`` the env only connects. Otherwise the first *search* (not
``reset``: the trainer resets and closes one env just to measure the prompt, and that must not
start and stop a server that may take minutes to load its index) acquires the process's shared
``ragen-searchqa serve`` child through :mod:`ragen_core.services` (started on a
free loopback port, ready when ``/ready`` answers), and ``close`` releases it (the last release
stops it). When the child dies under a search, the service helper restarts it and the episode
in flight ends at once with reward 0 and ``info["error"]`` saying why; the other episodes and
the run go on. Timeouts and HTTP errors become the observation, as in the reference, and the
episode continues.
"""

from __future__ import annotations

import sys
from typing import Any

from ragen_core.errors import ConfigError, EnvError
from ragen_core.interfaces.env import Env, StepResult
from ragen_core.services import ServiceHandle, ServiceSpec, acquire
from ragen_env_searchqa.answer import extract_answer, parse_action, score_answer
from ragen_env_searchqa.client import MAX_QUERY_CHARS, Document, RetrievalError, client_for, format_results, mock_documents
from ragen_env_searchqa.config import SearchQAConfig
from ragen_env_searchqa.data import Question, load_splits

AVAILABLE = "Available actions: search[<query>], finish[<answer>]"


def server_spec(config: SearchQAConfig) -> ServiceSpec:
    """How the env launches its retrieval server for ``config`` (equal configs share one child)."""
    r = config.retriever
    argv = [sys.executable, "-m", "ragen_env_searchqa.server", "serve", "--host", "{host}", "--port", "{port}",
            "--backend", r.backend, "--model", r.model]
    if r.index:
        argv += ["--index", r.index]
    elif r.corpus:
        argv += ["--corpus", r.corpus]
    else:
        argv += ["--world-seed", str(config.world_seed), "--world-size", str(config.world_size)]
    if r.cache_dir:
        argv += ["--cache-dir", r.cache_dir]
    if r.device:
        argv += ["--device", r.device]
    if not r.batching:
        argv.append("--no-batching")
    return ServiceSpec(name="searchqa-retriever", command=tuple(argv), health_path="/ready")


class SearchQAEnv(Env):
    """Question answering with search (see module docstring)."""

    config_class = SearchQAConfig
    config: SearchQAConfig
    #: The answer's exact match and F1 (reported by the answering action only: an episode that never answers adds nothing).
    info_metrics = {"exact_match": "last", "f1": "last"}

    def __init__(self, config: SearchQAConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self._question: Question | None = None
        self._steps = 0
        self._done = False
        self._observation = ""
        self._service: ServiceHandle | None = None

    # ------------------------------------------------------------------ episode
    def reset(self, seed: int, *, member: int = 0, mode: str = "train") -> str:
        """Question ``seed mod n`` of the split of ``mode``; ``member`` is ignored (nothing is random)."""
        c = self.config
        splits = load_splits(c.dataset, c.val_dataset, c.val_fraction, c.max_instances, c.cache_dir, c.world_seed, c.world_size)
        questions = splits.val if mode == "val" else splits.train
        if not questions:  # a hash holdout keeps one question on each side: only a separate val_dataset can empty training
            source = c.dataset or "the built-in world"
            raise ConfigError(f"no training questions: every question of {source} is also in env_config.val_dataset {c.val_dataset}",
                              ["name another training source, or a validation source that is not the training one"])
        self.seed = seed
        self._question = questions[seed % len(questions)]
        self._steps = 0
        self._done = False
        self._observation = f"Question: {self._question.question}\n{AVAILABLE}"
        return self._observation

    def step(self, action: str) -> StepResult:
        """One search, answer or invalid action (see module docstring)."""
        question = self._require_reset()
        if self._done:
            return StepResult(self._observation, 0.0, True, {"success": False, "action_is_valid": False, "action_is_effective": False})
        parsed = parse_action(action)
        self._steps += 1
        out_of_steps = self._steps >= self.step_budget
        if parsed.kind == "answer" and not self.config.free_form_answers:
            return self._invalid("neither search[...] nor finish[...]", out_of_steps)
        if parsed.kind in ("finish", "answer"):
            answer = parsed.text if parsed.kind == "finish" else extract_answer(parsed.text)
            c = self.config
            score = score_answer(answer, question.answers, correct_reward=c.correct_reward,
                                 incorrect_reward=c.incorrect_reward, f1_threshold=c.f1_threshold)
            self._done = True
            self._observation = f"Your answer: {_shown(answer)}. Reward: {score.reward:.2f}"
            # the reference's rule (EM, or a paid partial answer), reading "paid" as F1 at the threshold: a positive
            # incorrect_reward made every wrong answer a success
            solved = score.exact or (score.f1 >= c.f1_threshold and score.reward > 0)
            info = {"success": solved, "action_is_valid": parsed.kind == "finish",
                    "action_is_effective": True, "action_type": parsed.kind, "exact_match": score.exact, "f1": score.f1}
            return StepResult(self._observation, self.finite(score.reward), True, info)
        if parsed.kind == "empty" or not parsed.text:
            return self._invalid("empty search query" if parsed.kind == "search" else "empty action", out_of_steps)
        if len(parsed.text) > MAX_QUERY_CHARS:  # the server would refuse it: no search, and not a valid one
            return self._invalid(f"a search query of {len(parsed.text)} characters; at most {MAX_QUERY_CHARS}", out_of_steps)
        docs, failure = self._search(parsed.text)
        info: dict[str, Any] = {"success": False, "action_is_valid": True, "action_is_effective": isinstance(docs, list),
                                "action_type": "search"}
        if failure is not None:  # the server died under this search: the episode fails, the run goes on
            self._done = True
            self._observation = f"Search failed: {failure}. The episode ends."
            return StepResult(self._observation, 0.0, True, {**info, "error": failure})
        self._done = out_of_steps
        text = docs if isinstance(docs, str) else format_results(docs or [], self.config.max_total_chars, self.config.max_doc_chars)
        tail = ("Maximum number of searches reached without an answer." if out_of_steps else AVAILABLE)
        self._observation = f"Search results for '{_shown(parsed.text)}':\n{text}\n\n{tail}"
        return StepResult(self._observation, 0.0, self._done, info)

    def _invalid(self, what: str, out_of_steps: bool) -> StepResult:
        """An invalid action (``what`` is wrong with it): reward 0, the episode ends only when out of steps."""
        self._done = out_of_steps
        self._observation = f"Invalid action ({what}). {AVAILABLE}"
        return StepResult(self._observation, 0.0, self._done, {"success": False, "action_is_valid": False,
                                                             "action_is_effective": False, "action_type": "invalid"})

    # ------------------------------------------------------------------ server
    def _server(self) -> ServiceHandle:
        if self._service is None:
            spec = server_spec(self.config)
            if self.config.server.url is not None:  # any server with this API: ready when it accepts connections
                spec = spec.model_copy(update={"health_path": None})
            self._service = acquire(spec, self.config.server)
        return self._service

    def _search(self, query: str) -> tuple[list[Document] | str | None, str | None]:
        """(documents or error text, None), or (None, why the episode failed)."""
        if self.config.mock_mode:
            return mock_documents(query), None
        service = self._server()
        pid = service.pid
        url = service.ensure_ready()
        client = client_for(url, self.config.retrieval_timeout)
        try:
            return client.search(query, self.config.max_search_results), None
        except RetrievalError as e:
            if pid is None and not client.answered and e.not_this_api:
                # a server given by URL that has never answered a search, and says it has no such API:
                # the run would train on "Search failed" observations (it only accepted the connection)
                raise EnvError(f"env_config.server.url {url} is not a retrieval server: the first search got {e}",
                               ["point it at a retrieval server (POST /retrieve, see 'ragen-searchqa serve'), "
                                "or unset it to let RAGEN start one"]) from e
            # the child this search was addressed to is gone: a refused connection, or (restarted on the same port by
            # another episode) the new child's "503 still loading"; a plain HTTP error of a live child waits for nothing
            if service.died_since(pid, grace_s=1.0 if e.kind == "connection" else 0.0):
                service.ensure_ready()  # restart now (raises ServiceError past max_restarts)
                return None, f"the retrieval server died during the search and was restarted ({e})"
            if e.kind == "connection" and pid is None:  # a server given by URL: nothing here restarts it
                from ragen_core.services import why_unreachable

                gone = why_unreachable(url, timeout=3.0)
                if gone is not None:  # not a passing glitch: every later search would fail the same way
                    raise EnvError(f"the retrieval server at env_config.server.url {url} no longer answers ({gone})",
                                   ["restart it there, then continue the run with 'ragen run --resume RUN_DIR'; or unset "
                                    "env_config.server.url to let RAGEN start one"]) from e
            if e.kind == "timeout":
                return f"Search timed out: {e}.", None
            if e.kind == "connection":
                return f"Search failed: connection error: {e}.", None
            return f"Search failed: {e}.", None

    # ------------------------------------------------------------------ views
    def render(self) -> str:
        self._require_reset()
        return self._observation

    @property
    def step_budget(self) -> int:
        """Actions an episode may take: ``max_steps``, or fewer when the rollout stops sooner
        (:attr:`~ragen_core.interfaces.env.EnvConfig.action_budget`: 5 turns of one action by default)."""
        return min(self.config.max_steps, self.config.action_budget)

    def instruction(self) -> str:
        c = self.config
        return (
            "You are a search agent answering questions by searching a document collection. Each turn, do "
            + ("one action" if c.max_actions_per_turn == 1 else f"up to {c.max_actions_per_turn} actions separated by ||")
            + f": search[your query] returns the {c.max_search_results} most relevant documents, and "
            "finish[your answer] submits your final answer (short: a name, place, year or phrase), which ends the "
            f"episode. You have {self.step_budget} actions in all. Think first inside <think></think>, then give the action "
            "inside <answer></answer>. Examples: <think>I need to know who founded the company.</think>"
            "<answer>search[Brenthal Works founder]</answer> and later <think>The documents say it was Oren Valdris."
            "</think><answer>finish[Oren Valdris]</answer>"
        )

    @property
    def question(self) -> Question:
        """The current question and its gold answers."""
        return self._require_reset()

    # ------------------------------------------------------------------ solvers
    def oracle_actions(self) -> list[str] | None:
        """Search the question, then give the first gold answer."""
        q = self._require_reset()
        return None if self._done else [f"search[{q.question}]", f"finish[{q.answers[0]}]"]

    def random_action(self, rng: Any) -> str | None:
        """A search for a few words of the question, or a one-word guess."""
        words = self._require_reset().question.rstrip("?").split()
        picks = [words[int(i)] for i in rng.integers(len(words), size=min(3, len(words)))]
        return f"search[{' '.join(picks)}]" if rng.random() < 0.7 else f"finish[{picks[0]}]"

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Release this env's share of the server (the last release stops it). Idempotent."""
        if self._service is not None:
            self._service.release()
            self._service = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_service"] = None  # a pickled copy acquires its own share when it first searches
        return state

    def _require_reset(self) -> Question:
        if self._question is None:
            raise EnvError("SearchQAEnv.step/render called before reset(seed)")
        return self._question


def _shown(text: str, limit: int = 200) -> str:
    """``text`` as the observation repeats it: a long query or answer is cut (the results are capped
    at max_total_chars; a 100k-character query was echoed whole)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"
