#!/usr/bin/env bash
# The README's test command: set up (if needed), then run the test suite. Extra arguments go to pytest.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/setup.sh
source "$root/scripts/setup.sh"
cd "$root"
exec "$HF_VANILLA_PYTHON" -m pytest -p no:cacheprovider "$@"
