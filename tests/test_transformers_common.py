"""scripts/transformers_common.sh takes transformers' real test modules only from a source tree of the release
installed: a tree of another release (whose tests call another API), or a folder that is no transformers tree, is
refused in one sentence before anything is downloaded. The common tests themselves are opt-in (docs/testing.md)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import transformers

ROOT = Path(__file__).resolve().parents[1]


def run_script(tmp_path: Path, source_tree: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_VANILLA_PYTHON": sys.executable, "HF_VANILLA_CACHE": str(tmp_path / "cache"),
           "HF_VANILLA_TRANSFORMERS_SRC": str(source_tree)}
    return subprocess.run(["bash", str(ROOT / "scripts" / "transformers_common.sh")], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.mark.parametrize("tree_version", ["4.57.1", None], ids=["another-release", "no-tree"])
def test_a_source_tree_of_another_release_is_refused_before_any_download(tmp_path, tree_version):
    tree = tmp_path / "transformers"
    if tree_version:
        (tree / "src" / "transformers").mkdir(parents=True)
        (tree / "src" / "transformers" / "__init__.py").write_text(f'__version__ = "{tree_version}"\n')
    result = run_script(tmp_path, tree)
    assert result.returncode == 2, result.stdout + result.stderr
    found = tree_version or "(no src/transformers/__init__.py there)"
    assert f"is transformers {found}, but {transformers.__version__} is installed; check out tag " \
           f"v{transformers.__version__} there." in result.stderr
    assert not (tmp_path / "cache").exists(), "the script downloaded before refusing the tree"
