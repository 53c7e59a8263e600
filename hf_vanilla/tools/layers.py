"""The package's layers, declared once, and its import graph, read from the code.

Each layer may import only itself and the layers it ``uses`` (and what those use, transitively): arrows point one
way, down. tests/test_layers.py reads every import of every module (module level and inside functions; imports
under ``if TYPE_CHECKING:`` are annotations, not imports, and are left out), and checks that the graph has no cycle,
that every module belongs to a layer, and that no arrow goes up. ``python -m hf_vanilla.tools.layers`` writes
docs/architecture.md, which the test keeps equal to what this module generates.
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
    "model": Layer(("configuration_vanilla", "modeling_vanilla", "positional", "variants", "transformers_releases"), (),
                   None,
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


def _runtime_nodes(tree: ast.Module) -> Iterator[ast.AST]:
    """Every node of ``tree`` except the bodies of ``if TYPE_CHECKING:`` blocks."""
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and ast.unparse(child.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
                todo.extend(child.orelse)
                continue
            todo.append(child)


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The package modules ``module`` imports, at module level or inside functions."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:  # `from pkg import submodule` imports the submodule
                found.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in known else target)
    return (found & known) - {module}


@cache
def graph() -> dict[str, frozenset[str]]:
    """Module -> the package modules it imports."""
    found = modules()
    return {name: frozenset(imports_of(name, path, set(found))) for name, path in found.items()}


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


def layer_edges(edges: dict[str, frozenset[str]]) -> list[tuple[str, str]]:
    """The arrows between layers that the code has (not only those allowed), in the table's order."""
    pairs = {(layer_of(a), layer_of(b)) for a, targets in edges.items() for b in targets}
    order = list(LAYERS)
    return sorted(((a, b) for a, b in pairs if a and b and a != b), key=lambda p: (order.index(p[0]), order.index(p[1])))


def _short(module: str) -> str:
    return module if module == PACKAGE else module[len(PACKAGE) + 1:]


def page() -> str:
    """docs/architecture.md."""
    edges = graph()
    lines = [
        "# Architecture: the layers of hf_vanilla",
        "",
        "Generated from `hf_vanilla/tools/layers.py` (the layers, declared once) and the imports in the code by",
        "`python -m hf_vanilla.tools.layers > docs/architecture.md`; tests/test_layers.py regenerates it and compares,",
        "and checks that the import graph has no cycle and no arrow from a layer to one it may not use.",
        "Imports inside functions count; imports under `if TYPE_CHECKING:` (annotations only) do not.",
        "",
        "`pip install hf_vanilla` installs the base (the model core); a layer with an extra checks it where it is",
        "entered and fails in one line naming it (`hf_vanilla/extras.py`). `scripts/base_install_check.sh` builds a",
        "fresh environment with the base alone and loads, converts a GPT-2 and generates.",
        "",
        "## Layers, lowest first",
        "",
        "| layer | modules | may import | extra | what it is |",
        "|---|---|---|---|---|",
    ]
    for name, layer in LAYERS.items():
        members = ", ".join(f"`{_short(m)}`" for m in sorted(edges) if layer_of(m) == name)
        uses = ", ".join(sorted(below(name), key=list(LAYERS).index)) or "-"
        extra = f"`[{layer.extra}]`" if layer.extra else "base"
        lines.append(f"| {name} | {members} | {uses} | {extra} | {layer.role} |")
    lines += ["", *NEW_VALUE_COST.splitlines()]
    lines += ["", "## Imports between layers", "", "```mermaid", "graph BT"]
    lines += [f"    {a} --> {b}" for a, b in layer_edges(edges)]
    lines += ["```", "", "## Imports between modules", ""]
    for module, targets in sorted(edges.items()):
        if targets:
            lines.append(f"- `{_short(module)}` -> {', '.join(f'`{_short(t)}`' for t in sorted(targets))}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(page())
