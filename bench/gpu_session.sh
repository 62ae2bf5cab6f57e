#!/usr/bin/env bash
# The CUDA checks of one lent GPU session, as one prepared script (about 8-10 minutes on one H200).
#
#   bench/gpu_session.sh [OUT_DIR]        # OUT_DIR default: $OUT, else /tmp/ragen-gpu-session
#
# It expects `ragen` and its plugins importable by `python3` (on a machine without a package index,
# install wheels built here first: `bench/gpu_session.sh --wheels DIR` builds them; see the end).
# Each part runs under its own time limit and prints its exit status; the script goes on after a
# failed part, so one run reports every part. Everything is also written to OUT_DIR/gpu_session.log.
#
# Parts:
#   1. machine: GPU, torch, transformers, the plugins RAGEN finds
#   2. bench/gpu_check.py --engine hf: a Qwen2.5-0.5B-shaped model built in code, GRPO steps on CUDA
#      (and again with optim.float32_weights=true: the bf16 model trained as float32)
#      (32 episodes: the HF engine's decode is launch-bound, about 24 ms a token on an H200)
#      (HF engine generating on the GPU, bf16 update, weight version per update), then PPO (critic)
#   3. `ragen run --env sokoban` on device=auto (= cuda here): the shipped warm policy, 3 steps, checkpoint step_2
#   4. `ragen diagnose RUN --checkpoint step_2 --device cuda`: the offline collapse diagnostics on the GPU (Z = the whole reply:
#      the shipped policy writes no <think>)
#   5. `ragen eval --env sudoku` (a delta warm policy applied on the GPU), then torchrun with more
#      ranks than GPUs: must be a one-line error, exit 2
#   6. the core test suite (tests/) with a CUDA device visible (device=auto resolves to cuda)
#   7. bench/bench_hf_decode.py: the HF engine's decode step against a bare transformers loop
# Results of the run on an H200: bench/results/gpu_session_h200.md
#
# Environment knobs (for a dry run on a CPU machine): DEVICE (cuda), PRESET (qwen2.5-0.5b),
# DTYPE (bfloat16), STEPS (3), PYTEST_LIMIT (180).
set -u

if [ "${1:-}" = "--wheels" ]; then
    # Build the wheels a machine without a package index needs: this repository's packages
    # (pure Python) and pydantic's, for CPython 3.12 on x86-64 Linux.
    dest=${2:?usage: bench/gpu_session.sh --wheels DIR}
    mkdir -p "$dest"
    repo=$(cd "$(dirname "$0")/.." && pwd)
    python3 -m pip wheel -q --no-deps -w "$dest" "$repo" "$repo"/plugins/ragen-algo-grpo "$repo"/plugins/ragen-algo-ppo \
        "$repo"/ragen-filters "$repo"/plugins/ragen-diagnostics "$repo"/ragen-env-sokoban "$repo"/plugins/ragen-env-bandit "$repo"/plugins/ragen-env-sudoku || exit 2
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$dest" \
        "pydantic==$(python3 -c 'import pydantic; print(pydantic.VERSION)')" \
        "pydantic-core==$(python3 -c 'import pydantic_core; print(pydantic_core.__version__)')" \
        annotated-types typing-inspection || exit 2
    ls -l "$dest"
    exit 0
fi

OUT_DIR=${1:-${OUT:-/tmp/ragen-gpu-session}}
DEVICE=${DEVICE:-cuda}
PRESET=${PRESET:-qwen2.5-0.5b}
DTYPE=${DTYPE:-bfloat16}
STEPS=${STEPS:-3}
PYTEST_LIMIT=${PYTEST_LIMIT:-180}
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d /tmp/ragen-gpu-session.XXXXXX)
mkdir -p "$OUT_DIR"
LOG="$OUT_DIR/gpu_session.log"
export PYTHONUNBUFFERED=1 RAGEN_PLOTS=0 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
failed=()

# part NAME LIMIT_S CMD...: runs CMD with a time limit, prints its output and exit status
part() {
    local name=$1 limit=$2
    shift 2
    local t0 rc
    t0=$(date +%s)
    echo
    echo "=== $name (limit ${limit} s): $*"
    timeout -k 10 "$limit" "$@" 2>&1
    rc=$?
    echo "=== $name: exit $rc after $(( $(date +%s) - t0 )) s"
    [ "$rc" = 0 ] || failed+=("$name=$rc")
    return 0
}

{
    cd "$REPO" || exit 2
    # (no commit id: a lent machine's copy of the working tree can carry an older .git than its files)
    echo "gpu_session: $(date -u +%FT%TZ), device $DEVICE, preset $PRESET"
    part machine 60 bash -c 'nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "(no nvidia-smi)";
        python3 -c "import torch, transformers, pydantic; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"available\", torch.cuda.is_available(), \"| transformers\", transformers.__version__, \"| pydantic\", pydantic.VERSION)";
        ragen plugins list'

    part grpo_hf_cuda 150 python3 bench/gpu_check.py --no-install --engine hf --algo grpo --device "$DEVICE" --preset "$PRESET" \
        --dtype "$DTYPE" --steps "$STEPS" --groups 4 --work-dir "$WORK/grpo"
    part ppo_hf_cuda 90 python3 bench/gpu_check.py --no-install --engine hf --algo ppo --device "$DEVICE" --preset "$PRESET" \
        --dtype "$DTYPE" --steps 2 --groups 4 --work-dir "$WORK/ppo"
    # optim.float32_weights on the bf16 model (session 27; not yet run on a GPU): float32 weights, critic and optimiser
    part grpo_hf_cuda_float32_weights 120 python3 bench/gpu_check.py --no-install --engine hf --algo grpo --device "$DEVICE" \
        --preset "$PRESET" --dtype "$DTYPE" --steps 2 --groups 4 --work-dir "$WORK/fp32" --set optim.float32_weights=true

    part sokoban_run 120 ragen run --env sokoban --steps 3 "device=${DEVICE/cuda/auto}" save_freq=2 save_rollouts=true test_freq=0 \
        "run_dir=$WORK/sokoban"
    part sokoban_diagnose 60 ragen diagnose "$WORK/sokoban" --checkpoint step_2 --device "$DEVICE" --num-samples 16 --z-source response
    ls "$WORK/sokoban" | tr "\n" " "; echo
    for f in "$WORK"/sokoban/metrics.jsonl "$WORK"/sokoban/diagnostics_offline.jsonl; do
        [ -f "$f" ] && cp "$f" "$OUT_DIR/sokoban_$(basename "$f")" 2>/dev/null
    done

    # a delta warm policy (sudoku's: the tiny-warm base plus a low-rank change) applied on the GPU:
    # the change was added from the CPU onto CUDA weights (found by a static audit, fixed unseen)
    part eval_delta_policy 120 ragen eval --env sudoku --groups 2 --max-new-tokens 32

    # torchrun, two ranks: with one GPU and device=cuda, rank 1 has no GPU of its own and the expected
    # result is a one-line refusal (exit 2); on a CPU dry run the two gloo ranks train one step
    part torchrun_two_ranks 60 bash -c "python3 -m torch.distributed.run --nproc_per_node 2 -m ragen_core.cli.main run \
        --env bandit --steps 1 device=$DEVICE run_dir=$WORK/ddp save_freq=0 test_freq=0 > $WORK/ddp.log 2>&1; rc=\$?;
        grep -v '^W[0-9]\|^\*\*\*' $WORK/ddp.log | tail -12; echo \"torchrun exit \$rc\";
        if [ $DEVICE = cuda ] && [ \$(python3 -c 'import torch; print(torch.cuda.device_count())') = 1 ]; then
            grep -q 'LOCAL_RANK=1 needs cuda:1' $WORK/ddp.log && [ \$rc != 0 ]; else [ \$rc = 0 ]; fi"

    # the core suite (tests/) on 12 workers; the env plugins this script does not install (sudoku,
    # frozenlake) fail their tests by name there, which the summary lines show
    part pytest_core_cuda_visible "$PYTEST_LIMIT" bash -c "python3 -m pytest -q -n 12 -p no:benchmark tests/ > $WORK/pytest.log 2>&1;
        rc=\$?; grep -E '^(FAILED|ERROR)|passed|failed' $WORK/pytest.log | tail -40; cp $WORK/pytest.log $OUT_DIR/pytest.log; exit \$rc"
    part hf_decode 120 python3 bench/bench_hf_decode.py --device "$DEVICE" --preset "$PRESET" --dtype "$DTYPE" --new-tokens 64
    echo
    echo "gpu_session: done; failed parts: ${failed[*]:-none}"
} 2>&1 | tee "$LOG"
