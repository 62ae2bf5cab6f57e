"""One rule for a success everywhere: an episode succeeds when it ends (``done``) with
``info['success']`` True, as the trainer counts ``train/success``. ``ragen env play`` and the
kit's oracle check counted a step's ``info['success']`` without ``done`` (helper-63's walk)."""

from __future__ import annotations

import io

import pytest

from ragen_core import registry
from ragen_core.cli.main import main
from ragen_core.interfaces.env import StepResult
from ragen_core.specs import EnvSpec
from ragen_core.testing.env_checks import check_oracle
from ragen_core.testing.toy_env import CorridorConfig, CorridorEnv


class SuccessWithoutDone(CorridorEnv):
    """Reaching G says success but never ends the episode."""

    def step(self, action: str) -> StepResult:
        result = super().step(action)
        return StepResult(result.observation, result.reward, False, result.info)


NAME = "success-without-done"


@pytest.fixture
def env_name():
    registry.register(EnvSpec(name=NAME, config_model=CorridorConfig, factory=f"{__name__}:SuccessWithoutDone"))
    try:
        yield NAME
    finally:
        registry.unregister("env", NAME)


def test_play_counts_no_success_the_trainer_would_not_count(env_name, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("Right\n" * 12 + "q\n"))
    assert main(["env", "play", env_name, "--set", "length=3", "--set", "max_turns=6"]) == 0
    out = capsys.readouterr().out
    assert "info['success'] is True but the env did not say done" in out
    assert out.rstrip().splitlines()[-1].endswith("success False")


def test_play_of_a_real_success_still_says_so(capsys, monkeypatch):
    from ragen_core.testing.toy_env import register_toy_env

    monkeypatch.setattr("sys.stdin", io.StringIO("Right\n" * 12))
    assert main(["env", "play", register_toy_env(), "--set", "length=3", "--set", "max_turns=6"]) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1].endswith("success True")


def test_the_oracle_check_wants_the_episode_to_end(env_name):
    with pytest.raises(AssertionError, match=r"the oracle's last step \(seed \d+\) says success but not done"):
        check_oracle(env_name)


def test_play_of_several_episodes_ends_with_what_they_add_up_to(capsys):
    """'ragen env play NAME --agent random --episodes 200' ended after its last episode without a word on the
    mean reward or the success rate over them."""
    import re

    assert main(["env", "play", "bandit", "--agent", "random", "--episodes", "6", "--seed", "40"]) == 0
    out = capsys.readouterr().out
    ends = re.findall(r"episode over: total reward ([+-]\d+\.\d\d), success (True|False)", out)
    assert len(ends) == 6
    wins = sum(success == "True" for _, success in ends)
    mean = sum(float(reward) for reward, _ in ends) / 6
    last = next(line for line in out.splitlines() if line.startswith("6 episodes"))
    found = re.fullmatch(r"6 episodes \(seeds 40 to 45\): mean reward ([+-]\d\.\d{3}), success (\d)/6 \((\d+)%\)", last)
    assert found, last
    assert abs(float(found.group(1)) - mean) <= 0.0051  # the per-episode totals are printed to 2 decimals
    assert int(found.group(2)) == wins and int(found.group(3)) == round(100 * wins / 6)
    assert main(["env", "play", "bandit", "--agent", "random"]) == 0  # one episode: its own line says it all
    assert "episodes (seeds" not in capsys.readouterr().out


def test_play_of_several_episodes_sums_up_the_envs_info_metrics_as_a_run_does(capsys):
    """The summary of 'ragen env play --episodes N' gave reward and success only, not the info metrics
    the env declares (what a run logs as info/<key>)."""
    import re

    registry.register(EnvSpec(name="scored-corridor", config_model=CorridorConfig, factory="ragen_core.testing.toy_env:ScoredCorridorEnv"))
    try:
        assert main(["env", "play", "scored-corridor", "--agent", "random", "--episodes", "5", "--seed", "3",
                     "--set", "length=5", "--set", "max_turns=4"]) == 0
    finally:
        registry.unregister("env", "scored-corridor")
    out = capsys.readouterr().out
    # per episode, from its printed step infos: distance is declared "mean", moved "sum"
    distances, moved = [], []
    for episode in out.split("=== ")[1:]:
        steps = re.findall(r"info: .*distance=(\d+), moved=(True|False)", episode)
        if steps:  # an episode of invalid actions only reports neither
            distances.append(sum(int(d) for d, _ in steps) / len(steps))
            moved.append(sum(m == "True" for _, m in steps))
    assert distances, out
    last = out.rstrip().splitlines()[-1]
    assert last == (f"info metrics (mean over the episodes that reported each): distance {sum(distances) / len(distances):.3f}, "
                    f"moved {sum(moved) / len(moved):.3f}")
