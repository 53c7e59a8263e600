#!/usr/bin/env bash
# The model files that travel with a checkpoint, tested on the oldest transformers they support (the release
# hf_vanilla/transformers_releases.py names): a second environment with that release, torch as setup.sh installs
# it, and only what tests/test_model_files_portable.py needs -- not hf_vanilla itself, which requires the newest
# transformers. Re-running is cheap: nothing is reinstalled unless the wanted versions changed. Extra arguments
# go to pytest.
#
#   HF_VANILLA_OLDEST_VENV  where the environment lives (default: .venv-oldest in the repository)
#   TORCH_SPEC              the torch requirement, as for setup.sh (default: torch==2.13.0, the CPU build here)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${HF_VANILLA_OLDEST_VENV:-$root/.venv-oldest}
python=${PYTHON:-python3}
minimum=$(sed -n 's/^MINIMUM_TRANSFORMERS = "\(.*\)"$/\1/p' "$root/hf_vanilla/transformers_releases.py")
if [ -z "$minimum" ]; then
  echo "oldest_transformers: no MINIMUM_TRANSFORMERS = \"X.Y.Z\" line in hf_vanilla/transformers_releases.py" >&2
  exit 1
fi
requirements=("transformers==$minimum" "safetensors>=0.4" "pytest>=8")

if [ ! -x "$venv/bin/python" ]; then
  echo "oldest_transformers: creating $venv"
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip)
if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
  echo "oldest_transformers: installing ${TORCH_SPEC:-torch==2.13.0} (CPU) first"
  # shellcheck disable=SC2086  # TORCH_SPEC may carry pip options on purpose
  "${pip[@]}" install -q ${TORCH_SPEC:-torch==2.13.0}
fi
stamp="$venv/.hf_vanilla-installed"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "${requirements[*]}" ]; then
  echo "oldest_transformers: installing ${requirements[*]}"
  "${pip[@]}" install -q "${requirements[@]}"
  echo "${requirements[*]}" > "$stamp"
fi

cd "$root"
echo "oldest_transformers: the model files on transformers $("$venv/bin/python" -c 'import transformers; print(transformers.__version__)')"
# --noconftest: tests/conftest.py needs the package's development dependencies, which this environment lacks.
exec "$venv/bin/python" -m pytest -p no:cacheprovider --noconftest tests/test_model_files_portable.py "$@"
