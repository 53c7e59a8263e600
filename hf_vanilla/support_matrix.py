"""The support matrix: each value of each option (hf_vanilla/variants.py) against transformers' attention
backends, vLLM, parallelism and each ``to_hf`` target. docs/support-matrix.md is this module's output
(``python -m hf_vanilla.support_matrix > docs/support-matrix.md``); tests/test_variants.py keeps them equal."""

from typing import Any

from . import variants
from .configuration_vanilla import VanillaConfig
from .convert import ARCHITECTURES, Architecture

#: transformers' attention implementations, by how they treat an additive attention bias.
BACKENDS = ("eager", "sdpa", "flex_attention", "flash_attention_2")
BACKENDS_TAKING_BIAS = ("eager", "sdpa", "flex_attention")

INTRO = """# Support matrix

Which value of which option works where: transformers' attention backends, vLLM (through its Transformers
backend), tensor and pipeline parallelism, and each conversion target of `hf_vanilla.convert.to_hf`. Each cell says
*yes* (exact), or *refused* with the reason the model or the converter gives, before any token is computed.

Generated from the table of variants (`hf_vanilla/variants.py`) and the conversion tables
(`hf_vanilla/convert.py`) by `python -m hf_vanilla.support_matrix`; a test regenerates it and compares. A new
option value is one row in the table (and, for a positional scheme, one class in `positional.py`): it appears here.
"""


def _label(row: variants.Variant) -> str:
    value = "≠ default" if row.value == variants.NON_DEFAULT else repr(row.value)
    return f"`{row.option}={value}`" if row.value != variants.NON_DEFAULT else f"`{row.option}` {value}"


def backend_cell(row: variants.Variant, backend: str) -> str:
    if row.attention_bias and backend not in BACKENDS_TAKING_BIAS:
        return "refused: no additive bias"
    return "yes"


def vllm_cell(row: variants.Variant) -> str:
    where = " (decoders; an encoder pools)" if row.output_layer else ""
    if row.vllm_refusal:
        return f"refused{where}: {row.vllm_refusal}"
    return f"yes, as `{row.vllm_reads}`" if row.vllm_reads else "yes"


def pipeline_cell(row: variants.Variant) -> str:
    if row.pipeline_refusal:
        return f"no plan: {row.pipeline_refusal}"
    return "no plan: adds to the embeddings" if row.adds_to_embeddings else "yes"


def _native_form(arch: Architecture) -> dict[str, Any]:
    """The VanillaConfig values the target hard-codes, its default (first) head's included."""
    head = next(iter(arch.heads.values()))
    return {**arch.fixed, **head.fixed}


def conversion_cell(row: variants.Variant, arch: Architecture) -> str:
    if row.option == "architecture":
        return "yes" if row.value == arch.family else f"refused: {arch.model_type} converts {arch.family} models only"
    fixed = _native_form(arch)
    if row.option in fixed:
        native = fixed[row.option]
        default = VanillaConfig.__dataclass_fields__[row.option].default
        same = native != default if row.value == variants.NON_DEFAULT else native == row.value
        return "yes" if same else f"refused: {arch.model_type} has `{row.option}={native!r}`"
    if row.option in arch.renamed:
        return "yes"
    if row.option in arch.derived:
        return f"yes where {arch.model_type} can say it"
    return f"refused: {arch.model_type} has no `{row.option}`"


def matrix() -> str:
    """The table: one line per row of the table of variants."""
    targets = list(ARCHITECTURES.values())
    header = ["value", *BACKENDS, "vLLM", "tensor parallel", "pipeline parallel", *(f"to_hf {a.model_type}" for a in targets)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in variants.VARIANTS:
        cells = [_label(row), *(backend_cell(row, b) for b in BACKENDS), vllm_cell(row), row.tensor_parallel,
                 pipeline_cell(row), *(conversion_cell(row, arch) for arch in targets)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def page() -> str:
    """docs/support-matrix.md."""
    summaries = "\n".join(f"- {_label(row)}: {row.summary}" for row in variants.VARIANTS)
    return f"{INTRO}\n{matrix()}\n\n## What each value is\n\n{summaries}\n"


if __name__ == "__main__":
    print(page(), end="")
