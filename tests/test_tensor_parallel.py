"""Tensor parallelism: ``from_pretrained(folder, tp_plan="auto")`` on two CPU processes gives one process's results.

Each case is a tiny saved model (cases that build the same model, such as rows at their default value, share
one); one ``torchrun --nproc-per-node 2`` launch (gloo) loads every case on both ranks
through the files that travel with a checkpoint (tests/tp_worker.py), and this process compares each rank's
logits and greedy tokens with the same folder loaded here, in one process. It covers the three families (transformers
5.24 applies a plan to any of them), tied and untied heads, gated and plain FFNs, grouped-query and multi-query
attention, and every positional scheme, including the two whose per-head bias needs care (T5's relative bias is
split with the heads; ALiBi keeps self-attention whole). The example in docs/deploying.md runs in the same launch.

Tolerance: a row-wise layer (attention output, FFN down projection, and the all-reduce after each) sums its
products in two halves and then adds them, where one process sums them in one go: the same terms in another order.
In float32 (eps 1.2e-7) that moves a logit of these models by a few 1e-7 per layer: the largest difference measured
is 1.4e-6 (the ALiBi decoder), most are below 1e-6. The test allows atol=rtol=1e-5, seven times that, and far below
what a wrong split gives (one head lost in the last layer moves these logits, |logit| < 7, by 7e-3 to 2e-2).
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from operator import attrgetter
from pathlib import Path

import pytest
import torch
import transformers
from transformers.distributed.parallel_utils import replace_layer_number_by_wildcard
from transformers.distributed.pipeline_parallel import PipelineIdentityLayer

import hf_vanilla as hv
from hf_vanilla import variants
from hf_vanilla.variants import rows_of
from tests.factories import (
    FAMILIES,
    SCHEMES,
    config_for_row,
    padded_batch,
    tiny_config,
    tiny_model,
    tiny_tokenizer,
)

ROOT = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).with_name("tp_worker.py")
TOLERANCE = dict(atol=1e-5, rtol=1e-5)
NEW_TOKENS = 6

HEAD_CLASS = {"encoder": "VanillaForMaskedLM", "decoder": "VanillaForCausalLM", "encoder-decoder": "VanillaForSeq2SeqLM"}
AUTO_CLASS = {"VanillaForMaskedLM": "AutoModelForMaskedLM", "VanillaForCausalLM": "AutoModelForCausalLM",
              "VanillaForSeq2SeqLM": "AutoModelForSeq2SeqLM",
              "VanillaForSequenceClassification": "AutoModelForSequenceClassification"}

SPLIT_ATTENTION = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.o_proj.weight")
SPLIT_FFN = ("mlp.up_proj.weight", "mlp.down_proj.weight")

#: name -> (family, positional scheme, config overrides, head (None: the family's LM head), parameters the plan must
#: split (name fragments), parameters it must keep whole on every rank).
CASES = {
    "llama-like decoder": ("decoder", "rope", dict(gated_ffn=True, hidden_act="silu", norm_type="rmsnorm",
                                                   norm_position="pre", tie_word_embeddings=False), None,
                           (*SPLIT_ATTENTION, *SPLIT_FFN, "mlp.gate_proj.weight", "lm_head.weight", "embed_tokens"), ()),
    "gpt2-like decoder, tied": ("decoder", "learned", dict(num_key_value_heads=4, norm_position="pre"), None,
                                (*SPLIT_ATTENTION, *SPLIT_FFN, "embed_tokens"), ("positions.embeddings",)),
    "decoder, multi-query, no positions": ("decoder", "none", dict(num_key_value_heads=1), None, SPLIT_FFN,
                                           ("self_attn.q_proj.weight", "self_attn.k_proj.weight")),
    "bert-like encoder": ("encoder", "learned", dict(embedding_norm=True, type_vocab_size=2, lm_head_transform=True,
                                                     lm_head_bias=True, hidden_act="gelu"), None,
                          (*SPLIT_ATTENTION, *SPLIT_FFN, "lm_head.bias"), ("lm_head_transform.0.weight",)),
    "encoder, T5 relative bias, classifier": ("encoder", "relative", dict(num_labels=3),
                                              "VanillaForSequenceClassification",
                                              (*SPLIT_ATTENTION, "positions.relative_attention_bias.weight"),
                                              ("score.weight",)),
    "paper encoder-decoder, tied": ("encoder-decoder", "sinusoidal", {}, None,
                                    (*SPLIT_ATTENTION, *SPLIT_FFN, "cross_attn.q_proj.weight", "cross_attn.v_proj.weight"),
                                    ()),
    "t5-like encoder-decoder, gated, untied": ("encoder-decoder", "relative", dict(
        gated_ffn=True, hidden_act="gelu_new", norm_type="rmsnorm", norm_position="pre", attention_bias=False,
        mlp_bias=False, tie_word_embeddings=False), None,
        ("encoder.positions.relative_attention_bias.weight", "decoder.positions.relative_attention_bias.weight",
         "cross_attn.k_proj.weight", "mlp.gate_proj.weight", "lm_head.weight"), ()),
    "encoder-decoder, ALiBi": ("encoder-decoder", "alibi", {}, None, ("cross_attn.q_proj.weight", *SPLIT_FFN),
                               ("self_attn.q_proj.weight",)),
}


def row_case(row: variants.Variant) -> tuple:
    """The tiny model the suite builds for this row (tests/factories.py's config_for_row): what the rows it uses say
    tensor parallelism splits (a scheme's per-head parameters too) or keeps whole. Read from the table, so a new
    row runs on two ranks without an edit here."""
    config = config_for_row(row)
    overrides = {} if row.option in ("architecture", "position_embedding_type") else {row.option: row.setting}
    if any(used.tensor_parallel == variants.TP_WHOLE for used in rows_of(config)):
        return (config.architecture, config.position_embedding_type, overrides, None, SPLIT_FFN,
                ("self_attn.q_proj.weight", "self_attn.k_proj.weight"))
    own = tuple(f"{used.module_name}.{name}" for used in rows_of(config) for name, _ in used.tensor_parallel_plan
                if name.endswith(".weight"))
    return (config.architecture, config.position_embedding_type, overrides, None, (*SPLIT_ATTENTION, *own), ())


def rows_as_cases() -> dict[str, tuple]:
    """One case per row of the table of variants, read when the tests are collected."""
    return {f"row {row.option}={row.value}": row_case(row) for row in variants.VARIANTS}


CASES |= rows_as_cases()


# ----------------------------------------------------------------------------------------------
# The plans (one process): they follow the config, name real modules, and are never saved


def plan_of(**fields) -> dict[str, str]:
    return tiny_config(**fields).base_model_tp_plan


def test_tp_plan_follows_the_ffn_the_heads_and_the_positions():
    plain, gated = plan_of(gated_ffn=False), plan_of(gated_ffn=True)
    assert "layers.*.mlp.gate_proj" not in plain and gated["layers.*.mlp.gate_proj"] == "colwise"
    assert plain["layers.*.self_attn.k_proj"] == "colwise" and plain["layers.*.mlp.down_proj"] == "rowwise"
    whole_attention = [plan_of(num_key_value_heads=1), plan_of(scheme="alibi")]
    assert all(not any("self_attn" in key for key in plan) for plan in whole_attention)
    relative = plan_of(scheme="relative")
    assert relative["positions.relative_attention_bias.weight"] == "embedding_colwise"
    assert relative["positions.relative_attention_bias"] == "local_params"
    assert not any("relative_attention_bias" in key for key in plan_of(scheme="relative", num_key_value_heads=1))


def test_tp_plan_follows_the_family():
    # the decoder family's bare model is its own causal stack: its layers' names start the plan's keys
    stacks = {family: {key.partition("layers.")[0] for key in plan_of(family=family)} for family in FAMILIES}
    assert stacks == {"encoder": {"encoder."}, "decoder": {""}, "encoder-decoder": {"encoder.", "decoder."}}
    seq2seq = plan_of(family="encoder-decoder", scheme="alibi")
    assert seq2seq["decoder.layers.*.cross_attn.v_proj"] == "colwise"  # ALiBi biases self-attention only
    assert not any("cross_attn" in key for key in plan_of(family="decoder"))


def test_plans_follow_fields_changed_after_construction():
    config = tiny_config()
    config.gated_ffn = True
    assert "layers.*.mlp.gate_proj" in config.base_model_tp_plan


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_rule_names_a_module_of_the_model(family, scheme):
    """transformers applies the plans by name: a rule naming nothing (a stack's rule prefixed twice) is lost."""
    model = tiny_model(family, scheme, gated_ffn=True)
    names = {replace_layer_number_by_wildcard(name) for name, _ in [*model.named_modules(), *model.named_parameters()]}
    assert model.tp_plan.keys() <= names, sorted(model.tp_plan.keys() - names)
    assert {"lm_head", "model.embed_tokens"} <= model.tp_plan.keys()
    assert model.pp_plan.keys() <= names, sorted(model.pp_plan.keys() - names)


def test_saved_plans_are_derived_again_on_load(tmp_path, caplog):
    """config.json never holds a plan (it could go stale); one written there by hand is ignored, with a warning."""
    model = tiny_model("decoder", "rope", gated_ffn=True)
    model.save_pretrained(tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert not {"base_model_tp_plan", "base_model_pp_plan"} & written.keys()
    assert hv.VanillaConfig.from_pretrained(tmp_path).base_model_tp_plan == model.config.base_model_tp_plan
    written["base_model_tp_plan"] = {"layers.*.mlp.gate_proj": "rowwise"}
    (tmp_path / "config.json").write_text(json.dumps(written))
    with caplog.at_level("WARNING"):
        reloaded = hv.VanillaForCausalLM.from_pretrained(tmp_path)
    assert reloaded.config.base_model_tp_plan == model.config.base_model_tp_plan
    assert reloaded.tp_plan == model.tp_plan
    assert "ignores ['base_model_tp_plan']" in caplog.text


def test_plans_cannot_be_assigned():
    with pytest.raises(ValueError, match="derived from the fields.*DistributedConfig"):
        tiny_config().base_model_tp_plan = {}


def run_in_two_stages(model, plan: dict, input_ids: torch.Tensor, stage_layers: int) -> torch.Tensor:
    """vLLM's pipeline split by the plan (its order: modules before the layer list, the list, modules after):
    the first stage keeps the layers below ``stage_layers``, the second receives their output as inputs_embeds."""
    names = list(plan)
    (list_index,) = [i for i, name in enumerate(names) if isinstance(attrgetter(name)(model), torch.nn.ModuleList)]
    first, second = copy.deepcopy(model), copy.deepcopy(model)
    for name in names[list_index + 1:]:
        set_submodule(first, name, PipelineIdentityLayer())
    for name in names[:list_index]:
        set_submodule(second, name, PipelineIdentityLayer())
    layers_first, layers_second = attrgetter(names[list_index])(first), attrgetter(names[list_index])(second)
    for index in range(len(layers_first)):
        if index < stage_layers:
            layers_second[index] = PipelineIdentityLayer()
        else:
            layers_first[index] = PipelineIdentityLayer()
    hidden = first(input_ids=input_ids).last_hidden_state
    return second(inputs_embeds=hidden).last_hidden_state


def set_submodule(model, name: str, module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(attrgetter(parent)(model) if parent else model, child, module)


@pytest.mark.parametrize(("family", "scheme"), [("decoder", "rope"), ("decoder", "alibi"), ("encoder", "relative"),
                                                ("decoder", "none")])
def test_pp_plan_splits_into_stages_that_give_the_whole_models_states(family, scheme):
    model = tiny_model(family, scheme, norm_position="pre", num_hidden_layers=3).model
    plan = model.config.base_model_pp_plan
    assert plan is not None and list(plan)[-1].endswith("final_norm")
    ids, _ = padded_batch(batch=2, length=7)
    with torch.no_grad():
        torch.testing.assert_close(run_in_two_stages(model, plan, ids, 2), model(input_ids=ids).last_hidden_state)


@pytest.mark.parametrize(("family", "scheme", "overrides"), [
    ("decoder", "sinusoidal", {}), ("decoder", "learned", {}), ("encoder", "rope", dict(embedding_norm=True)),
    ("encoder", "alibi", dict(type_vocab_size=2)), ("encoder-decoder", "rope", {}),
])
def test_no_pp_plan_where_a_stage_would_add_positions_or_norms_to_hidden_states_again(family, scheme, overrides):
    config = tiny_config(family, scheme, **overrides)
    assert config.base_model_pp_plan is None
    if family != "encoder-decoder":  # why: with the decoder's plan, the second stage would differ
        model = tiny_model(family, scheme, **overrides).model
        plan = tiny_config(family, "rope").base_model_pp_plan
        ids, _ = padded_batch(batch=2, length=7)
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if "norm" in name:  # a freshly initialised LayerNorm applied twice is the same: trained ones are not
                    parameter.normal_(1.0, 0.5)
            split = run_in_two_stages(model, plan, ids, 1)
        assert not torch.allclose(split, model(input_ids=ids).last_hidden_state, atol=1e-3)


# ----------------------------------------------------------------------------------------------
# Two ranks against one


def documented_example() -> str:
    """The Python example of docs/deploying.md's tensor-parallelism section."""
    text = (ROOT / "docs/deploying.md").read_text(encoding="utf-8")
    section = text.split("## Tensor parallelism", 1)[1].split("\n## ", 1)[0]
    (example,) = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    return example


def save_case(folder: Path, family: str, scheme: str, overrides: dict, head: str | None) -> dict:
    """Save the case's model and return what the worker needs: its Auto class and inputs."""
    head = head or HEAD_CLASS[family]
    torch.manual_seed(0)
    getattr(hv, head)(tiny_config(family, scheme, **overrides)).save_pretrained(folder)
    ids, mask = padded_batch(batch=3, length=9, left=family == "decoder")
    inputs = dict(input_ids=ids, attention_mask=mask)
    if family == "encoder-decoder" and head == "VanillaForSeq2SeqLM":
        inputs |= dict(decoder_input_ids=ids[:, :5], decoder_attention_mask=torch.ones_like(ids[:, :5]))
    generates = head in ("VanillaForCausalLM", "VanillaForSeq2SeqLM")
    return dict(auto_class=AUTO_CLASS[head], inputs={k: v.tolist() for k, v in inputs.items()}, generate=generates,
                new_tokens=NEW_TOKENS)


def one_process(folder: Path, spec: dict) -> dict:
    """The same folder loaded the same way, in this process only (this also fills transformers' module cache
    before the two ranks read it, so they never copy the model files at the same time)."""
    model = getattr(transformers, spec["auto_class"]).from_pretrained(folder, trust_remote_code=True)
    inputs = {name: torch.tensor(value) for name, value in spec["inputs"].items()}
    with torch.no_grad():
        seen = {"logits": model(**inputs).logits, "shapes": {n: list(p.shape) for n, p in model.named_parameters()}}
    if spec["generate"]:
        prompt = {name: inputs[name] for name in ("input_ids", "attention_mask")}
        seen["tokens"] = model.generate(**prompt, max_new_tokens=NEW_TOKENS, do_sample=False)
    return seen


def documented_run(folder: Path) -> tuple[str, str]:
    """``runs/main-shakespeare`` of the docs example (a tiny decoder and tokenizer), and what the example prints in one process."""
    run = folder / "runs/main-shakespeare"
    tokenizer = tiny_tokenizer("decoder")
    config = tiny_config("decoder", "rope", gated_ffn=True, vocab_size=len(tokenizer), tie_word_embeddings=False)
    torch.manual_seed(0)
    hv.VanillaForCausalLM(config).save_pretrained(run)
    tokenizer.save_pretrained(run)
    model = transformers.AutoModelForCausalLM.from_pretrained(run, trust_remote_code=True)
    prompt = transformers.AutoTokenizer.from_pretrained(run)(["the king"], return_tensors="pt")
    tokens = model.generate(**prompt, max_new_tokens=8, do_sample=False)
    return run, tokenizer.decode(tokens[0])


def model_of(spec: tuple) -> str:
    """What a case builds: its head and whole config (rows at their default value build the same model)."""
    family, scheme, overrides, head = spec[:4]
    return (head or HEAD_CLASS[family]) + tiny_config(family, scheme, **overrides).to_json_string(use_diff=False)


def first_case_building_each_model() -> dict[str, str]:
    """case -> the first case that builds the same model: each model is saved and run once, read by all its cases."""
    first: dict[str, str] = {}
    return {name: first.setdefault(model_of(spec), name) for name, spec in CASES.items()}


@pytest.fixture(scope="module")
def launch(tmp_path_factory) -> dict:
    """Save every model the cases build, compute one process's results, run both ranks once; -> references and each
    rank's results, per case."""
    work = tmp_path_factory.mktemp("tensor_parallel")
    built_by = first_case_building_each_model()
    cases = {name: save_case(work / name, *CASES[name][:4]) for name in dict.fromkeys(built_by.values())}
    references = {name: one_process(work / name, spec) for name, spec in cases.items()}
    _, references["documented example"] = documented_run(work / "docs")
    (work / "cases.json").write_text(json.dumps({"cases": cases, "documented_example": documented_example()}))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               str(WORKER), str(work)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    ranks = [torch.load(work / f"rank{rank}.pt", weights_only=False) for rank in range(2)]

    def per_case(seen: dict) -> dict:
        return {name: seen[built] for name, built in built_by.items()} | {"documented example": seen["documented example"]}

    return {"references": per_case(references), "ranks": [per_case(seen) for seen in ranks]}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("rank", [0, 1])
def test_two_ranks_give_one_process_logits(launch, case, rank):
    seen, reference = launch["ranks"][rank][case], launch["references"][case]
    assert seen["tp_size"] == 2
    torch.testing.assert_close(seen["logits"], reference["logits"], **TOLERANCE)


@pytest.mark.parametrize("case", sorted(name for name, spec in CASES.items() if spec[3] is None and spec[0] != "encoder"))
@pytest.mark.parametrize("rank", [0, 1])
def test_two_ranks_generate_one_process_tokens(launch, case, rank):
    assert torch.equal(launch["ranks"][rank][case]["tokens"], launch["references"][case]["tokens"])


def split_parameters(local: dict[str, list[int]], full: dict[str, list[int]]) -> set[str]:
    assert local.keys() == full.keys()
    return {name for name in full if local[name] != full[name]}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_plan_splits_what_it_claims_and_nothing_else(launch, case):
    must_split, must_stay_whole = CASES[case][4:]
    split = split_parameters(launch["ranks"][0][case]["shapes"], launch["references"][case]["shapes"])
    for fragment in must_split:
        assert any(fragment in name for name in split), (fragment, sorted(split))
    for fragment in must_stay_whole:
        assert not any(fragment in name for name in split), (fragment, sorted(split))
    # Rank 0 holds the first half of one dimension (rounded up: the vocabulary, 97, is odd), the rest whole.
    for name in split:
        local, full = launch["ranks"][0][case]["shapes"][name], launch["references"][case]["shapes"][name]
        halved = [(a, b) for a, b in zip(local, full, strict=True) if a != b]
        assert len(halved) == 1 and halved[0][0] == -(-halved[0][1] // 2), (name, local, full)


def test_documented_example_prints_one_process_text_on_rank_zero_only(launch):
    assert launch["ranks"][0]["documented example"].strip() == launch["references"]["documented example"].strip()
    assert launch["ranks"][1]["documented example"] == ""

