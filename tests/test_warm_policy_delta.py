"""Delta warm policies (``ragen warm-policy build --init-from BASE --delta-rank R``) and the build's
second check before a rate may let runs skip their own.

A delta policy stores a low-rank change of a shipped policy's weights instead of a whole model
(the repository's size budget holds several); a run loads the base and adds the change. Built
here for the in-process corridor env in seconds, like tests/test_warm_policy.py.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest
import torch

from ragen_core.config import load_config
from ragen_core.errors import RagenError
from ragen_core.models import load_model_and_tokenizer
from ragen_core.testing.toy_env import register_toy_env
from ragen_core.trainer import lowrank, warm_policy
from ragen_core.trainer.config import RunConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")

_QUIET = {"episodes": 4, "demo_turns": 1, "epochs": 1, "check_episodes": 2, "recipes": False, "progress": False, "log": lambda *_: None}


def _cfg(*extra: str) -> RunConfig:
    return load_config(RunConfig, [], [f"env={register_toy_env()}", *extra])


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """A shipped root with a whole general policy and a rank-4 delta of it for the corridor env."""
    root = tmp_path_factory.mktemp("warm")
    env = register_toy_env()
    warm_policy.build(root / warm_policy.GENERAL, [env], max_rounds=1, **_QUIET)
    record = warm_policy.build(root / "corridor", [env], max_rounds=1, init_from=root / warm_policy.GENERAL, delta_rank=4, **_QUIET)
    return root, record


def _load(folder):
    model, _ = load_model_and_tokenizer("tiny")
    warm_policy.shipped_policy(folder).load_into(model)
    return model


def test_a_delta_build_stores_only_the_change_and_names_its_base(shipped):
    root, record = shipped
    folder = root / "corridor"
    assert not (folder / warm_policy.WEIGHTS_FILE).exists() and (folder / warm_policy.DELTA_FILE).is_file()
    base = json.loads((root / warm_policy.GENERAL / "build.json").read_text())
    assert record["delta"] == {"base": warm_policy.GENERAL, "base_weights_sha256": base["weights_sha256"], "rank": 4}
    assert record["settings"]["delta_rank"] == 4 and record["init_from"]["folder"] == warm_policy.GENERAL
    # rank 4 of 192-wide layers: a small fraction of the whole fp16 model
    assert (folder / warm_policy.DELTA_FILE).stat().st_size < (root / warm_policy.GENERAL / warm_policy.WEIGHTS_FILE).stat().st_size / 10


def test_a_delta_policy_loads_as_its_base_plus_b_times_a(shipped):
    from safetensors.torch import load_file

    root, _ = shipped
    base = _load(root / warm_policy.GENERAL).state_dict()
    loaded = _load(root / "corridor").state_dict()
    delta = load_file(str(root / "corridor" / warm_policy.DELTA_FILE))
    changed = 0
    for name, value in loaded.items():
        if name + lowrank.B_SUFFIX in delta:
            expected = base[name] + delta[name + lowrank.B_SUFFIX].float() @ delta[name + lowrank.A_SUFFIX].float()
            assert torch.equal(value, expected), name  # the same float32 product, added once
            changed += 1
        elif name in delta:
            assert torch.equal(value, delta[name].float()), name  # norms and biases stored whole
        else:
            assert torch.equal(value, base[name]), name  # the embedding (tied head) is the base's
    assert changed == 4 * 7  # q, k, v, o, gate, up, down of each of the tiny model's 4 blocks


def test_a_delta_whose_base_changed_or_is_gone_is_not_used(shipped, tmp_path):
    root, _ = shipped
    copy = tmp_path / "warm"
    shutil.copytree(root, copy)
    assert warm_policy.shipped_policy(copy / "corridor") is not None
    record = json.loads((copy / warm_policy.GENERAL / "build.json").read_text())
    (copy / warm_policy.GENERAL / "build.json").write_text(json.dumps({**record, "weights_sha256": "0" * 64}))  # base rebuilt
    assert warm_policy.shipped_policy(copy / "corridor") is None
    shutil.rmtree(copy / warm_policy.GENERAL)
    assert warm_policy.shipped_policy(copy / "corridor") is None
    assert warm_policy.shipped_policies(copy) == []


def test_hooks_while_training_and_the_stored_delta_compute_the_same_model(shipped):
    root, _ = shipped
    model = _load(root / warm_policy.GENERAL)
    ids = torch.tensor([[5, 17, 99, 3, 42, 7]])
    with torch.no_grad():
        before = model(ids).logits
    attached = lowrank.attach(model, 3, seed=1)
    assert all(not p.requires_grad for n, p in model.named_parameters() if p.dim() > 1)  # base weights frozen
    with torch.no_grad():
        assert torch.equal(model(ids).logits, before)  # B starts at zero: the model is unchanged
        for _a, b in attached.factors.values():
            b.copy_(torch.randn(b.shape, generator=torch.Generator().manual_seed(2)) * 0.02)
        hooked = model(ids).logits
    state = lowrank.delta_state(model, attached)
    attached.detach()
    merged = _load(root / warm_policy.GENERAL)
    lowrank.apply_delta(merged, state)
    with torch.no_grad():
        # x W^T + (x A^T) B^T vs x (W + B A)^T: the same sum in another order, float32 rounding only
        assert torch.allclose(merged(ids).logits, hooked, atol=1e-4, rtol=1e-4)
        assert not torch.allclose(hooked, before, atol=1e-3)  # and the delta did change the model
    with pytest.raises(ValueError, match="does not fit|no matching"):
        lowrank.apply_delta(merged, {"model.layers.0.mlp.up_proj.weight.lora_B": torch.zeros(2, 2)})


def test_a_delta_build_continued_from_a_delta_keeps_its_base_and_its_factors(shipped, tmp_path):
    from safetensors.torch import load_file

    root, first = shipped
    seen = []
    original = lowrank.load_attached

    def keep(model, attached, delta):
        original(model, attached, delta)
        seen.append({n: ab[1].detach().clone() for n, ab in attached.factors.items()})

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lowrank, "load_attached", keep)
        record = warm_policy.build(tmp_path / "next", [register_toy_env()], max_rounds=1, init_from=root / "corridor", delta_rank=4, **_QUIET)
    stored = load_file(str(root / "corridor" / warm_policy.DELTA_FILE))
    assert all(torch.equal(b, stored[f"{n}.weight{lowrank.B_SUFFIX}"].float()) for n, b in seen[0].items())
    assert record["delta"]["base"] == warm_policy.GENERAL and record["init_from"]["folder"] == "corridor"
    with pytest.raises(RagenError, match="expected"):  # another rank cannot go on from these factors
        warm_policy.build(tmp_path / "other", [register_toy_env()], max_rounds=1, init_from=root / "corridor", delta_rank=2, **_QUIET)
    with pytest.raises(RagenError, match="own folder"):  # it would overwrite the weights it is a delta of
        warm_policy.build(root / warm_policy.GENERAL, [register_toy_env()], max_rounds=1, init_from=root / warm_policy.GENERAL,
                          delta_rank=2, **_QUIET)
    with pytest.raises(RagenError, match="needs the policy it is a delta of"):
        warm_policy.build(tmp_path / "x", [register_toy_env()], max_rounds=1, delta_rank=2, **_QUIET)


def test_a_rate_that_would_let_runs_skip_their_check_is_checked_again_on_fresh_seeds(monkeypatch, tmp_path):
    from ragen_core.trainer import warmstart

    seeds: list[int] = []
    rates = iter([1.0, 0.8, 0.97, 0.95])  # round 1: lucky, then not confirmed (mean 0.9); round 2: confirmed

    def check(config, *a, **k):
        seeds.append(config.seed)
        return warmstart.FormatCheck(next(rates))

    monkeypatch.setattr(warmstart, "format_check", check)
    record = warm_policy.build(tmp_path / "p", [register_toy_env()], max_rounds=3, **_QUIET)
    assert [h["checks"][register_toy_env()] for h in record["history"]] == [[1.0, 0.8], [0.97, 0.95]]
    assert len(record["history"]) == 2  # round 1's mean, 0.90, is below the as-is line: one more round
    (target,) = record["targets"]
    assert target["valid_rate"] == pytest.approx(0.96) and warm_policy.used_as_is(target, 0.9)
    assert seeds[0] == seeds[2] and len({seeds[0], seeds[1], seeds[3]}) == 3  # the second checks use fresh seeds each round


def test_the_folder_keeps_the_best_rounds_weights_and_the_record_every_round(monkeypatch, tmp_path, capsys):
    import hashlib

    from ragen_core.trainer import warmstart

    rates = iter([0.5, 0.3, 0.6, 0.55])
    monkeypatch.setattr(warmstart, "format_check", lambda *a, **k: warmstart.FormatCheck(next(rates)))
    digests = []

    def write(*a, **k):
        record = original(*a, **k)
        digests.append(hashlib.sha256((tmp_path / "p" / warm_policy.WEIGHTS_FILE).read_bytes()).hexdigest())
        return record

    original = warm_policy._write
    monkeypatch.setattr(warm_policy, "_write", write)
    record = warm_policy.build(tmp_path / "p", [register_toy_env()], max_rounds=4, **{**_QUIET, "log": print})
    assert [h["valid_rates"][register_toy_env()] for h in record["history"]] == [0.5, 0.3, 0.6, 0.55]
    assert digests[1] == digests[0] and digests[2] != digests[1] and digests[3] == digests[2]  # rounds 2 and 4 were worse
    assert record["kept_round"] == 3 and record["targets"][0]["valid_rate"] == 0.6
    assert record["weights_sha256"] == digests[-1]
    assert "the folder keeps round 3's weights" in capsys.readouterr().out
    from ragen_core.cli.warm_policy import _show

    _show(record)
    assert "weights of round 3 (the best of its rounds; last round 4)" in capsys.readouterr().out


def test_a_delta_finds_its_base_beside_it_or_among_the_shipped_ones(shipped, tmp_path, monkeypatch):
    root, _ = shipped
    shutil.copytree(root / "corridor", tmp_path / "elsewhere" / "corridor")  # a delta built into a scratch folder
    assert warm_policy.shipped_policy(tmp_path / "elsewhere" / "corridor") is None  # no base beside it, none shipped
    monkeypatch.setattr(warm_policy, "SHIPPED_ROOT", root)
    policy = warm_policy.shipped_policy(tmp_path / "elsewhere" / "corridor")
    assert policy is not None and policy.base.folder == root / warm_policy.GENERAL


def test_a_continued_build_keeps_its_starting_weights_until_a_round_beats_its_base(monkeypatch, tmp_path):
    from ragen_core.trainer import warmstart

    base = tmp_path / "base"
    monkeypatch.setattr(warmstart, "format_check", lambda *a, **k: warmstart.FormatCheck(0.6))
    first = warm_policy.build(base, [register_toy_env()], max_rounds=1, **_QUIET)
    monkeypatch.setattr(warmstart, "format_check", lambda *a, **k: warmstart.FormatCheck(0.4))  # every round worse than 0.6
    record = warm_policy.build(tmp_path / "next", [register_toy_env()], max_rounds=2, init_from=base, **_QUIET)
    assert [h["valid_rates"][register_toy_env()] for h in record["history"]] == [0.4, 0.4]
    assert record["kept_round"] == 1 and record["targets"][0]["valid_rate"] == 0.6  # the base's round and measurement
    assert record["weights_sha256"] == first["weights_sha256"]  # its weights, written back unchanged (fp16 -> fp32 -> fp16)


def test_a_build_from_a_policy_says_which_of_its_own_rounds_it_is_on(shipped, tmp_path):
    """'warm policy round 19' for a --max-rounds 1 build read like a runaway build (helper-63's walk)."""
    root, _ = shipped
    lines: list[str] = []
    quiet = {**_QUIET, "log": lines.append}
    warm_policy.build(tmp_path / "next", [register_toy_env()], max_rounds=1, init_from=root / "corridor", delta_rank=4, **quiet)
    sft = [line for line in lines if ": SFT on " in line]
    assert len(sft) == 1 and re.match(r"warm policy round (\d+) \(1 of at most 1 in this build; its --init-from policy ran \d+\)", sft[0]), sft
