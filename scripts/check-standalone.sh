#!/usr/bin/env bash
# Proves that each environment distribution installs alone next to ragen-core (no other plugin),
# is listed by `ragen plugins`, and passes its own tests (conformance kit included).
# Usage: scripts/check-standalone.sh [VENV_DIR]   (default: a temporary folder, removed afterwards)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-$(mktemp -d)/venv}"
python3 -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
"${PIP[@]}" torch==2.13.0 hatchling editables pytest hypothesis
"${PIP[@]}" --no-build-isolation -e .
status=0
for dir in ragen-env-sokoban plugins/ragen-env-frozenlake plugins/ragen-env-countdown plugins/ragen-env-sudoku plugins/ragen-env-bandit plugins/ragen-env-metamathqa plugins/ragen-env-deepcoder; do
  dist=$(sed -n 's/^name = "\(.*\)"/\1/p' "$dir/pyproject.toml" | head -1)
  name=${dist#ragen-env-}
  echo "=== $dist alone with ragen-core"
  "${PIP[@]}" --no-build-isolation -e "$dir"
  listed=$("$VENV/bin/ragen" plugins --kind env | awk 'NR>1 {print $2}' | tr '\n' ' ')
  if [ "$listed" != "$name " ]; then echo "expected only '$name' to be listed, got: $listed"; status=1; fi
  "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$dir/tests" | tail -n 1 || status=1
  "$VENV/bin/python" -m pip uninstall -q -y "$dist"
done
exit $status
