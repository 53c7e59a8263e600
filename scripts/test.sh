#!/usr/bin/env bash
# The README's test command: set up (if needed), then run the test suite, then the model files that travel with a
# checkpoint on the oldest transformers they support, in a second environment (scripts/oldest_transformers.sh).
# Arguments go to pytest and select what runs in the main environment only; the second stage is then left out.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/setup.sh
source "$root/scripts/setup.sh"
cd "$root"
if [ $# -gt 0 ]; then
  exec "$HF_VANILLA_PYTHON" -m pytest -p no:cacheprovider "$@"
fi
"$HF_VANILLA_PYTHON" -m pytest -p no:cacheprovider
exec bash "$root/scripts/oldest_transformers.sh"
