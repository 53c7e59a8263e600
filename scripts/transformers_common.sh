#!/usr/bin/env bash
# transformers' own common model tests (ModelTesterMixin, ConfigTester), held against hf_vanilla's three families
# as against a built-in model: the test files come from the sdist of the transformers release installed (PyPI),
# cached, and run beside scripts/transformers_common/test_vanilla_common.py in a temporary folder, against this
# checkout's hf_vanilla. Exits non-zero on any failure. Extra arguments go to pytest (e.g. -k RopeTest, -x).
#
#   HF_VANILLA_PYTHON            the Python to run (default: the environment scripts/setup.sh makes)
#   HF_VANILLA_CACHE             where the sdist and the tests' own dependency are kept (default: ~/.cache/hf_vanilla)
#   HF_VANILLA_TRANSFORMERS_SRC  a transformers source tree at the installed release (its tag, v<version>): its
#                                tests/ folders replace the stand-ins, so transformers' generate() and torch.export
#                                tests run too (default: none, the stand-ins)
#   HF_VANILLA_GENERATION_TESTS  transformers' tests/generation/test_utils.py (GenerationTesterMixin, which no PyPI
#                                artifact ships), fetched once as docs/testing.md says (default: generation/test_utils.py
#                                in the cache folder); "none" runs without transformers' generate() tests. Without a
#                                source tree, the script refuses to start until one of the two is given.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -z "${HF_VANILLA_PYTHON:-}" ]; then
  # shellcheck source=scripts/setup.sh
  source "$root/scripts/setup.sh"
fi
python=$HF_VANILLA_PYTHON
version=$("$python" -c 'import transformers; print(transformers.__version__)')
cache=${HF_VANILLA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hf_vanilla}/transformers-common/$version
stand_ins="$root/scripts/transformers_common/stand_ins"
src=${HF_VANILLA_TRANSFORMERS_SRC:-}
if [ -n "$src" ]; then  # the real test modules must be the installed release's: a tag's tests call its API
  src_version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$src/src/transformers/__init__.py" 2>/dev/null || true)
  if [ "$src_version" != "$version" ]; then
    echo "transformers_common: HF_VANILLA_TRANSFORMERS_SRC=$src is transformers" \
      "${src_version:-(no src/transformers/__init__.py there)}, but $version is installed; check out tag v$version" \
      "there." >&2
    exit 2
  fi
fi
generation_tests=${HF_VANILLA_GENERATION_TESTS:-$cache/generation/test_utils.py}
if [ -z "$src" ] && [ "$generation_tests" != none ] && [ ! -f "$generation_tests" ]; then
  echo "transformers_common: transformers' generate() tests (tests/generation/test_utils.py, in no PyPI artifact) are" \
    "not at $generation_tests; fetch them once with: curl -fsSL --create-dirs -o $generation_tests" \
    "https://raw.githubusercontent.com/huggingface/transformers/v$version/tests/generation/test_utils.py" \
    "(or set HF_VANILLA_GENERATION_TESTS to that file, or to none to run without them)." >&2
  exit 2
fi
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
# are the stand-ins (each says what then does not run), or those folders of the source tree given.
tar -xzf "$sdist" -C "$work" --strip-components=1 \
  "transformers-$version/tests/test_modeling_common.py" "transformers-$version/tests/test_configuration_common.py"
cp -r "$stand_ins/." "$work/tests/"
generation_source="the stand-in (no generate() tests)"
if [ -z "$src" ] && [ "$generation_tests" != none ]; then
  cp "$generation_tests" "$work/tests/generation/test_utils.py"
  generation_source="$generation_tests"
fi
if [ -n "$src" ]; then
  generation_source="$src/tests/generation"
  for folder in "$stand_ins"/*/; do
    name=$(basename "$folder")
    rm -rf "$work/tests/$name"
    cp -r "$src/tests/$name" "$work/tests/"
  done
fi
cp "$root/scripts/transformers_common/test_vanilla_common.py" "$work/tests/"
find "$work/tests" -type d -exec touch {}/__init__.py \;

cd "$work"
echo "transformers_common: transformers $version's common tests against hf_vanilla from $root" \
  "(test modules beside them: ${src:-the stand-ins}; GenerationTesterMixin from $generation_source)"
PYTHONPATH="$root:$cache/deps${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 \
  "$python" -m pytest -p no:cacheprovider -q -rfE tests/test_vanilla_common.py "$@"
