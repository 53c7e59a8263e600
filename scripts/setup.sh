#!/usr/bin/env bash
# Set-up shared by the README's commands and CI: a virtual environment with the CPU build of torch
# installed first (an unpinned `torch` would pull a multi-GB CUDA build), then hf_vanilla with its
# development extras. Re-running is cheap: nothing is reinstalled unless pyproject.toml changed.
#
#   HF_VANILLA_VENV  where the environment lives (default: .venv in the repository)
#   TORCH_SPEC       the torch requirement to install when none is present, words passed to pip as written
#                    (default: torch==2.13.0, the CPU build here; on a stock Linux machine that is PyPI's CUDA
#                    build, so the README gives "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu")
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${HF_VANILLA_VENV:-$root/.venv}
python=${PYTHON:-python3}

if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating $venv"
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip)
# find_spec looks torch up without importing it (an import alone took 88 s on a busy machine, on every call).
if ! "$venv/bin/python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"; then
  echo "setup: installing ${TORCH_SPEC:-torch==2.13.0} first"
  # shellcheck disable=SC2086  # TORCH_SPEC may carry pip options on purpose
  "${pip[@]}" install -q ${TORCH_SPEC:-torch==2.13.0}
fi
stamp="$venv/.hf_vanilla-installed"
wanted=$(sha256sum "$root/pyproject.toml" | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ]; then
  echo "setup: installing hf_vanilla[dev] (editable)"
  "${pip[@]}" install -q -e "$root[dev]"
  echo "$wanted" > "$stamp"
fi
export HF_VANILLA_PYTHON="$venv/bin/python"
