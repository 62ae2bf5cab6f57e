"""``bench/bench_hf_decode.py`` on the CPU (it was written for a CUDA machine, where it has run once)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "bench_hf_decode.py"
pytestmark = [pytest.mark.skipif(not SCRIPT.is_file(), reason="bench/ is not here"), pytest.mark.usefixtures("one_torch_thread")]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("ragen_bench_hf_decode", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_it_times_the_engine_and_both_bare_loops_side_by_side(bench, capsys):
    code = bench.main(["--device", "cpu", "--preset", "tiny", "--dtype", "float32", "--batch", "2", "--prompt-len", "8",
                       "--new-tokens", "4", "--variants"])
    out = capsys.readouterr().out
    assert code == 0, out[-2000:]
    medians = {line.split()[0] for line in out.splitlines() if "ms/step median (rounds: " in line}
    assert medians == {"engine", "bare", "bare+mask"}  # "engine forwards" starts with "engine" too
    assert sum("ms/step median (rounds: " in line for line in out.splitlines()) == 4
    assert "ratio engine / bare+mask: " in out
    # the kernel variants: every row names the three loops, a refused kernel as an error, not a crash
    rows = [line for line in out.splitlines() if line.strip().startswith(("any kernel", "flash only", "efficient only", "math only"))]
    assert len(rows) == 4 and all(line.count(" | ") == 2 for line in rows)
    assert "engine without growable KV layers:" in out
    assert "top 12 functions by self time" in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible")
def test_without_a_gpu_the_default_device_is_a_one_line_refusal(bench, capsys):
    assert bench.main(["--preset", "tiny"]) == 2
    assert capsys.readouterr().err.strip() == "bench_hf_decode: no CUDA device is visible to torch (use --device cpu)"
