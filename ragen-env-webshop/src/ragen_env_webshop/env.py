"""WebShop: read an instruction, search the shop, open a product, pick its options, buy.

Behaviour (spec 13.6): ``reset(seed, mode=...)`` picks the goal through the mode's split and
shows the goal's instruction text, ``.``, the guidance lines and the available actions. Each
step applies ``search[...]`` or ``click[...]`` and shows the new page in simple-text form
(strings joined by `` [SEP] ``), ``.``, the guidance lines and the available actions. An invalid
action changes nothing. ``click[buy now]`` ends the episode with reward 1 when the WebShop
score is 1, else 0 (the score itself is ``info["raw_reward"]``); ``purchase_reward: score`` pays
the score instead. The reward is computed here from the score either shop returns, so both agree.

Where the shop runs: in this process (``shop: inprocess``, the default), or in the HTTP shop
server (``shop: server``), started as a child by :mod:`ragen_core.services` and shared by every
env of the process, or reached at ``server.url``. Both give the same episodes: the server
exposes the same stateless engine (:mod:`ragen_env_webshop.engine`).
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from typing import Any

from ragen_core.errors import EnvError
from ragen_core.interfaces.env import Env, StepResult
from ragen_core.services import ServiceHandle, ServiceSpec, acquire
from ragen_env_webshop.config import WebShopConfig
from ragen_env_webshop.engine import SEP, Location, ShopEngine, engine_for, well_formed_action
from ragen_env_webshop.goals import Goal
from ragen_env_webshop.scoring import purchase_reward

GUIDANCE = (
    "Buy a product within {budget} actions.",
    "The product need not match the description perfectly, so do not be too strict when choosing.",
    "Do not put size or colour in your search words; pick them on the product page.",
    "Search at most 2 times.",
    "Prefer clicking a product on the current page over going to the next page.",
    "Go to the next page of results at most twice, and go back a page only rarely.",
    "With fewer than 3 actions left, buy the first product you have seen.",
    "On a product page click the size, then the colour, one at a time, then buy now; with 1 action left just buy now.",
    "Never click description.",
)
INSTRUCTION = (
    "You are browsing an online shop. Follow the instruction and buy a product that is close to the "
    "description. You search, read the results, open a product, choose its options such as size and "
    "colour, and buy it. Use only actions from the list of available actions given with each page. "
    "For example, begin by searching for the described item: <answer>search[blue cotton t-shirt]</answer>, "
    "then open a result with <answer>click[b0abcdef12]</answer>. Valid answers are search[<keywords>] "
    "and click[<clickable>]."
)
EXPERT_INSTRUCTION = "You are an expert autonomous agent in WebShop: buy the product the instruction describes."


def shop_service(config: WebShopConfig) -> ServiceSpec:
    """How to start the shop server for this config (same catalog, goals and paging)."""
    settings = json.dumps({"catalog": config.catalog.model_dump(mode="json"), "limit_goals": config.limit_goals,
                           "top_k": config.results_top_k, "per_page": config.results_per_page}, sort_keys=True)
    return ServiceSpec(name="webshop", command=(sys.executable, "-m", "ragen_env_webshop.server", "--host", "{host}",
                                                "--port", "{port}", "--settings", settings), health_path="/health")


#: No proxy: the shop is on loopback or at the user's URL, never behind ``http_proxy``.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class _HttpShop:
    """The engine's calls, made over HTTP to a running shop server."""

    def __init__(self, config: WebShopConfig) -> None:
        self.handle: ServiceHandle = acquire(shop_service(config), config.server)
        self.timeout = config.request_timeout_s
        self.given_url = config.server.url is not None

    def _call(self, path: str, body: dict[str, Any] | None = None, *, again: bool = True) -> dict[str, Any]:
        """One request. Every request is a pure function of its body (the location travels with
        it), so one that failed because the server the helper started died meanwhile is sent once
        more to the restarted server instead of failing the run."""
        pid = self.handle.pid
        url = self.handle.ensure_ready() + path
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
        try:
            with _OPENER.open(req, timeout=self.timeout) as resp:
                result: dict[str, Any] = json.loads(resp.read())
                return result
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")[:200]
            hint = ("is server.url a WebShop server of the same catalog? (GET /api/info)" if self.given_url
                    else f"the shop server RAGEN started failed on this request: its log {self.handle.log_path} says why")
            raise EnvError(f"the WebShop server at {url} answered HTTP {e.code}: {detail}", [hint]) from None
        except (OSError, ValueError) as e:
            if again and isinstance(e, OSError) and self.handle.died_since(pid):
                return self._call(path, body, again=False)  # ensure_ready restarts it (and says so)
            raise EnvError(f"no answer from the WebShop server at {url} ({e})",
                           ["see the server's log; raise request_timeout_s if it is only slow"]) from None

    def reset(self, seed: int, mode: str) -> dict[str, Any]:
        return self._call("/api/reset", {"seed": seed, "mode": mode})

    def step(self, goal: int, loc: Location, action: str, max_query_chars: int) -> dict[str, Any]:
        return self._call("/api/step", {"goal": goal, "location": loc.to_json(), "action": action,
                                        "max_query_chars": max_query_chars})

    def oracle(self, goal: int, loc: Location) -> list[str]:
        return list(self._call("/api/oracle", {"goal": goal, "location": loc.to_json()})["actions"])

    def close(self) -> None:
        self.handle.release()


class WebShopEnv(Env):
    """The WebShop env (see module docstring)."""

    config_class = WebShopConfig
    config: WebShopConfig
    #: The WebShop score of the purchase (partial credit; 0 until one), logged as train/<tag>/info/raw_reward.
    info_metrics = {"raw_reward": "last"}

    def __init__(self, config: WebShopConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self._http: _HttpShop | None = None
        self._engine: ShopEngine | None = None
        self._goal: int | None = None
        self._loc = Location()
        self._view: dict[str, Any] = {}
        self._done = False
        self._at_reset = True
        self._instruction_text = ""

    # ------------------------------------------------------------------ backends
    @property
    def engine(self) -> ShopEngine:
        """The process-wide in-process shop of this config (looked up once per env)."""
        if self._engine is None:
            cfg = self.config
            self._engine = engine_for(cfg.catalog, limit_goals=cfg.limit_goals, top_k=cfg.results_top_k,
                                      per_page=cfg.results_per_page)
        return self._engine

    def _shop(self) -> _HttpShop:
        if self._http is None:
            self._http = _HttpShop(self.config)
        return self._http

    # ------------------------------------------------------------------ episode
    def reset(self, seed: int, *, member: int = 0, mode: str = "train") -> str:
        """Pick the goal of ``(seed, mode)``; ``member`` is ignored (the shop is deterministic)."""
        if self.config.shop == "server":
            answer = self._shop().reset(seed, mode)
            self._goal, view = int(answer["goal"]), answer["view"]
        else:
            self._goal = self.engine.goal_index(seed, mode)
            view = self.engine.start(self._goal).view()
        self.seed = seed
        self._loc = Location.from_json(view["location"])
        self._view = view
        self._done = False
        self._at_reset = True
        self._instruction_text = self.goal_text(view)
        return self.render()

    @staticmethod
    def goal_text(view: dict[str, Any]) -> str:
        """The goal instruction, read from the search page (``WebShop [SEP] Instruction: [SEP] <goal> [SEP] Search``)."""
        text = str(view["text"])
        parts = text.split(SEP)
        return parts[2] if len(parts) > 2 else text

    def step(self, action: str) -> StepResult:
        goal = self._require_reset()
        if self._done:
            return StepResult(self.render(), 0.0, True, self._info(False, False, 0.0, 0.0, self.well_formed(action)))
        if isinstance(action, str):  # a lone surrogate cannot travel as UTF-8 JSON: "?" in both shops, so they agree
            action = action.encode("utf-8", "replace").decode("utf-8")
        if self.config.shop == "server":
            view = self._shop().step(goal, self._loc, action if isinstance(action, str) else "", self.config.max_query_chars)
        else:
            view = self.engine.step(goal, self._loc, action, self.config.max_query_chars).view()
        effective = view["text"] != self._view["text"] if view["valid"] else False
        self._loc = Location.from_json(view["location"])
        self._view = view
        self._at_reset = self._at_reset and not view["valid"]  # an invalid action changes nothing, the view included
        self._done = bool(view["done"])
        raw = float(view["raw_reward"])
        reward = self.finite(purchase_reward(raw, self.config.purchase_reward) if self._done else 0.0)
        info = self._info(bool(view["valid"]), effective, reward, raw, self.well_formed(action))
        return StepResult(self.render(), reward, self._done, info)

    def well_formed(self, action: Any) -> bool:
        """Whether ``action`` has the shape of a WebShop action at all: ``search[...]`` with 1 to
        ``max_query_chars`` non-blank characters or ``click[...]`` naming something, whether or not
        the current page offers it (a search on a results page, a click on an item not listed)."""
        return well_formed_action(action, self.config.max_query_chars) is not None

    def _info(self, valid: bool, effective: bool, reward: float, raw: float, well_formed: bool) -> dict[str, Any]:
        # action_is_well_formed: the reply named an action of the right shape (search[..] / click[..]),
        # offered here or not; the warm start's gate measures the format by it (as Sudoku's placements)
        success = self._done and raw >= 1.0  # a perfect purchase, whatever purchase_reward pays
        return {"reward": reward, "raw_reward": raw, "action_is_valid": valid, "action_is_effective": effective,
                "action_is_well_formed": well_formed, "success": success, "success_purchase": self._done, "success_find": success,
                "end_of_page": bool(self._view.get("end_of_page", False))}

    # ------------------------------------------------------------------ views
    def available_actions(self) -> list[str]:
        """``search[<content>]`` where there is a search bar, then ``click[x]`` for each clickable."""
        self._require_reset()
        out = ["search[<content>]"] if self._view["search_bar"] else []
        return out + [f"click[{c}]" for c in self._view["clicks"]]

    def render(self) -> str:
        """Page text (the goal alone right after reset), ``.``, guidance lines, available actions."""
        self._require_reset()
        lines = [(self._instruction_text if self._at_reset else self._view["text"]) + "."]
        if self.config.show_guidance:
            lines += [line.format(budget=self.config.action_budget) for line in GUIDANCE]
        lines.append("Available actions: " + ", ".join(self.available_actions()))
        return "\n".join(lines)

    def instruction(self) -> str:
        return EXPERT_INSTRUCTION if self.config.expert_instruction else INSTRUCTION

    @property
    def goal(self) -> Goal:
        """The current :class:`~ragen_env_webshop.goals.Goal` (in-process shop only)."""
        return self.engine.goals[self._require_reset()]

    # ------------------------------------------------------------------ solvers
    def oracle_actions(self) -> list[str] | None:
        """Search the goal product's title, open it, pick the goal options, buy."""
        goal = self._require_reset()
        if self._done:
            return None
        if self.config.shop == "server":
            return self._shop().oracle(goal, self._loc) or None
        return self.engine.oracle_actions(goal, self._loc) or None

    def random_action(self, rng: Any) -> str | None:
        """A random available action; searches use words of the goal instruction."""
        actions = self.available_actions()
        if not actions:
            return None
        pick = actions[int(rng.integers(len(actions)))]
        if pick.startswith("search["):
            words = self._instruction_text.split()
            k = int(rng.integers(1, min(6, len(words)) + 1))
            start = int(rng.integers(0, len(words) - k + 1))
            return f"search[{' '.join(words[start:start + k])}]"
        return pick

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_http"] = None  # a pickled env acquires its own share of the server when it needs one
        state["_engine"] = None  # and finds (or builds) the shop of its config in its own process
        return state

    def _require_reset(self) -> int:
        if self._goal is None:
            raise EnvError("WebShopEnv.step/render called before reset(seed)")
        return self._goal
