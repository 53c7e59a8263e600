"""The package as layers (hf_vanilla/tools/layers.py): no import cycle, no arrow up, every module declared,
docs/architecture.md generated from the code; and each layer whose extra is missing fails in one line naming it."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from hf_vanilla.extras import EXTRA_MODULES
from hf_vanilla.tools import layers

ROOT = Path(__file__).resolve().parent.parent


def test_the_import_graph_has_no_cycle():
    """Typing-only and function-level imports count: a circle through an annotation is still a circle to a reader.
    The scripts count too: they import each other by name and the package by its."""
    assert layers.cycles({**layers.graph(), **layers.script_graph()}) == []


def test_the_scripts_graph_sees_scripts_importing_each_other_and_the_package(tmp_path, monkeypatch):
    (tmp_path / "door.py").write_text("import sys\nfrom hf_vanilla.experiments import compare\n\n\ndef main():\n"
                                      "    # the sweep: start-up time\n    import sweep\n")
    (tmp_path / "sweep.py").write_text("from door import main\n")
    monkeypatch.setattr(layers, "SCRIPTS", tmp_path)
    found = layers.script_graph()
    assert found == {"scripts.door": frozenset({"scripts.sweep", "hf_vanilla.experiments.compare"}),
                     "scripts.sweep": frozenset({"scripts.door"})}
    assert layers.cycles(found) == [["scripts.door", "scripts.sweep"]]


def test_no_import_goes_up_a_layer():
    assert layers.upward_arrows(layers.graph()) == []


def test_what_a_task_reads_of_the_options_is_what_training_gives_it():
    """Tasks declare the options they read (TaskOptions, in the tasks layer) so as not to import the training layer
    above them; the run's TrainOptions has each, with the same type."""
    import typing

    from hf_vanilla.tasks.base import TaskOptions
    from hf_vanilla.training.options import TrainOptions

    given, read = typing.get_type_hints(TrainOptions), typing.get_type_hints(TaskOptions)
    assert len(read) >= 20 and {name: hint for name, hint in read.items() if given.get(name) != hint} == {}


def test_every_function_level_import_says_why_it_waits():
    """An import inside a function is for a heavy optional dependency or start-up time; a comment says which. The
    package's modules and the scripts alike."""
    files = [*layers.modules().values(), *layers.script_modules().values()]
    unexplained = [line for path in files for line in layers.unexplained_function_imports(path)]
    assert unexplained == []


def test_the_import_checks_see_what_they_guard(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text("def f():\n    import torch\n\n\ndef g():\n    # torch only when g runs: start-up time\n"
                      "    import torch\n    import numpy\n")
    assert layers.unexplained_function_imports(source) == ["probe.py:2: import torch"]
    arrow = ("hf_vanilla.files.atomic", "hf_vanilla.modeling_vanilla")
    assert layers.cycles({arrow[0]: frozenset({arrow[1]}), arrow[1]: frozenset({arrow[0]})}) == [sorted(arrow)]


def test_every_module_belongs_to_a_layer():
    assert [name for name in layers.graph() if layers.layer_of(name) is None] == []


def test_the_layers_themselves_point_one_way():
    assert [name for name in layers.LAYERS if name in layers.below(name)] == []


def test_the_checks_see_a_cycle_and_an_arrow_up():
    """The checks can fail: a file utility importing the model, a card importing training, two modules importing
    each other."""
    edges = {"hf_vanilla.files.atomic": frozenset({"hf_vanilla.modeling_vanilla"}),
             "hf_vanilla.publishing.card": frozenset({"hf_vanilla.training.outputs", "hf_vanilla.tasks"}),
             "hf_vanilla.training.outputs": frozenset({"hf_vanilla.publishing.card"})}
    assert layers.upward_arrows(edges) == [
        "hf_vanilla.files.atomic (files) -> hf_vanilla.modeling_vanilla (model)",
        "hf_vanilla.publishing.card (publishing) -> hf_vanilla.training.outputs (training)"]
    assert layers.cycles({**edges, "hf_vanilla.tasks": frozenset()}) == [
        ["hf_vanilla.publishing.card", "hf_vanilla.training.outputs"]]


def test_imports_inside_functions_and_annotations_count(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .training import options\n"
                      "def f():\n    from .files import atomic\n    from . import convert\n")
    known = {"hf_vanilla.files.atomic", "hf_vanilla.convert", "hf_vanilla.training.options", "hf_vanilla.training"}
    assert layers.imports_of("hf_vanilla.probe", source, known) == {
        "hf_vanilla.files.atomic", "hf_vanilla.convert", "hf_vanilla.training.options"}
    found = {(i.target, i.typing_only, i.in_function) for i in layers.package_imports("hf_vanilla.probe", source, known)}
    assert found == {("hf_vanilla.training.options", True, False), ("hf_vanilla.files.atomic", False, True),
                     ("hf_vanilla.convert", False, True)}


def test_every_file_the_architecture_page_sends_a_change_to_exists():
    named = [name for _, where in layers.WHERE_A_CHANGE_GOES for name in re.findall(r"`([^`]+)`", where)
             if "<" not in name and "*" not in name]
    assert len(named) >= 10 and [name for name in named if not (layers.SOURCE / name).exists()] == []


def test_the_architecture_page_is_generated_from_the_code():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert page == layers.page(), "regenerate: python -m hf_vanilla.tools.layers > docs/architecture.md"


def _extra_checks() -> list[tuple[str, str]]:
    """(module, extra) for every module that checks an extra where it is entered: read from the code."""
    found = []
    for name, path in layers.modules().items():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            call = node.value if isinstance(node, ast.Expr) else None
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "require_extra":
                found.append((name, call.args[0].value))
    return sorted(found)


def test_the_layers_that_need_an_extra_check_it():
    assert _extra_checks() == [("hf_vanilla.corpora", "train"), ("hf_vanilla.tools.viz", "viz"),
                               ("hf_vanilla.training", "train")]


@pytest.mark.parametrize(("module", "extra"), _extra_checks())
def test_a_missing_extra_fails_in_one_line_naming_it(module, extra):
    """Each module of the extra blocked in turn (an import of it fails, as when it is not installed). The process
    starts as the command does (no registration at import), so transformers does not probe the blocked module."""
    for missing in EXTRA_MODULES[extra]:
        script = f"import sys\nsys.argv = ['hf-vanilla']\nsys.modules[{missing!r}] = None\nimport {module}\n"
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert proc.returncode == 1
        assert proc.stderr.splitlines()[-1] == (
            f"hf_vanilla.extras.MissingExtraError: {module} needs the [{extra}] extra ({missing} not installed): "
            f"pip install 'hf_vanilla[{extra}]'")


def test_the_command_says_which_extra_a_subcommand_needs():
    script = "import sys\nsys.argv = ['hf-vanilla']\nsys.modules['accelerate'] = None\nfrom hf_vanilla.cli import main\nsys.exit(main(['train', '--help']))\n"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == ("hf-vanilla: hf_vanilla.training needs the [train] extra (accelerate not installed): "
                           "pip install 'hf_vanilla[train]'\n")


def _extra_distributions(extras: dict[str, list[str]], extra: str) -> set[str]:
    """The distributions ``extra`` installs, with the extras it names (``hf_vanilla[viz,eval]``) expanded."""
    found = set()
    for requirement in extras[extra]:
        name = requirement.split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip()
        if name == "hf_vanilla":
            for inner in requirement.split("[")[1].rstrip("]").split(","):
                found |= _extra_distributions(extras, inner.strip())
        else:
            found.add(name)
    return found


def test_the_extras_install_what_their_layers_check():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    for extra, needed in EXTRA_MODULES.items():
        assert set(needed) <= _extra_distributions(extras, extra), extra
    assert set().union(*EXTRA_MODULES.values()) <= _extra_distributions(extras, "dev")
    base = {requirement.split(">")[0] for requirement in project["dependencies"]}
    assert base == {"torch", "transformers", "safetensors", "huggingface_hub", "filelock"}


def test_every_folder_of_the_package_installs():
    """setuptools' find_packages installs only folders with an __init__.py: a layer without one would be missing
    from `pip install hf_vanilla`."""
    folders = {path.parent for path in layers.SOURCE.rglob("*.py")}
    assert sorted(str(f) for f in folders if not (f / "__init__.py").is_file()) == []
