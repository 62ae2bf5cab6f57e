"""ScriptedEngine follows the engine contract: per-prompt seeds recorded, policy version reported."""

from __future__ import annotations

import pytest

from ragen_core.engines.scripted import ScriptedEngine
from ragen_core.interfaces.engine import SamplingParams
from ragen_core.models import load_model_and_tokenizer


@pytest.fixture(scope="module")
def mt(tmp_path_factory):
    return load_model_and_tokenizer("tiny", cache_dir=tmp_path_factory.mktemp("models"))


def test_replies_carry_the_synced_version_and_calls_record_seeds(mt):
    model, tok = mt
    eng = ScriptedEngine(["hi", [7, 8, 9]], tok)
    eng.attach(model, tok)
    first = eng.generate([[1], [2]], SamplingParams(), seeds=[11, 12])
    assert {g.policy_version for g in first} == {0} and {g.finish_reason for g in first} == {"stop"}
    eng.sync_weights(model.state_dict(), version=4)
    second = eng.generate([[3]], SamplingParams(max_new_tokens=2))
    assert second[0].token_ids == [7, 8] and second[0].finish_reason == "length" and second[0].policy_version == 4
    assert eng.seeds == [[11, 12], None]


def test_wrong_number_of_seeds_is_an_error(mt):
    eng = ScriptedEngine(["hi"], mt[1])
    with pytest.raises(ValueError, match="1 seeds for 2 prompts"):
        eng.generate([[1], [2]], SamplingParams(), seeds=[5])
