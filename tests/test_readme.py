"""The README's Python examples run as written (they are the first code a user copies)."""

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_readme_has_an_example_per_family():
    text = "\n".join(BLOCKS)
    for head in ("VanillaForMaskedLM", "VanillaForCausalLM", "VanillaForSeq2SeqLM"):
        assert head in text


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, capsys):
    exec(compile(BLOCKS[index], f"README.md example {index}", "exec"), {})
    assert capsys.readouterr().out.strip()  # each example prints what it shows
