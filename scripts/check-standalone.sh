#!/usr/bin/env bash
# Proves the user's install line, `pip install ragen-core ragen-env-X`, for each environment
# distribution: ragen-core is installed by name from locally built wheels (pip resolves its
# dependencies on the default algorithm, ragen-algo-grpo, and the no-op filter, ragen-filters,
# which depend on ragen-core in turn), then the env alone next to it (no other env or plugin).
# Each env must be the only one listed by `ragen plugins`, pass its own tests (conformance kit
# included), and train one step with `ragen run --env X` and nothing else installed.
# Usage: scripts/check-standalone.sh [VENV_DIR] [ENV_FOLDER...]
#   VENV_DIR     default: a temporary folder, removed afterwards
#   ENV_FOLDER   default: every env of the repository (e.g. plugins/ragen-env-bandit for one)
# STANDALONE_JOBS (default: 2, or 1 on a one-core machine) checks that many groups of envs at once,
# each group in its own venv (VENV_DIR then names the first group's venv); their logs follow in order.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
VENV="${1:-$WORK/venv}"
shift $(( $# > 0 ? 1 : 0 ))
ENVS=("$@")
[ ${#ENVS[@]} -gt 0 ] || ENVS=(ragen-env-sokoban ragen-env-lean ragen-env-webshop plugins/ragen-env-sudoku plugins/ragen-env-frozenlake plugins/ragen-env-countdown
                                plugins/ragen-env-deepcoder plugins/ragen-env-searchqa plugins/ragen-env-bandit plugins/ragen-env-metamathqa)
JOBS=${STANDALONE_JOBS:-$(( $(nproc) > 1 ? 2 : 1 ))}
if [ -z "${STANDALONE_GROUP:-}" ] && [ "$JOBS" -gt 1 ] && [ ${#ENVS[@]} -gt 1 ]; then
  # envs dealt round-robin into JOBS groups (the list alternates heavier and lighter checks)
  echo "checking ${#ENVS[@]} envs in $JOBS groups at once (each in its own venv); the groups' logs follow when all are done"
  pids=()
  for ((g = 0; g < JOBS; g++)); do
    group=()
    for ((i = g; i < ${#ENVS[@]}; i += JOBS)); do group+=("${ENVS[$i]}"); done
    venv="$WORK/venv-$g"; [ "$g" -eq 0 ] && venv="$VENV"
    STANDALONE_GROUP=$g "$0" "$venv" "${group[@]}" >"$WORK/group-$g.log" 2>&1 &
    pids+=($!)
  done
  status=0
  for ((g = 0; g < JOBS; g++)); do
    wait "${pids[$g]}" || status=1
    echo "--- group $((g + 1)) of $JOBS"
    cat "$WORK/group-$g.log"
  done
  exit $status
fi
python3 -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
"${PIP[@]}" torch==2.13.0 hatchling editables pytest hypothesis
# The wheels a package index would serve; `pip install ragen-core` then finds the defaults by name.
"$VENV/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation -w "$WORK/wheels" \
  ./ ./plugins/ragen-algo-grpo ./ragen-filters
"${PIP[@]}" --find-links "$WORK/wheels" ragen-core
status=0
for dir in "${ENVS[@]}"; do
  dist=$(sed -n 's/^name = "\(.*\)"/\1/p' "$dir/pyproject.toml" | head -1)
  name=${dist#ragen-env-}
  echo "=== $dist alone with ragen-core"
  "${PIP[@]}" --no-build-isolation -e "$dir"
  listed=$("$VENV/bin/ragen" plugins --kind env | awk 'NR>1 {print $2}' | tr '\n' ' ')
  if [ "$listed" != "$name " ]; then echo "expected only '$name' to be listed, got: $listed"; status=1; fi
  # pytest's last line; on a failure the end of its log (short tracebacks, then which tests failed)
  if "$VENV/bin/python" -m pytest -q -rfE --tb=short -p no:cacheprovider "$dir/tests" >"$WORK/pytest.log" 2>&1; then
    tail -n 1 "$WORK/pytest.log"
  else
    status=1
    tail -n 60 "$WORK/pytest.log"
  fi
  extra=()
  if [ "$name" = lean ]; then  # no toolchain on CI: the refusal (exit 2), then one step checked by the tests' REPL stand-in
    if (cd "$WORK" && "$VENV/bin/ragen" run --env lean --steps 1 --run-dir "$WORK/refused" >"$WORK/run.log" 2>&1); then
      echo "ragen run --env lean ran without a checker"; status=1
    fi
    echo "ragen run --env lean without a checker: $(head -n 1 "$WORK/run.log")"
    extra=("env_config.repl_command=[$VENV/bin/python, $PWD/ragen-env-lean/tests/lean_repl_double.py]")
  fi
  # one training step with the defaults the core brings (grpo, filter none, the warm policy shipped in
  # the ragen-core wheel: loaded and checked on 2 episodes with the gate at 0, so envs the shipped
  # policy is below the gate for take no supervised rounds here); small batch. Lean against the REPL
  # stand-in: no warm start.
  ws=(warm_start.target_valid_rate=0 warm_start.check_episodes=2)
  [ "$name" = lean ] && ws=(warm_start.enabled=false)
  if ! (cd "$WORK" && RAGEN_CACHE="$WORK/cache" "$VENV/bin/ragen" run --env "$name" --steps 1 --run-dir "$WORK/run-$name" ${extra[@]+"${extra[@]}"} \
        ${ws[@]+"${ws[@]}"} rollout.env_groups=2 rollout.group_size=2 test_freq=0 save_freq=0 progress=false >"$WORK/run.log" 2>&1); then
    echo "ragen run --env $name failed:"; tail -n 5 "$WORK/run.log"; status=1
  elif [ "$name" != lean ] && ! grep -q "^warm start: the shipped warm policy" "$WORK/run.log"; then
    echo "ragen run --env $name did not start from the shipped warm policy:"; grep "warm start" "$WORK/run.log" | head -n 3; status=1
  else
    echo "ragen run --env $name: $(grep "^warm start" "$WORK/run.log" | head -n 1); $(tail -n 1 "$WORK/run.log")"
  fi
  "$VENV/bin/python" -m pip uninstall -q -y "$dist"
done
exit $status
