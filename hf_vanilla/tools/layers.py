"""The package's layers, declared once, and its import graph, read from the code.

Each layer may import only itself and the layers it ``uses`` (and what those use, transitively): arrows point one
way, down. tests/test_layers.py reads every import of every module (module level, inside functions, and under
``if TYPE_CHECKING:``: a typing-only import is still a dependency a reader follows, and hides a circle as well as a
runtime one), and checks that the graph has no cycle, that every module belongs to a layer, and that no arrow goes
up; the scripts (the doors in scripts/, which import each other by name) join the graph for the cycle check. A
function-level import, in the package or a script, says why in a comment (a heavy optional dependency, start-up
time).
``python -m hf_vanilla.tools.layers`` writes docs/architecture.md, which the test keeps equal to what this module
generates.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PACKAGE = "hf_vanilla"
SOURCE = Path(__file__).resolve().parents[1]  # the package folder
SCRIPTS = SOURCE.parent / "scripts"  # the doors of a checkout: each runs by path, with its folder on sys.path


@dataclass(frozen=True)
class Layer:
    """One layer: its top-level modules and subpackages (every module under a subpackage is the layer's), the
    layers it may import, the extra its entry needs (None: the base install) and what it is for."""

    modules: tuple[str, ...]
    uses: tuple[str, ...]
    extra: str | None
    role: str


#: The layers, lowest first. Names are module paths relative to the package ("" is the package itself).
LAYERS: dict[str, Layer] = {
    "model": Layer(("configuration_vanilla", "modeling_vanilla", "positional", "variants", "rules", "engines",
                    "transformers_releases"), (), None,
                   "the travelling files: saved with every checkpoint, they import only torch, transformers and "
                   "each other"),
    "files": Layer(("files", "errors", "arguments"), (), None, "atomic files and folders, the output folder's record "
                   "and lock, the error base every command says in one sentence and the argument checks made before "
                   "anything heavy loads: no model"),
    "core": Layer(("", "extras", "checkpoint", "convert", "presets", "sizing"), ("model", "files"), None,
                  "registration with the Auto classes, what a checkpoint is made of, conversion to and from "
                  "native transformers models, the named presets, a config's size against the memory, the "
                  "extras' one-line check"),
    "corpora": Layer(("corpora",), ("core", "files"), "train", "real corpora fetched from package registries, "
                     "tokenizer training"),
    "tasks": Layer(("tasks",), ("corpora",), None, "one module per training task: data, metrics, the card's "
                   "task-specific text"),
    "publishing": Layer(("publishing",), ("core", "tasks"), None, "model cards and pushes to the Hub"),
    "tools": Layer(("tools", "support_matrix"), ("core",), None,
                   "measuring and pictures: bench, viz (extra: viz), the generated docs"),
    "training": Layer(("training",), ("publishing", "tools"), "train", "options, the run, callbacks, outputs, "
                      "evaluation"),
    "experiments": Layer(("experiments",), ("training",), "train", "controlled experiments over the table's rows: "
                         "compare, the scaling sweep, their runner and statistics"),
    "commands": Layer(("cli", "commands", "inference"), ("core",), None,
                      "the hf-vanilla command: one dispatch table that imports a subcommand's layer when it runs"),
}


#: Where a change goes: (the change, the files it touches), for a newcomer's first edit. tests/test_layers.py checks
#: that every file named exists.
WHERE_A_CHANGE_GOES: tuple[tuple[str, str], ...] = (
    ("a new norm, activation or positional scheme", "a row in `variants.py`, a class in `modeling_vanilla.py` "
     "(norm, activation) or `positional.py` (scheme): see below"),
    ("a config field, its default or its check", "`configuration_vanilla.py`; the rules over the rows in `rules.py`"),
    ("what vLLM or an attention function may serve", "`engines.py` (the rows' own refusals: `variants.py`)"),
    ("attention, the block, a stack, a task head", "`modeling_vanilla.py` (read top to bottom: norms, attention, "
     "block, stacks, the bare model, heads)"),
    ("a difference between transformers releases", "`transformers_releases.py`"),
    ("conversion to or from a native transformers model", "`convert.py`: one table of weight names per architecture"),
    ("what a saved folder holds, its code files", "`checkpoint.py`"),
    ("a training task (data, metrics, card text)", "`tasks/<task>.py`, entered in `tasks/__init__.py`"),
    ("a training option or the run itself", "`training/options.py`, `training/run.py`"),
    ("an `hf-vanilla` subcommand", "`cli.py` (the dispatch table) and the layer's own `*_cli.py`"),
    ("a benchmark row", "`tools/bench.py` (pairs), `tools/ladder.py` (the user's sizes)"),
    ("cards and pushes to the Hub", "`publishing/`"),
    ("file writes, the output folder's record and lock", "`files/`"),
)

#: What a new value of a structural option costs, shown by tests that add one the way a contributor would.
NEW_VALUE_COST = """## What a new norm, activation or positional scheme costs

Every structural option is a row of the table of variants (`hf_vanilla/variants.py`): its value, what it holds,
and what each engine does with it (vLLM, tensor and pipeline parallelism, torch.export, ONNX, each `to_hf`
target). Config validation, the parallel plans, the engine refusals, the converter, the support matrix
(docs/support-matrix.md) and the tests' grids read the table when they run; none keeps a copy of it.

- A new **norm** is one `norm_type` row and one class naming it (`norm_type = "..."`, a `VanillaNorm` subclass
  with `from_config`); `build_norm` builds whichever class names the config's value.
- A parameter-free activation of transformers' `ACT2FN` needs nothing: the config takes its name, as built-in configs
  do, and one row stands for every such name (the grids check it with `mish`). A new **activation** otherwise is one
  `hidden_act` row and one class naming it (`activations = ("...",)`, a `RowActivation` subclass), where `ACT2FN` has
  no such module or it has parameters of its own.
- A new **positional scheme** is one `position_embedding_type` row and one `PositionalScheme` subclass naming it.

Nothing else changes: no other package file, no test edit. A row fails closed: it claims no `to_hf` target and no
engine it does not name (`to_hf=`, `engines=`; the activation helper defaults to none either), so `to_hf` refuses
such a value in a sentence naming it (never the native model's `KeyError`), vLLM refuses it in ours, tensor
parallelism keeps the attention heads whole and pipeline parallelism has no plan. A norm's weight starts at 1 and its
bias at 0 through `VanillaNorm`'s own initialisation, whatever the class is called (transformers draws only norms
named LayerNorm or RMSNorm), and a module with parameters that nothing initialises is refused when the weights are
drawn. A value is registered once: a second row or class under a taken name is refused, so a shipped class is
never replaced. tests/test_variants.py shows it:
`test_a_norm_and_an_activation_added_as_one_row_and_one_class_each` registers ScaleNorm and Swish-beta (two rows,
two classes with parameters, inside the test alone) and runs the grids' own checks on them: build, forward, save
and load, initialisation on the meta device, an engine's build, torch.export, and every `to_hf` target refusing
them; `test_a_scheme_added_as_one_class_and_one_row` does the same for a KERPLE-log scheme, and
`test_rows_added_without_declarations_initialise_themselves_and_every_target_and_engine_refuses_them` adds a norm
named neither LayerNorm nor RMSNorm and squareplus (an activation outside `ACT2FN`) declaring nothing."""


def below(layer: str) -> set[str]:
    """The layers ``layer`` may import: those it uses and, transitively, theirs."""
    seen: set[str] = set()
    todo = list(LAYERS[layer].uses)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(LAYERS[name].uses)
    return seen


def modules() -> dict[str, Path]:
    """Every module of the package (dotted name -> file)."""
    found = {}
    for path in sorted(SOURCE.rglob("*.py")):
        parts = [PACKAGE, *path.relative_to(SOURCE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def layer_of(module: str) -> str | None:
    """The layer that declares ``module`` (a top-level module by name, a subpackage's module by its folder)."""
    relative = module[len(PACKAGE) + 1:] if module != PACKAGE else ""
    for name, layer in LAYERS.items():
        for declared in layer.modules:
            if relative == declared or (declared and relative.startswith(declared + ".")):
                return name
    return None


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


@dataclass(frozen=True)
class Import:
    """One import of a package module: where it stands, and whether only type checkers run it."""

    target: str
    line: int
    typing_only: bool
    in_function: bool


def _walk(node: ast.AST, typing_only: bool = False, in_function: bool = False) -> Iterator[tuple[ast.AST, bool, bool]]:
    """Every node under ``node``, with whether it sits under ``if TYPE_CHECKING:`` and whether inside a function."""
    for child in ast.iter_child_nodes(node):
        child_typing = typing_only or (_is_type_checking(node) and child in node.body)
        child_function = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        yield child, child_typing, child_function
        yield from _walk(child, child_typing, child_function)


def unexplained_function_imports(path: Path) -> list[str]:
    """The imports inside functions with no comment on their line or the line above saying why they wait."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found = []
    for node, _, in_function in _walk(ast.parse("\n".join(lines))):
        if in_function and isinstance(node, (ast.Import, ast.ImportFrom)) and not _explained(lines, node.lineno - 1):
            found.append(f"{path.name}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    return found


def _explained(lines: list[str], index: int) -> bool:
    """A comment on the import's line, or above the run of imports (blank lines between groups included) it is in."""
    if "#" in lines[index]:
        return True
    while index > 0 and (lines[index - 1].strip().startswith(("import ", "from ")) or not lines[index - 1].strip()):
        index -= 1
    return index > 0 and lines[index - 1].strip().startswith("#")


def package_imports(module: str, path: Path, known: set[str]) -> list[Import]:
    """Every import of a package module in ``module``'s file: module level, inside functions, under TYPE_CHECKING."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node, typing_only, in_function in _walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            # `from pkg import submodule` imports the submodule
            targets = [f"{target}.{alias.name}" if f"{target}.{alias.name}" in known else target for alias in node.names]
        else:
            continue
        found += [Import(t, node.lineno, typing_only, in_function) for t in targets if t in known and t != module]
    return found


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The package modules ``module`` imports: at module level, inside functions and under ``TYPE_CHECKING``."""
    return {found.target for found in package_imports(module, path, known)}


@cache
def graph() -> dict[str, frozenset[str]]:
    """Module -> the package modules it imports."""
    found = modules()
    return {name: frozenset(imports_of(name, path, set(found))) for name, path in found.items()}


def script_modules() -> dict[str, Path]:
    """Every script of scripts/ (``scripts.name`` -> file): its folder's own modules, importable by name."""
    return {f"scripts.{path.stem}": path for path in sorted(SCRIPTS.glob("*.py"))}


def script_graph() -> dict[str, frozenset[str]]:
    """Script -> the scripts (imported by name) and the package modules it imports, wherever the import stands."""
    package = set(modules())
    scripts = script_modules()
    found = {}
    for name, path in scripts.items():
        named = set()
        for node, _, _ in _walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                named |= {alias.name.partition(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                named.add(node.module.partition(".")[0])
        siblings = {f"scripts.{stem}" for stem in named} & set(scripts) - {name}
        found[name] = frozenset(siblings | imports_of(name, path, package))
    return found


def cycles(edges: dict[str, frozenset[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in edges.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while (top := stack.pop()) != node:
                component.append(top)
            if component:
                found.append(sorted([node, *component]))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def upward_arrows(edges: dict[str, frozenset[str]]) -> list[str]:
    """Imports from a module to a layer it may not use, as ``a (layer) -> b (layer)``."""
    wrong = []
    for module, targets in sorted(edges.items()):
        layer = layer_of(module)
        for target in sorted(targets):
            other = layer_of(target)
            if layer is not None and other is not None and other != layer and other not in below(layer):
                wrong.append(f"{module} ({layer}) -> {target} ({other})")
    return wrong


def _short(module: str) -> str:
    return module if module == PACKAGE else module[len(PACKAGE) + 1:]


def page() -> str:
    """docs/architecture.md."""
    lines = [
        "# Architecture: where a change goes",
        "",
        "Generated by `python -m hf_vanilla.tools.layers > docs/architecture.md` from the layers declared in",
        "`hf_vanilla/tools/layers.py` and the imports in the code; tests/test_layers.py regenerates and compares it.",
        "",
        "| to change | edit |",
        "|---|---|",
        *(f"| {change} | {where} |" for change, where in WHERE_A_CHANGE_GOES),
        "",
        "## Layers, lowest first",
        "",
        "A layer imports only the layers below it. The checks count every import (module level, inside functions and",
        "typing-only ones under `if TYPE_CHECKING:`) and hold the graph to no circle (the scripts in `scripts/`",
        "included) and no arrow up. A function-level import, in the package or a script, says in a comment why it",
        "waits (a heavy optional dependency, start-up time). `pip install hf_vanilla` installs the base; a layer with",
        "an extra fails on entry in one line naming it (`hf_vanilla/extras.py`).",
        "",
        "| layer | modules | may import | extra | what it is |",
        "|---|---|---|---|---|",
    ]
    for name, layer in LAYERS.items():
        members = ", ".join(f"`{m}/`" if m and (SOURCE / m).is_dir() else f"`{m or '__init__'}`" for m in layer.modules)
        uses = ", ".join(sorted(below(name), key=list(LAYERS).index)) or "-"
        extra = f"`[{layer.extra}]`" if layer.extra else "base"
        lines.append(f"| {name} | {members} | {uses} | {extra} | {layer.role} |")
    lines += ["", *NEW_VALUE_COST.splitlines()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(page())
