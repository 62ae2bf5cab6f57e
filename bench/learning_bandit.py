"""Does training move the policy? GRPO and PPO on Bandit, several seeds, tiny model, CPU.

Bandit (spec 13.3): two arms with symbolic names; the high-risk arm pays 1.0 with probability
0.25 (mean 0.25), the low-risk arm 0.1. ``train/bandit/success`` is the rate of episodes that
picked the better (high-risk) arm; invalid replies count as not picking it. The tiny model is
first warm-started once (random legal arms in the reply format, no oracle) and every run starts
from that folder, so the runs differ only in algorithm and seed.

Every step records two clocks: the wall seconds since training started and the run process's
CPU seconds (``time.process_time()``). With ``--threads 1`` the CPU clock is what an unloaded
single-thread run would take, so it is the fair clock on a shared machine; ``--budget-cpu-min``
stops a run once its CPU clock passes the budget.

Writes ``bench/results/<name>.png`` (pick-better-arm and valid-reply rate against CPU minutes,
mean ± std over seeds, one panel row per algorithm label) and ``bench/results/<name>.md``
(command line, per-seed table, mean ± std table).

    python bench/learning_bandit.py --steps 12 --seeds 0 1 --algos grpo ppo
    python bench/learning_bandit.py --algos grpo ppo --set-for grpo algo_config.estimator_config.norm_adv_by_std=false \\
        --budget-cpu-min 10 --threads 1 --jobs 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"

from ragen_core import hookimpl  # noqa: E402 - after the sys.path insert

GOAL, HOLD = 0.9, 0.85


def common(args: argparse.Namespace) -> list[str]:
    return [
        f"env={args.env}", f"rollout.env_groups={args.groups}", f"rollout.group_size={args.group_size}",
        f"sampling.train.max_new_tokens={args.new_tokens}", f"sampling.val.max_new_tokens={args.new_tokens}",
        f"optim.lr={args.lr}", f"optim.critic_lr={args.lr}", f"optim.mini_batch_size={args.groups * args.group_size}",
        f"optim.micro_batch_size={args.micro}", "test_freq=0", "save_freq=0", "progress=false", *args.set,
    ]


def warm_model(args: argparse.Namespace, work: Path) -> str:
    from ragen_core.config import load_config
    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer.config import RunConfig
    from ragen_core.trainer.warmstart import cache_folder, save_cached, warm_start

    base = next(iter(args.bases.values()), None)
    cfg = load_config(RunConfig, [], common(args) + [f"warm_start.episodes={args.warm_episodes}", f"warm_start.epochs={args.warm_epochs}",
                                                     f"warm_start.cache_dir={args.cache}"], base=base)
    model, tok = load_model_and_tokenizer("tiny")
    warm = warm_start(cfg, model, tok)
    folder = cache_folder(cfg)
    if not (folder / "config.json").is_file():  # a shipped policy used as it is is not cached: save it for the runs
        save_cached(folder, warm, tok, getattr(warm, "ragen_warm_start", {}), stale=False)  # the warm start's own (atomic) cache writer
    return str(folder)


class _Clock:
    """Trainer observer: stamps wall and CPU seconds on every step; stops at the CPU budget."""

    def __init__(self, trainer: Any, budget_cpu_s: float, budget_wall_s: float = 0.0) -> None:
        self.trainer = trainer
        self.budget = budget_cpu_s
        self.budget_wall = budget_wall_s
        self.t0 = time.time()
        self.c0 = time.process_time()

    @hookimpl
    def ragen_on_train_start(self, config: Any, run_dir: Any, context: Any) -> None:
        self.t0 = time.time()
        self.c0 = time.process_time()

    @hookimpl
    def ragen_on_step_end(self, metrics: dict[str, float], step: int, context: Any) -> None:
        metrics["bench/wall_s"] = time.time() - self.t0
        metrics["bench/cpu_s"] = time.process_time() - self.c0
        if self.budget > 0 and metrics["bench/cpu_s"] >= self.budget and self.trainer.stop_reason is None:
            self.trainer.stop_reason = "bench/cpu_budget"
        if self.budget_wall > 0 and metrics["bench/wall_s"] >= self.budget_wall and self.trainer.stop_reason is None:
            self.trainer.stop_reason = "bench/wall_budget"


def _label(spec: str) -> tuple[str, str]:
    """``label=algo`` or ``algo`` -> ``(label, algo)``."""
    label, _, algo = spec.partition("=")
    return (label, algo) if algo else (label, label)


def one_run(args: argparse.Namespace, spec: str, seed: int, model: str, work: Path) -> list[dict]:
    import torch

    from ragen_core.config import load_config
    from ragen_core.trainer.config import RunConfig
    from ragen_core.trainer.trainer import Trainer

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.env == "toy-corridor":
        from ragen_core.testing.toy_env import register_toy_env

        register_toy_env()
    label, algo = _label(spec)
    extra = [kv for lab, *kvs in (args.set_for or []) if lab in (label, algo) for kv in kvs]
    cfg = load_config(RunConfig, [], common(args) + [f"algo={algo}", f"steps={args.steps}", f"seed={10000 + 1000 * seed}",
                                                     f"model={model}", "warm_start.enabled=false",
                                                     f"run_dir={work / f'{label}-{seed}'}", *extra], base=args.bases.get(label))
    trainer = Trainer(cfg)
    trainer.setup()
    clock = _Clock(trainer, args.budget_cpu_min * 60.0, args.budget_wall_min * 60.0)
    trainer.pm.register(clock, name="bench-clock")
    return trainer.train()


def apply_recipes(args: argparse.Namespace) -> None:
    """``--recipe``: each named env recipe is one run label; its settings are the runs' base.

    The recipes' shape (groups, group size, reply tokens, lr, micro-batch, steps, warm start)
    is copied into the matching flags, so the report prints what ran and ``common`` repeats it.
    """
    from ragen_core import registry
    from ragen_core.config import load_config
    from ragen_core.trainer.config import RunConfig

    args.bases = {}
    if not args.recipe:
        return
    spec = registry.get_spec("env", args.env)
    shapes, algos = set(), []
    for name in args.recipe:
        base = spec.recipe(name)  # type: ignore[attr-defined]
        cfg = load_config(RunConfig, base=base)
        args.bases[name] = base
        algos.append(f"{name}={cfg.algo}")
        shapes.add((cfg.rollout.env_groups, cfg.rollout.group_size, cfg.sampling.train.max_new_tokens, cfg.optim.lr, cfg.optim.critic_lr,
                    cfg.optim.micro_batch_size, cfg.optim.mini_batch_size, cfg.steps, cfg.warm_start.episodes, cfg.warm_start.epochs,
                    cfg.sampling.train.temperature))
    if len(shapes) != 1:
        raise SystemExit("--recipe: the recipes differ in batch shape, lr, steps, warm start or temperature; bench them one call each")
    (args.groups, args.group_size, args.new_tokens, args.lr, critic_lr, args.micro, mini, steps, args.warm_episodes, args.warm_epochs,
     temperature) = shapes.pop()
    if critic_lr != args.lr or mini != args.groups * args.group_size:
        raise SystemExit("--recipe: this bench runs critic_lr = lr and one optimiser step per rollout; the recipe differs")
    args.steps = args.steps or steps
    args.algos = algos
    args.set = [f"sampling.train.temperature={temperature}", *args.set]


def _train_temperature(args: argparse.Namespace) -> str:
    """The training sampling temperature the runs used (the RunConfig default unless overridden)."""
    for item in args.set:
        if item.startswith("sampling.train.temperature="):
            return item.split("=", 1)[1]
    from ragen_core.trainer.config import RunConfig

    return str(RunConfig().sampling.train.temperature)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="bandit", help="bandit, or toy-corridor as a fast sanity check")
    parser.add_argument("--set", nargs="*", default=[], metavar="key=value", help="extra RunConfig overrides for every run")
    parser.add_argument("--set-for", nargs="+", action="append", metavar="ALGO key=value",
                        help="overrides for one algorithm label only, e.g. --set-for ppo optim.critic_lr=1e-3 (repeatable)")
    parser.add_argument("--algos", nargs="+", default=["grpo", "ppo"], help="algorithm names, or label=algorithm")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--recipe", nargs="+", default=[], metavar="NAME",
                        help="env recipes to bench, one run label each "
                             "(their settings replace --algos/--groups/--group-size/--new-tokens/--lr/--micro/warm-start flags)")
    parser.add_argument("--steps", type=int, default=0, help="step budget per run (default 12, or the recipe's steps)")
    parser.add_argument("--budget-cpu-min", type=float, default=0.0, help="stop a run after this many CPU minutes (0 = no limit)")
    parser.add_argument("--budget-wall-min", type=float, default=0.0,
                        help="stop a run after this many wall minutes of training (0 = no limit); the plot then uses wall time "
                             "(meant for runs that have the machine to themselves, e.g. --jobs 1 --threads 2)")
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--micro", type=int, default=8, help="optim.micro_batch_size")
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--warm-episodes", type=int, default=64)
    parser.add_argument("--warm-epochs", type=int, default=4)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--warm-model", default="", help="an already warm-started model folder (skips the warm start)")
    parser.add_argument("--name", default="", help="results file stem (default learning_<env>)")
    parser.add_argument("--jobs", type=int, default=1, help="training runs in parallel processes (each with --threads threads)")
    parser.add_argument("--cache", default=str(ROOT / ".ragen_cache" / "warmstart"))
    parser.add_argument("--work", default=str(ROOT / "runs" / "learning_bandit"))
    parser.add_argument("--simulate", action="store_true", help="only print the advantage-bias table (no training)")
    parser.add_argument("--from-runs", action="store_true",
                        help="no training: rebuild the report from the metrics.jsonl files of a previous call with the same arguments")
    args = parser.parse_args()
    args.argv = [a for a in sys.argv[1:] if a != "--from-runs"]
    if args.simulate:
        simulate(args)
        return
    apply_recipes(args)
    args.steps = args.steps or 12
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.env == "toy-corridor":
        from ragen_core.testing.toy_env import register_toy_env

        register_toy_env()
    work = Path(args.work) / (args.name or args.env)
    t0 = time.time()
    model = args.warm_model or warm_model(args, work)
    warm_seconds = time.time() - t0
    from ragen_core.trainer.warmstart import read_meta

    meta = read_meta(model)
    print(f"warm start ready ({warm_seconds:.0f} s): valid rate {meta.get('valid_rate')}")
    jobs = [(spec, seed) for spec in args.algos for seed in args.seeds]
    results: dict[tuple[str, int], list[dict]] = {}
    if args.from_runs:
        import json

        for spec, seed in jobs:
            path = work / f"{_label(spec)[0]}-{seed}" / "metrics.jsonl"
            results[(spec, seed)] = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        t0 = time.time() - max(run[-1].get("bench/wall_s", 0.0) for run in results.values())
    elif args.jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=args.jobs, max_tasks_per_child=1) as pool:
            futures = {job: pool.submit(one_run, args, job[0], job[1], model, work) for job in jobs}
            for job, fut in futures.items():
                results[job] = fut.result()
                print(f"{job[0]} seed {job[1]} done ({time.time() - t0:.0f} s)", flush=True)
    else:
        for job in jobs:
            results[job] = one_run(args, job[0], job[1], model, work)
            print(f"{job[0]} seed {job[1]} done ({time.time() - t0:.0f} s)", flush=True)
    curves: dict[str, list[list[dict]]] = {}
    for spec, seed in jobs:
        curves.setdefault(_label(spec)[0], []).append(results[(spec, seed)])
    report(args, curves, time.time() - t0, meta=meta, warm_seconds=warm_seconds)


# ---------------------------------------------------------------------------------------------- simulation


def expected_gradient(estimator: str, p: float, n: int, *, valid: float = 0.8, penalty: float = -0.1, groups: int = 20000,
                      batch_groups: int = 8, seed: int = 0) -> tuple[float, float, float, float]:
    """Expected policy-gradient push on the arm choice and on the format, with the project's estimators.

    A two-logit abstraction of the policy: each of ``n`` group members replies validly with
    probability ``valid`` and, when valid, picks the high-risk arm with probability ``p``; rewards
    are the env's (high arm 1.0 w.p. 0.25 else 0, low arm 0.1, invalid 0 + ``penalty``). The
    real estimator plugin turns the scores into advantages (one trained token per episode; PPO's
    ``gae`` gets a perfect critic, the expected score of the group's policy, and whitens over
    ``batch_groups`` groups). Per group, the REINFORCE push on the high-arm logit is
    ``Σ_valid A_i (1[high_i] − p)`` and on the format logit ``Σ A_i (1[valid_i] − valid)``.

    Returns:
        ``(choice mean, choice std, format mean, format std)`` per group.
    """
    import torch

    from ragen_core import registry

    name, cfg = {"grpo": ("grpo", None), "drgrpo": ("drgrpo", None), "gae": ("gae", None)}[estimator]
    est = registry.make("estimator", name, cfg)
    g = torch.Generator().manual_seed(seed)
    rows = batch_groups * n
    pushes, fmt = [], []
    for _ in range(max(1, groups // batch_groups)):
        ok = torch.rand(rows, generator=g) < valid
        high = torch.rand(rows, generator=g) < p
        hit = torch.rand(rows, generator=g) < 0.25
        score = torch.where(ok, torch.where(high, hit.float(), torch.full((rows,), 0.1)), torch.full((rows,), penalty))
        gid = torch.arange(rows) // n
        values = None
        if name == "gae":
            expect = valid * (p * 0.25 + (1 - p) * 0.1) + (1 - valid) * penalty
            values = torch.full((rows, 1), expect)
        from ragen_core.interfaces.advantage import AdvantageInputs

        out = est(AdvantageInputs(token_rewards=score.unsqueeze(1), response_mask=torch.ones(rows, 1), group_ids=gid, values=values,
                                  episode_ids=torch.arange(rows)))
        a = out.advantages[:, 0]
        push = (a * ok.float() * (high.float() - p)).view(batch_groups, n).sum(1)
        pushes.append(push)
        fmt.append((a * (ok.float() - valid)).view(batch_groups, n).sum(1))
    c, f = torch.cat(pushes), torch.cat(fmt)
    return float(c.mean()), float(c.std()), float(f.mean()), float(f.std())


def simulate(args: argparse.Namespace) -> None:
    """Table of :func:`expected_gradient` for the estimators, group sizes and high-arm rates."""
    lines = [
        "# Bandit: which way do the advantages push the arm choice?", "",
        "Command: `python bench/learning_bandit.py --simulate`", "",
        "Monte-Carlo with the project's estimator plugins (20000 groups per cell; see `expected_gradient` in "
        "`bench/learning_bandit.py`): members reply validly with probability 0.8 and pick the high-risk arm with "
        "probability p; rewards are Bandit's (high arm 1.0 w.p. 0.25, low arm 0.1, invalid -0.1). 'choice push' = "
        "E[Σ A_i (1[high_i] − p)] per group (> 0: towards the better arm), ± its std per group; 'SNR' = mean/std "
        "per group; 'format push' likewise for the valid-reply logit. `gae` = PPO's estimator with a perfect critic, "
        "whitened over 8 groups.", "",
        "| estimator | group size | p | choice push | SNR | format push |", "|---|---|---|---|---|---|",
    ]
    for name in ("grpo", "drgrpo", "gae"):
        for n in (8, 16, 32):
            for p in (0.2, 0.5, 0.8):
                cm, cs, fm, fs = expected_gradient(name, p, n, groups=4000 if n == 32 else 20000 if n == 8 else 8000)
                lines.append(f"| {name} | {n} | {p} | {cm:+.3f} ± {cs:.3f} | {cm / cs:+.2f} | {fm:+.3f} ± {fs:.3f} |")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "learning_bandit_advantage_bias.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


# ---------------------------------------------------------------------------------------------- report


def _tag(curves: dict[str, list[list[dict]]], env: str) -> str:
    """Metric tag of the env (the preset name when one is set): ``train/<tag>/success``."""
    for runs in curves.values():
        for run in runs:
            for key in run[0] if run else {}:
                if key.startswith("train/") and key.endswith("/success") and key != "train/success":
                    return key.split("/")[1]
    return env


def _avg(rows: list[dict], key: str) -> float:
    return statistics.fmean(r.get(key, 0.0) or 0.0 for r in rows) if rows else float("nan")


def _spread(values: list[float], fmt: str = ".3f") -> str:
    values = [v for v in values if v == v]
    if not values:
        return "—"
    return f"{statistics.fmean(values):{fmt}} ± {statistics.stdev(values):{fmt}}" if len(values) > 1 else f"{values[0]:{fmt}}"


def reached(rates: list[float], goal: float = GOAL, hold: float = HOLD) -> int | None:
    """Index of the first step whose rate is >= ``goal`` and stays >= ``hold`` for the rest of the run."""
    for i, r in enumerate(rates):
        if r >= goal and all(x >= hold for x in rates[i + 1 :]):
            return i
    return None


def _interp(xs: list[float], ys: list[float], grid: list[float]) -> list[float]:
    """Linear interpolation of ``ys(xs)`` on ``grid``; NaN outside ``[xs[0], xs[-1]]``."""
    import numpy as np

    out = np.interp(grid, xs, ys)
    return [float(v) if xs[0] <= g <= xs[-1] else float("nan") for v, g in zip(out, grid)]


def plot(path: Path, curves: dict[str, list[list[dict]]], keys: list[tuple[str, str]], tag: str, args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    wall = bool(getattr(args, "budget_wall_min", 0))
    clock = "bench/wall_s" if wall else "bench/cpu_s"
    xlabel = (f"wall minutes of the run ({args.jobs} run(s) at once, {args.threads or 'default'} torch thread(s))" if wall
              else "CPU minutes of the run (1 torch thread)")
    fig, axes = plt.subplots(1, len(keys), figsize=(5.5 * len(keys), 4.2))
    for ax, (key, title) in zip(np.atleast_1d(axes), keys):
        for label, runs in curves.items():
            xs_all = [[r.get(clock, 0.0) / 60 for r in run] for run in runs]
            end = max(x[-1] for x in xs_all)
            grid = list(np.linspace(0, end, 200))
            ys = np.array([_interp([0.0] + x, [run[0].get(key, 0.0)] + [r.get(key, 0.0) or 0.0 for r in run], grid)
                           for x, run in zip(xs_all, runs)])
            mean = np.nanmean(ys, axis=0)
            std = np.nanstd(ys, axis=0, ddof=1) if len(runs) > 1 else np.zeros_like(mean)
            line = ax.plot(grid, mean, label=f"{label} (mean of {len(runs)} seeds)")[0]
            ax.fill_between(grid, mean - std, mean + std, color=line.get_color(), alpha=0.2)
            for x, run in zip(xs_all, runs):
                ax.plot(x, [r.get(key, 0.0) or 0.0 for r in run], color=line.get_color(), alpha=0.25, lw=0.8)
        if "success" in key:
            ax.axhline(GOAL, color="grey", ls="--", lw=0.8)
        ax.set_title(f"{tag}: {title}")
        ax.set_xlabel(xlabel)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def report(args: argparse.Namespace, curves: dict[str, list[list[dict]]], seconds: float, *, meta: dict | None = None,
           warm_seconds: float = 0.0) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    env = args.env
    tag = _tag(curves, env)
    name = args.name or ("learning_bandit" if env == "bandit" else f"learning_{env.replace('-', '_')}")
    what = "pick-better-arm rate" if env == "bandit" else "success rate"
    succ, valid = f"train/{tag}/success", f"train/{tag}/action_is_valid"
    plot(RESULTS / f"{name}.png", curves, [(succ, what), (valid, "valid reply rate")], tag, args)
    k = 3
    meta = meta or {}
    rate = meta.get("valid_rate")
    argv = " ".join(a if a and all(c.isalnum() or c in "-_=./:+" for c in a) else repr(a) for a in getattr(args, "argv", []))
    lines = [
        f"# Learning on {tag} (tiny model, CPU)", "",
        f"Command: `python bench/learning_bandit.py {argv}`", "",
        (f"Warm start: {warm_seconds / 60:.1f} min (0 = cached), format-valid rate after it "
         f"{rate:.3f} at the training temperature ({meta.get('rounds')} round(s), target {meta.get('target_valid_rate')})."
         if isinstance(rate, float) else "Warm start: no record."), "",
        f"{args.groups} groups x {args.group_size} episodes per step; budget {args.steps} steps"
        + (f" or {args.budget_cpu_min:g} CPU minutes per run" if args.budget_cpu_min else "")
        + (f" or {args.budget_wall_min:g} wall minutes per run" if args.budget_wall_min else "")
        + f"; total wall time {seconds / 60:.1f} min ({args.jobs} run(s) in parallel, --threads {args.threads}). "
        + ("Pick-better-arm rate = share of the step's training episodes (sampled at the training temperature, "
           f"{_train_temperature(args)}) choosing the high-risk arm "
           "(invalid replies count as misses); " if env == "bandit" else "Success = episode reached the goal; ")
        + f"first/last = mean over the first/last {k} steps; 'reached' = first step whose {what} is >= {GOAL} and stays "
        f">= {HOLD} for the rest of the run, with the run's CPU and wall minutes at that step.", "",
        f"| run | seed | steps | {what}, first | {what}, last | valid, first | valid, last | reached: step "
        "| CPU min | wall min | run CPU min | run wall min |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    summary = []
    for label, runs in curves.items():
        firsts, lasts, vlast, hit_cpu, hit_wall, hits = [], [], [], [], [], 0
        for seed, run in zip(args.seeds, runs):
            rates = [r.get(succ) or 0.0 for r in run]
            hit = reached(rates)
            firsts.append(_avg(run[:k], succ))
            lasts.append(_avg(run[-k:], succ))
            vlast.append(_avg(run[-k:], valid))
            if hit is not None:
                hits += 1
                hit_cpu.append(run[hit].get("bench/cpu_s", float("nan")) / 60)
                hit_wall.append(run[hit].get("bench/wall_s", float("nan")) / 60)
                at = f"{hit + 1} | {hit_cpu[-1]:.1f} | {hit_wall[-1]:.1f}"
            else:
                at = "never | — | —"
            lines.append(
                f"| {label} | {seed} | {len(run)} | {firsts[-1]:.3f} | {lasts[-1]:.3f} | {_avg(run[:k], valid):.3f} | {vlast[-1]:.3f} | {at} | "
                f"{run[-1].get('bench/cpu_s', 0) / 60:.1f} | {run[-1].get('bench/wall_s', 0) / 60:.1f} |"
            )
        summary.append(f"| {label} | {len(runs)} | {_spread(firsts)} | {_spread(lasts)} | {_spread(vlast)} | {hits}/{len(runs)} | "
                       f"{_spread(hit_cpu, '.1f')} | {_spread(hit_wall, '.1f')} |")
    lines += ["", "Mean ± sample std over seeds ('reached' minutes over the seeds that reached the goal):", "",
              f"| run | seeds | {what}, first | {what}, last | valid, last | reached | reached, CPU min | reached, wall min |",
              "|---|---|---|---|---|---|---|---|", *summary]
    lines += ["", f"![curves]({name}.png)", ""]
    (RESULTS / f"{name}.md").write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
