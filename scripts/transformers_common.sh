#!/usr/bin/env bash
# transformers' own common model tests (ModelTesterMixin, ConfigTester), held against hf_vanilla's three families
# as against a built-in model: the test files come from the sdist of the transformers release installed (PyPI),
# cached, and run beside scripts/transformers_common/test_vanilla_common.py in a temporary folder, against this
# checkout's hf_vanilla. Exits non-zero on any failure. Extra arguments go to pytest (e.g. -k RopeTest, -x).
#
#   HF_VANILLA_PYTHON  the Python to run (default: the environment scripts/setup.sh makes)
#   HF_VANILLA_CACHE   where the sdist and the tests' own dependency are kept (default: ~/.cache/hf_vanilla)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -z "${HF_VANILLA_PYTHON:-}" ]; then
  # shellcheck source=scripts/setup.sh
  source "$root/scripts/setup.sh"
fi
python=$HF_VANILLA_PYTHON
version=$("$python" -c 'import transformers; print(transformers.__version__)')
cache=${HF_VANILLA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hf_vanilla}/transformers-common/$version
# test_modeling_common.py imports parameterized, which neither transformers nor hf_vanilla needs.
test_requirements=("parameterized==0.9.0")

sdist="$cache/transformers-$version.tar.gz"
if [ ! -f "$sdist" ]; then
  echo "transformers_common: downloading the sdist of transformers $version"
  mkdir -p "$cache"
  "$python" -m pip download -q --no-deps --no-binary :all: -d "$cache" "transformers==$version"
fi
stamp="$cache/deps/.installed"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "${test_requirements[*]}" ]; then
  echo "transformers_common: installing ${test_requirements[*]} into $cache/deps"
  rm -rf "$cache/deps"
  "$python" -m pip install -q --no-deps --target "$cache/deps" "${test_requirements[@]}"
  echo "${test_requirements[*]}" > "$stamp"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The sdist ships tests/*.py only; the modules those import from tests/generation, tests/exporters and tests/utils
# are replaced by the stand-ins (each says what then does not run).
tar -xzf "$sdist" -C "$work" --strip-components=1 \
  "transformers-$version/tests/test_modeling_common.py" "transformers-$version/tests/test_configuration_common.py"
cp -r "$root/scripts/transformers_common/stand_ins/." "$work/tests/"
cp "$root/scripts/transformers_common/test_vanilla_common.py" "$work/tests/"
find "$work/tests" -type d -exec touch {}/__init__.py \;

cd "$work"
echo "transformers_common: transformers $version's common tests against hf_vanilla from $root"
PYTHONPATH="$root:$cache/deps${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 \
  "$python" -m pytest -p no:cacheprovider -q -rfE tests/test_vanilla_common.py "$@"
