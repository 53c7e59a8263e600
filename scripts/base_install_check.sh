#!/usr/bin/env bash
# `pip install hf_vanilla` with no extras, in a fresh venv: the model core loads, converts a native GPT-2 and
# generates the same tokens (scripts/base_install_check.py). torch comes first (TORCH_SPEC, as scripts/setup.sh).
#
#   VENV  where the throwaway environment is built (default: a new temporary folder, removed afterwards)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${VENV:-$(mktemp -d)/venv}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# shellcheck disable=SC2086  # TORCH_SPEC may carry pip options on purpose
"$venv/bin/python" -m pip install -q ${TORCH_SPEC:-torch==2.13.0}
"$venv/bin/python" -m pip install -q "$root"
# run from a copy in an empty folder: the installed package is imported, not the checkout (nor scripts/accelerate)
scratch=$(mktemp -d)
cp "$root/scripts/base_install_check.py" "$scratch/"
cd "$scratch"
PATH="$venv/bin:$PATH" "$venv/bin/python" base_install_check.py
