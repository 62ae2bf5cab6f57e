"""Every code block of README.md runs here.

Python blocks are executed. Bash blocks are split into commands, and every command must be
listed in :data:`COMMANDS` with how it is run: as written, with ``--print-config`` appended
(commands that would train for minutes: their flags, config files and overrides are still
resolved and validated), against a small run directory made once (``runs/<dir>`` in the README),
as part of the third-party-env walk-through (scaffold, install into a folder, list, play, test),
or skipped for a stated reason. A README command missing from the table fails the test, so the
table follows the README.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

RUN = "run as written"
PRINT_CONFIG = "run with --print-config appended: it would train for minutes"
ON_A_RUN = "run on a small run directory made by this test (runs/<dir>, step_30 -> its last step)"
WALKTHROUGH = "part of the third-party env walk-through (test_the_contributing_walkthrough_works)"

#: every command of the README's bash blocks -> how this test runs it
COMMANDS: dict[str, str] = {
    "make run": "skipped: sets up .venv and warm-starts and trains for many minutes (the quick start itself)",
    "make test": "skipped: runs this whole test suite",
    "ragen plugins": RUN,
    "ragen env play sokoban --preset CoordSokoban": RUN + " (stdin: q)",
    "ragen env play sudoku --preset TinySudoku --agent random": RUN,
    "ragen run --env bandit --algo grpo --steps 30": PRINT_CONFIG,
    "ragen run --env bandit --recipe learn": PRINT_CONFIG,
    "ragen run --env sudoku --filter snr-topp": PRINT_CONFIG,
    "ragen run --env frozenlake --algo ppo --config my.yaml rollout.group_size=8": PRINT_CONFIG + " (my.yaml: 'seed: 1')",
    "ragen run --resume runs/<dir> --steps 60": ON_A_RUN + " with --print-config",
    "ragen eval --env bandit --model runs/<dir>/checkpoints/step_30 --out trajectories.jsonl": ON_A_RUN,
    "ragen eval --env sudoku --groups 4": RUN,
    "ragen plot runs/<dir>": ON_A_RUN,
    "ragen diagnose runs/<dir>": ON_A_RUN,
    "ragen init-env mygrid": WALKTHROUGH,
    "pip install -e ragen-env-mygrid": WALKTHROUGH + " (installed with --target into a folder, not into this environment)",
    "ragen env play mygrid": WALKTHROUGH,
    "pytest ragen-env-mygrid/tests": WALKTHROUGH,
    "ragen run --env bandit --recipe learn-ppo": PRINT_CONFIG,
    "ragen run --env frozenlake --recipe learn-one-lake": PRINT_CONFIG,
    "ragen run --env bandit --recipe learn --print-config": RUN,
    "ragen warm-policy show": RUN,
    "ragen warm-policy build --name tiny-warm --envs countdown deepcoder frozenlake metamathqa searchqa sokoban sudoku webshop "
    "--init-from tiny-warm --replace": "skipped: trains the shipped policy for about 25 minutes (its mechanism: tests/test_warm_policy.py)",
    "ragen warm-policy build --name bandit --envs bandit --episodes 256 --epochs 4 --out my-bandit": "skipped: trains for about 25 minutes",
    "ragen warm-policy build --name frozenlake --envs frozenlake --episodes 64 --init-from tiny-warm --delta-rank 8 --replace":
        "skipped: trains for about 2 minutes and would overwrite the shipped delta (its mechanism: tests/test_warm_policy_delta.py)",
}


def blocks(lang: str) -> list[str]:
    """The README's fenced code blocks of language ``lang``, in order."""
    return [body for tag, body in re.findall(r"^```(\w*)\n(.*?)^```", README.read_text(encoding="utf-8"), re.S | re.M) if tag == lang]


def bash_commands() -> list[str]:
    """Every command line of the bash blocks, comments and surrounding blanks removed."""
    out = []
    for body in blocks("bash"):
        for line in body.splitlines():
            command = line.split("  #")[0].split(" # ")[0].strip()
            if command and not command.startswith("#"):
                out.append(command)
    return out


def ragen(*args: str, cwd: Path, stdin: str = "", env: dict[str, str] | None = None, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "import sys; from ragen_core.cli.main import main; sys.exit(main())", *args],
                          capture_output=True, text=True, input=stdin, cwd=cwd, timeout=timeout,
                          env=dict(os.environ, RAGEN_CACHE=str(cwd / "cache"), **(env or {})))


def test_every_readme_command_is_listed_here():
    found = bash_commands()
    assert len(found) >= 15  # the parser finds the blocks at all
    assert sorted(set(found) - set(COMMANDS)) == [], "a README command this test does not run: add it to COMMANDS"
    assert sorted(set(COMMANDS) - set(found)) == [], "COMMANDS lists commands the README no longer has"


@pytest.mark.parametrize("command", [c for c, how in COMMANDS.items() if how.startswith((RUN, PRINT_CONFIG))])
def test_cheap_readme_commands_run(command, tmp_path):
    args = shlex.split(command)[1:]
    if COMMANDS[command].startswith(PRINT_CONFIG):
        args.append("--print-config")
    (tmp_path / "my.yaml").write_text("seed: 1\n", encoding="utf-8")
    done = ragen(*args, cwd=tmp_path, stdin="q\n")
    assert done.returncode == 0, done.stderr[-2000:]
    if "--print-config" in args:
        assert "env:" in done.stdout and "rollout:" in done.stdout


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    """``runs/<dir>`` of the README: one Bandit step with a checkpoint (no warm start, tiny batch)."""
    cwd = tmp_path_factory.mktemp("readme-run")
    done = ragen("run", "--env", "bandit", "--steps", "1", "--run-dir", "runs/r", "warm_start.enabled=false", "rollout.env_groups=2",
                 "rollout.group_size=2", "test_freq=0", "save_freq=1", "val_groups=2", "progress=false", cwd=cwd, env={"RAGEN_PLOTS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert (cwd / "runs" / "r" / "plots" / "summary.png").is_file()  # the run drew its own plots
    return cwd


@pytest.mark.slow
@pytest.mark.parametrize("command", [c for c, how in COMMANDS.items() if how.startswith(ON_A_RUN)])
def test_readme_commands_on_a_run_directory(command, small_run):
    args = [a.replace("runs/<dir>", "runs/r").replace("step_30", "step_1") for a in shlex.split(command)[1:]]
    if "with --print-config" in COMMANDS[command]:
        args.append("--print-config")
    done = ragen(*args, cwd=small_run)
    assert done.returncode == 0, done.stderr[-2000:]


def test_python_blocks_run():
    pytest.importorskip("gymnasium")  # the Programmatic API block ends with the Gymnasium adapter
    from ragen_core import registry

    ran = 0
    try:
        for body in blocks("python"):
            if "mygrid" in body:
                continue  # needs the scaffolded package: test_the_contributing_walkthrough_works runs it
            exec(compile(body, str(README), "exec"), {"__name__": "readme_block"})  # noqa: S102 - this repository's own README
            ran += 1
    finally:
        registry.unregister("env", "my-sokoban")  # the block registers it in-process
    assert ran >= 1


@pytest.mark.slow
def test_the_contributing_walkthrough_works(tmp_path):
    """``ragen init-env mygrid``; install; ``ragen plugins`` lists it; play; its tests pass, the README's decorator block too."""
    assert ragen("init-env", "mygrid", cwd=tmp_path).returncode == 0
    pkg = tmp_path / "ragen-env-mygrid"
    site = tmp_path / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-q", "--target", str(site), str(pkg)],
                             capture_output=True, text=True, timeout=300)
    if install.returncode != 0 and "hatchling" in install.stderr:
        pytest.skip("hatchling is not installed in this environment")
    assert install.returncode == 0, install.stderr
    env = {"PYTHONPATH": str(site) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    listed = ragen("plugins", cwd=tmp_path, env=env)
    assert any(line.split()[:3] == ["env", "mygrid", "ragen-env-mygrid"] for line in listed.stdout.splitlines()), listed.stdout
    played = ragen("env", "play", "mygrid", cwd=tmp_path, env=env, stdin="Right\nq\n")
    assert played.returncode == 0, played.stderr
    readme_tests = [body for body in blocks("python") if "mygrid" in body]
    assert readme_tests  # the README's decorator example
    for i, body in enumerate(readme_tests):
        (pkg / "tests" / f"test_readme_block_{i}.py").write_text(body, encoding="utf-8")
    pytest_cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(pkg / "tests")]
    run_env = dict(os.environ, **env)
    tests = subprocess.run([*pytest_cmd, "-k", "readme_block"], capture_output=True, text=True, timeout=600, env=run_env, cwd=tmp_path)
    assert tests.returncode == 0, tests.stdout[-2000:]
    from ragen_core.testing.env_checks import ENV_CHECKS

    passed = re.search(r"(\d+) passed", tests.stdout)
    assert passed and int(passed.group(1)) == 2 * len(ENV_CHECKS)  # every check for both presets: the decorator collected them
    everything = subprocess.run(pytest_cmd, capture_output=True, text=True, timeout=600, env=run_env, cwd=tmp_path)
    assert everything.returncode == 0 and "failed" not in everything.stdout, everything.stdout[-2000:]
