"""Issue 13 item 9: every one of these inputs was a traceback with exit code 1; now each is one line
(plus ``hint:`` lines) on stderr and exit code 2, through the ``ragen`` command's ``main``.

Config values are refused before a model loads (the tests make loading a model fail loudly to
prove it); env misbehaviour is caught where the env is called, naming the env, its preset and
the seed. Runs here are one step of the tiny model on the in-process corridor env.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import Field, field_validator

from ragen_core import registry
from ragen_core.cli.main import main
from ragen_core.errors import PluginConfigError
from ragen_core.interfaces.env import StepResult
from ragen_core.seeding import _words, derive_seed, make_rng
from ragen_core.specs import EnvSpec
from ragen_core.testing.run_helpers import SCRIPTED_ENGINE_NAME, register_run_helpers
from ragen_core.testing.toy_env import TOY_ENV_NAME, CorridorConfig, CorridorEnv

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL = [
    "--steps", "1", "--no-progress", "env_config.length=3", "env_config.max_turns=1", "env_config.max_actions_per_turn=1",
    "rollout.env_groups=1", "rollout.group_size=2", "rollout.max_model_len=512", "sampling.train.max_new_tokens=32",
    "sampling.val.max_new_tokens=32", "optim.mini_batch_size=2", "optim.micro_batch_size=2", "test_freq=0", "save_freq=0",
    "warm_start.enabled=false",
]


def one_line(capsys, kind: str) -> str:
    """The error line of a failed command (``kind: ...``), checking the one-line form."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()  # before the error: transformers' weight-loading progress bar, warnings
    starts = [i for i, line in enumerate(lines) if line.startswith(f"{kind}:")]
    assert len(starts) == 1, err[-3000:]
    assert all(line.startswith("hint: ") for line in lines[starts[0] + 1:]), err[-3000:]
    assert "Traceback" not in err
    return lines[starts[0]]


@pytest.fixture
def no_model(monkeypatch):
    """Loading a model fails the test: the error must come before it."""
    import ragen_core.models as models

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the bad input was reported")

    monkeypatch.setattr(models, "load_model_and_tokenizer", refuse)


# ---------------------------------------------------------------------- config values
@pytest.mark.parametrize("override,field", [
    ("seed=18446744073709551616", "seed"),  # 2**64: wrapped to seed 0's task in every env
    ("seed=1180591620717411303424", "seed"),  # 2**70: torch.manual_seed overflowed
    ("seed_val=-3", "seed_val"),
    ("optim.betas=[2,3]", "optim.betas"),
    ("device=tpu9", "device"),
    ("rollout.format_penalty=-.inf", "rollout.format_penalty"),
    ("optim.lr=inf", "optim.lr"),
    ('warm_start.thoughts=["{b}"]', "warm_start.thoughts"),
])
def test_bad_config_values_are_one_line_before_a_model_loads(tmp_path, capsys, no_model, override, field):
    register_run_helpers()
    assert main(["run", "--env", TOY_ENV_NAME, "--run-dir", str(tmp_path / "run"), *SMALL, override]) == 2
    line = one_line(capsys, "ConfigError")
    assert f"{field}:" in line or f"{field}[" in line or field in line.split(":")[1], line
    assert not (tmp_path / "run").exists()  # refused before the run folder was claimed


def test_env_play_seed_beyond_64_bits_is_one_line(capsys):
    register_run_helpers()
    assert main(["env", "play", TOY_ENV_NAME, "--seed", str(2**64), "--agent", "random"]) == 2
    assert "--seed 18446744073709551616 is out of range" in one_line(capsys, "RagenError")


def test_seeds_beyond_64_bits_never_wrap():
    assert _words(10000) == [10000, 0] and _words(2**64 - 1) == [0xFFFFFFFF, 0xFFFFFFFF]  # existing seeds keep their streams
    with pytest.raises(ValueError, match="64-bit"):
        make_rng(2**64, "corridor")
    with pytest.raises(ValueError, match="64-bit"):
        derive_seed("rollout", "train", 2**70, 0, 1)


def test_seeds_take_the_range_their_message_states():
    """Env.reset(seed=-1) was taken and played seed 2**64 - 1's episode, while the message said 0 to 2**63 - 1."""
    from ragen_core.interfaces.engine import per_prompt_seeds
    from ragen_core.interfaces.env_pool import ResetRequest

    with pytest.raises(ValueError, match=r"use 0 to 2\*\*(\d+) - 1") as info:
        CorridorEnv().reset(seed=-1)
    top = 2 ** int(re.search(r"use 0 to 2\*\*(\d+) - 1", str(info.value)).group(1)) - 1
    assert CorridorEnv().reset(seed=0) and CorridorEnv().reset(seed=top)  # both ends of the stated range play
    for refused in (lambda: ResetRequest(0, -1), lambda: per_prompt_seeds([-1], 1), lambda: make_rng(-1, "corridor")):
        with pytest.raises(ValueError, match=r"-1 is not an unsigned 64-bit int \(use 0 to 2\*\*64 - 1\)"):
            refused()


def test_an_unavailable_cuda_device_is_one_line(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    register_run_helpers()
    assert main(["run", "--env", TOY_ENV_NAME, "--run-dir", str(tmp_path / "run"), *SMALL, "device=cuda"]) == 2
    assert "device=cuda: no cuda device is available" in one_line(capsys, "ConfigError")


# ---------------------------------------------------------------------- --model
@pytest.mark.parametrize("command", ["run", "eval"])
def test_model_that_is_a_folder_but_not_a_model_is_one_line(tmp_path, capsys, command):
    folder = tmp_path / "notamodel"
    folder.mkdir()
    (folder / "readme.txt").write_text("hello", encoding="utf-8")
    register_run_helpers()
    argv = ["--env", TOY_ENV_NAME, "--model", str(folder)]
    rest = ["--run-dir", str(tmp_path / "run"), *SMALL] if command == "run" else ["--groups", "1", "env_config.length=3"]
    assert main([command, *argv, *rest]) == 2
    line = one_line(capsys, "RagenError")
    assert str(folder) in line and "not a model folder" in line


def test_model_that_is_a_file_is_one_line(tmp_path, capsys):
    file = tmp_path / "weights.bin"
    file.write_bytes(b"\0" * 16)
    register_run_helpers()
    assert main(["run", "--env", TOY_ENV_NAME, "--model", str(file), "--run-dir", str(tmp_path / "run"), *SMALL]) == 2
    assert "it is a file" in one_line(capsys, "RagenError")


# ---------------------------------------------------------------------- plugins and envs that misbehave
class RaisingValidatorConfig(CorridorConfig):
    @field_validator("length")
    @classmethod
    def _explode(cls, value: int) -> int:
        if value == 4:
            raise RuntimeError("validator bug")
        return value


Fault = Literal["none", "reset", "reset_member_1", "reward_none", "reward_text", "reward_numeric_text", "observation_none",
                "three_values", "list_of_four"]


class MisbehavingConfig(CorridorConfig):
    fault: Fault = "none"


class MisbehavingEnv(CorridorEnv):
    """The corridor with one configurable fault."""

    config_class = MisbehavingConfig
    config: MisbehavingConfig

    def reset(self, seed: int, *, member: int = 0, mode: str = "train") -> str:
        if self.config.fault == "reset" or (self.config.fault == "reset_member_1" and member == 1):
            raise RuntimeError("the level file is missing")
        return super().reset(seed, member=member, mode=mode)

    def step(self, action: str) -> StepResult:
        obs, reward, done, info = super().step(action)
        fault = self.config.fault
        if fault == "three_values":  # forgot info: the pool used to fail unpacking it, with a hint about invalid moves
            return (obs, "1.0", done)  # type: ignore[return-value]
        if fault == "list_of_four":  # a list of the four values unpacks as well as a tuple: accepted
            return [obs, reward, done, info]  # type: ignore[return-value]
        bad: dict[str, Any] = {"reward_none": {"reward": None}, "reward_text": {"reward": "high"},
                               "reward_numeric_text": {"reward": "0.5"}, "observation_none": {"observation": None}}.get(fault, {})
        return StepResult(bad.get("observation", obs), bad.get("reward", reward), done, info)  # type: ignore[arg-type]


BAD_ENV = "trust-misbehaving"
VALIDATOR_ENV = "trust-raising-validator"


@pytest.fixture
def bad_envs():
    register_run_helpers()
    registry.register(EnvSpec(name=BAD_ENV, config_model=MisbehavingConfig, factory=f"{__name__}:MisbehavingEnv",
                              presets={"Broken": {"fault": "reset"}}))
    registry.register(EnvSpec(name=VALIDATOR_ENV, config_model=RaisingValidatorConfig, factory="ragen_core.testing.toy_env:CorridorEnv"))
    yield
    registry.unregister("env", BAD_ENV)
    registry.unregister("env", VALIDATOR_ENV)


def test_a_plugin_config_validator_that_raises_is_one_line(tmp_path, capsys, bad_envs, no_model):
    assert main(["run", "--env", VALIDATOR_ENV, "--run-dir", str(tmp_path / "run"), *SMALL, "env_config.length=4"]) == 2
    line = one_line(capsys, "PluginConfigError")
    assert f"env {VALIDATOR_ENV!r}" in line and "RuntimeError: validator bug" in line


@pytest.mark.parametrize("args,where,folder_left", [
    # the pre-flight reset, in set-up: the run folder it made is empty and removed (a rerun is not refused)
    (["--preset", "Broken"], "preset 'Broken' (seed 77, member 0) failed to reset", False),
    # a reset in the rollout's pool, in step 1: the folder holds the run's config (--overwrite to rerun)
    (["env_config.fault=reset_member_1"], "(seed 77, member 1) failed to reset", True),
])
def test_env_reset_raising_names_env_preset_and_seed(tmp_path, capsys, bad_envs, args, where, folder_left):
    assert main(["run", "--env", BAD_ENV, "--run-dir", str(tmp_path / "run"), *SMALL, "seed=77", *args]) == 2
    line = one_line(capsys, "EnvError")
    assert f"env {BAD_ENV!r}" in line and where in line and "RuntimeError: the level file is missing" in line
    assert (tmp_path / "run").exists() == folder_left


@pytest.mark.parametrize("fault,needle", [
    ("reward_none", "reward of type NoneType"),
    ("reward_text", "reward of type str ('high')"),
    ("reward_numeric_text", "reward of type str ('0.5')"),  # float("0.5") used to accept it silently
    ("observation_none", "observation of type NoneType"),  # used to reach the model as the text "None"
])
def test_env_returning_a_bad_reward_or_observation_is_one_line(tmp_path, capsys, bad_envs, fault, needle):
    argv = ["run", "--env", BAD_ENV, "--run-dir", str(tmp_path / "run"), *SMALL, "seed=5", f"env_config.fault={fault}",
            f"engine={SCRIPTED_ENGINE_NAME}"]  # the scripted reply 'Right' reaches step()
    assert main(argv) == 2
    line = one_line(capsys, "EnvError")
    assert f"env {BAD_ENV!r} (seed 5, member 0)" in line and needle in line and "for action 'Right'" in line


@pytest.mark.parametrize("args,needle", [
    (["--preset", "Broken"], "preset 'Broken' (seed 5, member 0) failed to reset: RuntimeError: the level file is missing"),
    (["--set", "fault=reward_text"], "(seed 5, member 0) returned a reward of type str ('high') for action"),
    (["--set", "fault=observation_none"], "(seed 5, member 0) returned an observation of type NoneType"),
    (["--set", "fault=three_values"], "(seed 5, member 0) returned a tuple of 3 (('_G_P_', '1.0', False)) from step() for action 'Right'"),
])
def test_env_play_checks_the_env_as_a_rollout_does(capsys, bad_envs, monkeypatch, args, needle):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("Right\nRight\nq\n"))
    assert main(["env", "play", BAD_ENV, "--seed", "5", *args]) == 2
    line = one_line(capsys, "EnvError")
    assert f"env {BAD_ENV!r}" in line and needle in line


# ---------------------------------------------------------------------- run directories and outputs
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, one_torch_thread):
    """A one-step run with a checkpoint (group_size=1: its warning is checked below)."""
    register_run_helpers()
    run_dir = tmp_path_factory.mktemp("trust-errors") / "run"
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(["run", "--env", TOY_ENV_NAME, "--run-dir", str(run_dir), *SMALL, "save_freq=1", "rollout.group_size=1"])
    assert rc == 0, err.getvalue()[-3000:]
    return run_dir, err.getvalue()


def test_the_group_size_one_warning_is_printed_by_the_run(finished_run):
    _, err = finished_run
    warnings = [line for line in err.splitlines() if line.startswith("warning: ")]
    repeated = [w for w in warnings if re.match(r"warning: \S+ is given 2 times", w)]  # SMALL's group_size and save_freq, given again
    assert len(repeated) == 2
    (warning,) = [w for w in warnings if w not in repeated]
    assert "rollout.group_size=1 with estimator 'grpo'" in warning and "raw episode score S" in warning


def _copy_run(run_dir: Path, target: Path) -> Path:
    import shutil

    shutil.copytree(run_dir, target)
    return target


@pytest.mark.parametrize("bad_row", ["[1, 2]", "\"text\"", "3"])
def test_a_metrics_row_that_is_not_an_object_is_one_line_in_plot_and_resume(tmp_path, capsys, finished_run, bad_row):
    run_dir = _copy_run(finished_run[0], tmp_path / "run")
    with (run_dir / "metrics.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(bad_row + "\n")
    assert main(["plot", str(run_dir)]) == 2
    assert "not an object" in one_line(capsys, "ConfigError")
    assert main(["run", "--resume", str(run_dir), "--no-progress", "steps=2"]) == 2
    assert "not an object" in one_line(capsys, "ConfigError")


@pytest.mark.parametrize("where", ["under_a_file", "a_folder"])
def test_eval_out_that_cannot_be_written_is_refused_before_evaluating(tmp_path, capsys, no_model, where):
    register_run_helpers()
    blocker = tmp_path / "blocker.txt"
    blocker.write_text("x", encoding="utf-8")
    out = blocker / "sub" / "val.jsonl" if where == "under_a_file" else tmp_path
    assert main(["eval", "--env", TOY_ENV_NAME, "--groups", "1", "--out", str(out), "env_config.length=3"]) == 2
    line = one_line(capsys, "ConfigError")
    assert str(out) in line


def test_eval_out_is_written_whole(tmp_path, capsys, finished_run):
    out = tmp_path / "deep" / "val.jsonl"
    step = sorted((finished_run[0] / "checkpoints").iterdir())[-1]
    assert main(["eval", "--env", TOY_ENV_NAME, "--model", str(step), "--groups", "2", "--out", str(out),
                 "env_config.length=3", "env_config.max_turns=1", "sampling.val.max_new_tokens=8", "rollout.max_model_len=512"]) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 2 and [p.name for p in out.parent.iterdir()] == ["val.jsonl"]  # no probe or temp file left



@pytest.mark.parametrize("target", ["metrics.jsonl", "config.yaml", "checkpoints/step_1/model.safetensors"])
def test_eval_out_onto_a_run_s_own_file_is_refused(tmp_path, capsys, finished_run, target):
    """`ragen eval --out RUN/metrics.jsonl` replaced the run's training history with trajectories (helper-62's walk)."""
    run = finished_run[0]
    out = run / target
    if not out.exists():
        pytest.skip(f"the finished toy run has no {target}")
    before = out.read_bytes()
    assert main(["eval", "--env", TOY_ENV_NAME, "--groups", "1", "--out", str(out), "env_config.length=3"]) == 2
    line = one_line(capsys, "ConfigError")
    assert f"is the run {run.resolve()}'s {target}, which a training run wrote: eval does not write over it" in line, line
    assert out.read_bytes() == before
    assert _run_file_free(run / "eval.jsonl")


def _run_file_free(path: Path) -> bool:
    from ragen_core.cli.evaluate import check_writable

    return check_writable(path) == path  # a new file beside the run's own is fine

class BadDefaultConfig(CorridorConfig):
    length: int = Field(default=1, ge=2)  # a plugin bug: its own default breaks its rule


def test_a_config_default_that_breaks_its_own_rule_is_named_when_the_env_is_made(tmp_path, capsys):
    spec = EnvSpec(name="trust-bad-default", config_model=BadDefaultConfig, factory="ragen_core.testing.toy_env:CorridorEnv")
    registry.register(spec)
    try:
        with pytest.raises(PluginConfigError, match=r"env 'trust-bad-default' from .*: the default of length fails its own validation"):
            registry.make_config("env", "trust-bad-default", {})
        registry.make_config("env", "trust-bad-default", {"length": 3})  # set explicitly: fine
        assert main(["env", "play", "trust-bad-default", "--agent", "random"]) == 2  # it printed a numpy traceback
        assert "the default of length fails its own validation" in one_line(capsys, "PluginConfigError")
    finally:
        registry.unregister("env", "trust-bad-default")


def test_a_step_returning_a_list_of_four_values_is_accepted(bad_envs):
    from ragen_core.rollout.env_pool import run_actions

    env = registry.make_env(BAD_ENV, fault="list_of_four")
    env.reset(5)
    outcome = run_actions(env, 0, ["Right"], label="t")
    assert outcome.executed == ["Right"] and isinstance(outcome.observation, str)
