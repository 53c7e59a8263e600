"""hf_vanilla.tools.vllm_check and vllm_bench (scripts/vllm_check.py and vllm_bench.py are their doors) without
vLLM: which folders they refuse, how they compare two engines, the reference side (transformers), the worker
protocol, the plan of `rows` (one folder per row and class a user saves), the proof that each refusal is needed, and
the tables. vLLM itself (3.5 GB) stays out of the default suite."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import signal
import sys
from pathlib import Path

import pytest
import torch

from hf_vanilla import VanillaConfig, VanillaForCausalLM, engines, variants
from hf_vanilla.tools import vllm_bench, vllm_check
from tests.factories import config_for_row

ROOT = Path(__file__).resolve().parents[1]

Completion = vllm_check.Completion
TINY = vllm_check.Shape(vocab=96, hidden=64, layers=2, heads=2, kv_heads=1, ffn=96, max_positions=64)


def decoder_config(**overrides) -> dict:
    fields = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=1, num_attention_heads=2,
                  max_position_embeddings=64)
    return VanillaConfig.from_preset("tiny-gpt2", **{**fields, **overrides}).to_dict()


# ----------------------------------------------------------------------------------------------
# Refusals


def test_a_decoder_without_a_bias_is_servable():
    assert vllm_check.refusal(decoder_config()) is None
    assert vllm_check.refusal(decoder_config(position_embedding_type="rope")) is None


@pytest.mark.parametrize("row", [row for row in variants.VARIANTS if not row.served_by_vllm],
                         ids=lambda row: f"{row.option}={row.value}")
def test_each_row_vllm_cannot_serve_is_refused_naming_the_option(row):
    config = config_for_row(row, hidden_size=64, num_attention_heads=2).to_dict()
    reason = vllm_check.refusal(config)
    assert f"{row.option}={config[row.option]!r}: {row.vllm_refusal}" in reason


def test_an_encoder_is_servable_as_an_embedding_model_and_an_encoder_decoder_is_refused():
    encoder = VanillaConfig.from_preset("tiny-bert", hidden_size=64, num_attention_heads=2).to_dict()
    assert vllm_check.refusal(encoder) is None
    alibi_encoder = VanillaConfig.from_preset("tiny-bert", hidden_size=64, num_attention_heads=2,
                                              position_embedding_type="alibi").to_dict()
    assert "drops the additive bias" in vllm_check.refusal(alibi_encoder)
    seq2seq = VanillaConfig.from_preset("tiny-transformer", hidden_size=64, num_attention_heads=2).to_dict()
    reason = vllm_check.refusal(seq2seq)
    assert "architecture='encoder-decoder'" in reason and "not encoder-decoders" in reason


def test_a_head_size_outside_the_cpu_kernels_is_refused():
    reason = vllm_check.refusal(decoder_config(num_attention_heads=4))  # head_dim 16
    assert "head_dim=16" in reason and "32-512" in reason


def test_native_models_are_left_to_vllm():
    assert vllm_check.refusal({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 8}) is None


def test_the_command_refuses_a_bias_scheme_before_building_vllm(tmp_path, capsys):
    folder = tmp_path / "alibi"
    VanillaForCausalLM(VanillaConfig(**{**decoder_config(position_embedding_type="alibi"),
                                        "max_position_embeddings": 64})).save_pretrained(folder)
    venv = tmp_path / "never-built"
    with pytest.raises(SystemExit, match="position_embedding_type='alibi'"):
        vllm_check.main(["check", str(folder), "--venv", str(venv)])
    assert not venv.exists()


def test_a_folder_without_a_config_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="no config.json"):
        vllm_check.check_servable(tmp_path)


# ----------------------------------------------------------------------------------------------
# Comparing completions


def completion(tokens=(5, 6, 7), logprobs=(-1.0, -2.0, -3.0), prompt=(-4.0, -5.0), margins=(1.0, 1.0, 1.0)):
    return Completion(list(tokens), list(logprobs), list(prompt), list(margins) if margins else None)


def test_identical_completions_agree():
    result = vllm_check.compare([completion(), completion()], [completion(margins=None)] * 2, atol=1e-3)
    assert result.passed and result.tokens_equal == result.new_tokens == 6
    assert result.max_prompt_logprob_diff == result.max_logprob_diff == 0.0


def test_logprobs_within_the_tolerance_agree_and_beyond_it_fail():
    close = vllm_check.compare([completion()], [completion(prompt=(-4.0009, -5.0))], atol=1e-3)
    assert close.passed and close.max_prompt_logprob_diff == pytest.approx(9e-4)
    far = vllm_check.compare([completion()], [completion(logprobs=(-1.0, -2.002, -3.0))], atol=1e-3)
    assert not far.passed and "new token 1 logprob" in far.failures[0]
    assert far.tokens_equal == 3  # a logprob beyond the tolerance does not stop the token comparison


def test_nan_logprobs_fail():
    result = vllm_check.compare([completion()], [completion(prompt=(math.nan, -5.0))], atol=1e-3)
    assert not result.passed and "prompt token 1" in result.failures[0]


def test_a_different_token_at_a_clear_choice_fails():
    result = vllm_check.compare([completion()], [completion(tokens=(5, 9, 7))], atol=1e-3)
    assert not result.passed and "new token 1 is 9, expected 6" in result.failures[0]
    assert (result.tokens_equal, result.new_tokens) == (1, 2)  # the request is compared up to where it parted


def test_a_different_token_at_a_near_tie_is_allowed_and_ends_the_comparison():
    reference = completion(margins=(1.0, 1.5e-3, 1.0))
    result = vllm_check.compare([reference], [completion(tokens=(5, 9, 8), logprobs=(-1.0, -9.0, -9.0))], atol=1e-3)
    assert result.passed and len(result.near_ties) == 1 and "near-tie" in result.near_ties[0]
    assert (result.tokens_equal, result.new_tokens) == (1, 2)
    just_beyond = completion(margins=(1.0, 2.5e-3, 1.0))
    assert not vllm_check.compare([just_beyond], [completion(tokens=(5, 9, 8))], atol=1e-3).passed


def test_missing_tokens_or_requests_fail():
    short = vllm_check.compare([completion()], [completion(tokens=(5, 6), logprobs=(-1.0, -2.0))], atol=1e-3)
    assert not short.passed and "2 new tokens, expected 3" in short.failures[0]
    with pytest.raises(ValueError, match="1 completions against 2"):
        vllm_check.compare([completion(), completion()], [completion()], atol=1e-3)


def test_a_served_completion_choice_reads_as_the_offline_api_s_completion():
    """The shape `vllm serve` answers /v1/completions in with return_token_ids and prompt_logprobs (JSON keys are
    strings; the first prompt token has no logprob)."""
    choice = {"index": 0, "text": "", "prompt_token_ids": [5, 6, 7], "token_ids": [8, 9],
              "prompt_logprobs": [None, {"6": {"logprob": -4.0, "rank": 1}, "11": {"logprob": -0.5, "rank": 0}},
                                  {"7": {"logprob": -5.0, "rank": 2}}],
              "logprobs": {"token_logprobs": [-1.0, -2.0], "tokens": ["token_id:8", "token_id:9"]}}
    got = vllm_check.completion_of_choice(choice)
    assert got == Completion(tokens=[8, 9], logprobs=[-1.0, -2.0], prompt_logprobs=[-4.0, -5.0])
    assert vllm_check.compare([completion(tokens=(8, 9), logprobs=(-1.0, -2.0), margins=(1.0, 1.0))], [got],
                              atol=1e-3).passed


def test_embeddings_agree_within_the_tolerance_and_fail_beyond_it_on_nan_or_a_wrong_size():
    reference = [[0.5, -1.0, 2.0], [1.0, 0.0, 0.0]]
    close = vllm_check.compare_embeddings(reference, [[0.5009, -1.0, 2.0], [1.0, 0.0, 0.0]], atol=1e-3)
    assert close.passed and close.max_abs_diff == pytest.approx(9e-4)
    far = vllm_check.compare_embeddings(reference, [[0.5, -1.0, 2.0], [1.0, 0.002, 0.0]], atol=1e-3)
    assert not far.passed and far.failures == ["request 1: max |embedding diff| 2.00e-03 > 0.001"]
    nan = vllm_check.compare_embeddings(reference, [[math.nan, -1.0, 2.0], [1.0, 0.0, 0.0]], atol=1e-3)
    assert not nan.passed and nan.max_abs_diff == math.inf
    short = vllm_check.compare_embeddings(reference, [[0.5, -1.0], [1.0, 0.0, 0.0]], atol=1e-3)
    assert not short.passed and "2 components, expected 3" in short.failures[0]
    with pytest.raises(ValueError, match="1 embeddings against 2"):
        vllm_check.compare_embeddings(reference, [[0.5, -1.0, 2.0]], atol=1e-3)


def test_transformers_embeddings_are_the_first_tokens_final_hidden_state(tmp_path):
    from hf_vanilla import VanillaModel

    config = VanillaConfig.from_preset("tiny-bert", vocab_size=96, hidden_size=64, num_attention_heads=2)
    torch.manual_seed(0)
    model = VanillaModel(config).eval()
    model.save_pretrained(tmp_path)
    prompts = [[5, 6, 7], [9, 10, 11, 12, 13]]
    got = vllm_check.transformers_embeddings(tmp_path, prompts)
    with torch.inference_mode():
        want = [model(torch.tensor([p])).last_hidden_state[0, 0] for p in prompts]
    for have, expected in zip(got, want, strict=True):
        torch.testing.assert_close(torch.tensor(have), expected)


# ----------------------------------------------------------------------------------------------
# The reference side: transformers on the saved pair


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return vllm_bench.build_pair(TINY, tmp_path_factory.mktemp("pair"))


def test_the_pair_is_saved_with_its_code_and_is_servable(pair):
    vanilla = json.loads((pair["vanilla"] / "config.json").read_text())
    assert vanilla["architecture"] == "decoder" and vanilla["position_embedding_type"] == "rope"
    assert (pair["vanilla"] / "modeling_vanilla.py").is_file()
    assert json.loads((pair["llama"] / "config.json").read_text())["model_type"] == "llama"
    for folder in pair.values():
        vllm_check.check_servable(folder)


def test_transformers_completions_are_its_greedy_tokens_and_log_softmax(pair):
    prompts = vllm_check.make_prompts([3, 7], TINY.vocab, seed=1)
    model = vllm_check.load_transformers(pair["vanilla"])
    completions = vllm_check.transformers_completions(model, prompts, new_tokens=5)
    for prompt, answer in zip(prompts, completions, strict=True):
        ids = torch.tensor([prompt + answer.tokens])
        with torch.no_grad():
            logprobs = torch.log_softmax(model(ids).logits[0], dim=-1)
        targets = ids[0, 1:]
        expected = logprobs[:-1].gather(1, targets[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(answer.prompt_logprobs + answer.logprobs), expected)
        assert answer.tokens == logprobs[len(prompt) - 1:-1].argmax(-1).tolist()  # greedy
        assert len(answer.prompt_logprobs) == len(prompt) - 1 and all(m >= 0 for m in answer.margins)


def test_a_folder_whose_generation_config_ends_at_a_greedy_token_still_gives_every_token_asked_for(pair, tmp_path):
    """vLLM is asked to ignore EOS; the reference must too, whatever eos_token_id the folder's generation config
    names (generate() fills a passed config's None from the model's: 'generate() gave 1 new tokens, asked for 5')."""
    prompts = vllm_check.make_prompts([3, 7], TINY.vocab, seed=1)
    plain = vllm_check.transformers_completions(vllm_check.load_transformers(pair["vanilla"]), prompts, new_tokens=5)
    model = vllm_check.load_transformers(pair["vanilla"])
    model.generation_config.eos_token_id = plain[0].tokens[0]  # greedy decoding's first token ends the first prompt
    model.save_pretrained(tmp_path)
    stopping = vllm_check.load_transformers(tmp_path)
    assert stopping.generation_config.eos_token_id == plain[0].tokens[0]
    assert vllm_check.transformers_completions(stopping, prompts, new_tokens=5) == plain


def test_the_llama_of_the_pair_computes_what_hf_vanilla_computes(pair):
    prompts = vllm_check.make_prompts([4, 9], TINY.vocab, seed=1)
    vanilla, llama = (vllm_check.transformers_completions(vllm_check.load_transformers(pair[name]), prompts, 6)
                      for name in ("vanilla", "llama"))
    result = vllm_check.compare(vanilla, llama, atol=1e-5)
    assert result.passed and result.tokens_equal == 12


# ----------------------------------------------------------------------------------------------
# The worker protocol (the project's python stands in for the vLLM venv's: vllm is absent here)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed: the load would run")
def test_a_worker_error_comes_back_with_its_log(tmp_path):
    worker = vllm_check.Worker(Path(sys.executable), threads=1, log_path=tmp_path / "worker.log")
    try:
        with pytest.raises(RuntimeError, match="No module named 'vllm'"):
            worker.call("load", name="m", folder=str(tmp_path), impl="transformers", max_model_len=64,
                        kv_cache_bytes=1 << 20)
        with pytest.raises(RuntimeError, match="KeyError"):  # the worker survives an error and answers again
            worker.call("close", name="never-loaded")
    finally:
        worker.close()
    assert worker.process.returncode == 0


def test_a_worker_that_does_not_quit_is_ended_with_its_session(tmp_path):
    worker = vllm_check.Worker(Path(sys.executable), threads=1, log_path=tmp_path / "worker.log")
    worker.close(timeout=0)  # still starting: no time to quit
    assert worker.process.returncode == -signal.SIGKILL


def test_the_worker_runs_offline_and_without_this_checkout(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    env = vllm_check.worker_env(threads=2)
    assert env["HF_HUB_OFFLINE"] == "1" and env["VLLM_CPU_OMP_THREADS_BIND"] == "0-1" and "PYTHONPATH" not in env


# ----------------------------------------------------------------------------------------------
# Figures and tables


def test_throughputs_and_paired_ratios():
    times = {"a": [1.0, 2.0, 4.0], "b": [2.0, 2.0, 2.0]}
    rows = {row.engine: row for row in vllm_bench.throughputs(times, batch=2, new_tokens=10)}
    assert (rows["a"].median, rows["a"].minimum, rows["a"].maximum, rows["a"].rounds) == (10.0, 5.0, 20.0, 3)
    (ratio,) = vllm_bench.ratios(times, batch=2, pairs=[("a", "b"), ("a", "absent")])
    assert (ratio.median, ratio.minimum, ratio.maximum) == (1.0, 0.5, 2.0)  # per round: 2, 1, 0.5


def test_the_markdown_report_states_the_target_and_every_figure():
    times = {engine: [1.0, 1.0] for engine in vllm_bench.ENGINES}
    times["vllm/vanilla (transformers backend)"] = [1.25, 1.25]  # 0.8x the Llama through the same backend
    report = {"versions": {"vllm": "0.32.0", "torch": "2.13.0", "transformers": "5.19.0"}, "threads": 2,
              "prompt_tokens": 16, "new_tokens": 64, "repeats": 2, "machine": {"cpu": "AMD EPYC", "cores": 2},
              "load_average": {"16": [1.5, 2.3]},
              "throughputs": [vars(r) for r in vllm_bench.throughputs(times, 16, 64)],
              "ratios": [vars(r) for r in vllm_bench.ratios(times, 16, vllm_bench.RATIOS)]}
    agreement = vllm_check.Agreement(requests=2, new_tokens=8, tokens_equal=8, max_prompt_logprob_diff=2e-6)
    check = vllm_check.CheckResult("vllm/llama (vllm's own)", "/x", 1e-3, 2, 4, 1e-6, agreement, agreement)
    text = vllm_bench.bench_markdown(report, [check])
    assert "vLLM 0.32.0" in text and "AMD EPYC, 2 threads" in text and "batch 16 1.5/2.3" in text
    assert "| vllm/llama (vllm's own) | one batch | 8/8 | 2.0e-06 |" in text
    assert "| vllm/vanilla (transformers backend) | 16 | 819.2 | 819.2 | 819.2 | 2 |" in text
    assert "batch 16: 0.800 (NOT met)" in text


def test_arguments():
    args = vllm_bench.parse_args(["bench"])
    assert args.batches == [1, 16] and args.threads >= 1 and args.atol == vllm_check.DEFAULT_ATOL
    assert [vllm_bench.ENGINE_KEYS[key] for key in args.engines] == list(vllm_bench.ENGINES)
    args = vllm_bench.parse_args(["bench", "--models", "vanilla=/a,llama=/b", "--threads", "2", "--engines",
                                  "vllm-vanilla", "vllm-llama"])
    assert args.models == {"vanilla": "/a", "llama": "/b"} and args.threads == 2
    assert args.engines == ["vllm-vanilla", "vllm-llama"]
    with pytest.raises(SystemExit):
        vllm_bench.parse_args(["bench", "--models", "vanilla=/a"])
    with pytest.raises(SystemExit):
        vllm_check.parse_args(["check", "/x", "--threads", "0"])
    with pytest.raises(SystemExit):
        vllm_bench.parse_args(["bench", "--engines", "vllm"])
    with pytest.raises(SystemExit):
        vllm_bench.parse_args(["profile", "--threads", "0"])
    with pytest.raises(SystemExit):  # timing is the other script's
        vllm_check.parse_args(["bench"])


# ----------------------------------------------------------------------------------------------
# rows: one model per (row, class a user saves), built from the table


def folder_digest(folder: Path) -> str:
    import hashlib

    return hashlib.sha256(b"".join((folder / name).read_bytes() for name in ("config.json", "model.safetensors")))\
        .hexdigest()


@pytest.fixture(scope="module")
def row_models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rows")
    return {case.name: (case, vllm_check.build_case(case, folder, TINY)) for case in vllm_check.cases(TINY)}


def test_rows_builds_every_row_of_the_table_and_every_class_a_user_saves():
    cases = vllm_check.cases(TINY)
    shown = {(case.row.option, case.row.value) for case in cases if case.row is not None}
    assert shown == {(row.option, row.value) for row in variants.VARIANTS}
    encoders = {case.row.setting for case in cases if case.kind is vllm_check.ENCODER
                and case.row.option == "position_embedding_type"}
    assert encoders == set(variants.values("position_embedding_type"))  # learned (BERT's), sinusoidal, none, RoPE...
    saved = {(case.fields["architecture"], case.head) for case in cases}
    for family in ("encoder", "decoder"):  # every class of the family's architecture row, read from the table
        assert {(family, head) for head in variants.row("architecture", family).heads} <= saved, family
    assert ("encoder-decoder", "VanillaForSeq2SeqLM") in saved


def test_the_masked_lm_carries_the_bert_presets_head_and_shows_every_output_layer_row():
    masked = [case for case in vllm_check.cases(TINY) if case.head == "VanillaForMaskedLM"]
    bert = VanillaConfig.from_preset("bert-base")
    default = masked[0].kind.base
    assert default["lm_head_transform"] is True and all(
        default[row.option] == getattr(bert, row.option) for row in variants.VARIANTS if row.output_layer)
    assert {(case.row.option, case.row.value) for case in masked} == {
        (row.option, row.value) for row in variants.VARIANTS if row.output_layer}
    assert all(case.runner == "pooling" and not case.refusals(TINY) for case in masked)  # served: an embedding model


def test_each_row_s_model_differs_from_its_default_in_the_row_s_option_and_there_only():
    for case in (case for case in vllm_check.cases(TINY) if case.row is not None):
        option = case.row.option
        assert case.fields[option] == case.row.setting != case.default[option], case.name
        if option != "architecture":  # an architecture row's default is the other kind's default model
            assert {k for k in case.fields if case.fields[k] != case.default.get(k)} == {option}, case.name


def test_every_model_is_its_own_saved_by_its_class_and_carries_the_row_s_value(row_models):
    """No two folders alike (the checker once certified seven copies of its default model as seven rows)."""
    digests = {name: folder_digest(folder) for name, (_, folder) in row_models.items()}
    assert len(set(digests.values())) == len(digests), [n for n in digests if list(digests.values()).count(digests[n]) > 1]
    for case, folder in row_models.values():
        config = json.loads((folder / "config.json").read_text())
        assert config["architectures"] == [case.head], case.name
        if case.row is not None:
            assert config[case.row.option] == case.row.setting, case.name
        assert (folder / "tokenizer.json").is_file() == (case.runner != "generate"), case.name


def test_each_model_s_folder_is_its_own_and_names_a_module_torch_compile_can_guard(row_models):
    """vLLM imports the folder's code as a module named after the folder; a brace there (a dict-valued row's name)
    made torch.compile's guards fail at load, which rows counted as vLLM failing the row."""
    names = [folder.name for _, folder in row_models.values()]
    assert len(set(names)) == len(names)
    assert all(re.fullmatch(r"[A-Za-z0-9_.=-]+", name) for name in names), names
    assert any("rope_parameters" in name for name in names)  # the dict-valued row is among them


def declared_refusals() -> set[str]:
    """Every refusal the table declares, by the name ``rows`` gives it."""
    rows = {f"{row.option}={row.setting!r}" for row in variants.VARIANTS if row.vllm_refusal}
    pairs = {f"{row.option}={row.setting!r} with {other}" for row in variants.VARIANTS for other, _ in row.vllm_conflicts}
    return rows | pairs | {head for head, why in engines.VLLM_HEAD_REFUSALS.items() if why}


def test_each_refusal_is_met_alone_in_some_model_and_no_model_meets_two():
    """Lifting a refusal proves it needed only where no other refusal stops the copy."""
    met = [[refusal.name for refusal in case.refusals(TINY)] for case in vllm_check.cases(TINY)]
    assert all(len(names) <= 1 for names in met), [names for names in met if len(names) > 1]
    assert {names[0] for names in met if names} == declared_refusals()


def test_rows_expects_the_refusal_the_table_declares_and_service_otherwise(row_models):
    for case, folder in row_models.values():
        refusals = case.refusals(TINY)
        if case.row is not None and case.row.attention_bias:  # refused as vLLM names its attention, before any module
            assert "attn_implementation='vllm' cannot be used with" in refusals[0].words, case.name
        elif case.head in engines.VLLM_HEAD_REFUSALS:
            assert refusals[0].words == engines.VLLM_HEAD_REFUSALS[case.head], case.name
        elif case.row is not None and not case.row.served_by_vllm and (
                case.kind is vllm_check.DECODER or not case.row.output_layer):
            assert refusals[0].words == case.row.vllm_refusal, case.name
        elif " with " in case.name:  # a combination the table refuses (lm_head_bias beside lm_head_scale)
            other = case.name.split(" with ")[1].split("=")[0]
            assert refusals[0].words == dict(case.row.vllm_conflicts)[other], case.name
        else:
            assert refusals == [] and vllm_check.refusal(json.loads((folder / "config.json").read_text())) is None, \
                case.name


ENGINE_BUILD = """
import json, sys
from transformers import AttentionInterface, AutoConfig, AutoModel, AutoModelForSequenceClassification
import torch

def engine_attention(module, query, key, value, attention_mask, scaling=None, **kwargs):  # not transformers' own
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, scale=scaling)
    return out.transpose(1, 2), None

AttentionInterface.register("engine_like", engine_attention)
seen = {}
for folder in sys.argv[1:]:
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    try:
        config._attn_implementation = "engine_like"  # as vLLM does before it builds the model
        AutoModel.from_config(config, trust_remote_code=True)  # what vLLM builds first, for every class
        if "Classification" in config.architectures[0]:  # and then, to classify, the sequence classifier
            AutoModelForSequenceClassification.from_config(config, trust_remote_code=True)
        seen[folder] = "built"
    except ValueError as error:
        seen[folder] = str(error)
print(json.dumps(seen))
"""


def engine_builds(folders: list[Path], tmp_path: Path) -> dict[str, str]:
    """Each folder built as an engine builds it, in a Python without hf_vanilla (as vLLM's): "built" or the error."""
    from tests.factories import run_without_package

    ran = run_without_package(ENGINE_BUILD.replace("sys.argv[1:]", repr([str(f) for f in folders])), tmp_path)
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout.strip().splitlines()[-1])


def test_each_refusal_lifted_alone_builds_where_the_folder_refuses(row_models, tmp_path):
    """What `rows` serves to prove each refusal needed: the same model with that refusal alone lifted in its copy
    of the travelling files, built as an engine builds it. A bias scheme's refusal lifts with the rule that says it."""
    refused = [(case, folder) for case, folder in row_models.values() if case.refusals(TINY)]
    copies = [vllm_check.lifted_copy(folder, case.refusals(TINY)[0]) for case, folder in refused]
    seen = engine_builds([folder for _, folder in refused] + copies, tmp_path)
    for (case, folder), copy in zip(refused, copies, strict=True):
        words = vllm_check.refusals_of(VanillaConfig.from_pretrained(folder), case.head, "engine_like")[0].words
        assert words in seen[str(folder)], case.name
        assert seen[str(copy)] == "built", (case.name, seen[str(copy)])


def test_a_copy_stopped_by_a_second_refusal_proves_nothing(tmp_path):
    """A model meeting two refusals, one lifted: the copy is still refused by the other, which `rows` must count
    as not proven (it once counted such a copy, stopped by the bias rule, as a pass)."""
    case = vllm_check.Case("two refusals", vllm_check.DECODER, None,
                           {**vllm_check.DECODER.base, "position_embedding_type": "alibi", "lm_head_transform": True},
                           {})
    refusals = case.refusals(TINY)
    assert [r.name for r in refusals] == ["position_embedding_type='alibi'", "lm_head_transform=True"]
    folder = vllm_check.build_case(case, tmp_path, TINY)
    copies = []
    for index, refusal in enumerate(refusals):  # one copy per lifted refusal
        copy = vllm_check.lifted_copy(folder, refusal)
        copies.append(copy.rename(copy.with_name(f"{copy.name}-{index}")))
    seen = engine_builds(copies, tmp_path)
    for refusal, copy in zip(refusals, copies, strict=True):
        failure = seen[str(copy)]
        assert failure != "built" and refusal.words not in failure, refusal.name
        assert vllm_check.lifted_outcome(failure, None) == vllm_check.NOT_PROVEN, refusal.name


def test_what_a_lifted_copy_shows_proves_the_refusal_needed_only_when_vllm_itself_fails_or_serves_other_numbers():
    vllm_failure = ("ValueError: There is no module or parameter named 'lm_head_transform' in "
                    "TransformersForCausalLM. The available parameters ...")
    assert vllm_check.lifted_outcome(vllm_failure, None) == vllm_check.FAILS
    ours = f"ValueError: attn_implementation='vllm' is a serving engine's attention: {engines.VLLM_CLASSIFIER_REFUSAL}"
    assert vllm_check.lifted_outcome(ours, None) == vllm_check.NOT_PROVEN
    bias = vllm_check.refusals_of(vllm_check.row_config({**vllm_check.DECODER.base,
                                                         "position_embedding_type": "relative"}), "")[0].words
    assert vllm_check.lifted_outcome(bias, None) == vllm_check.NOT_PROVEN
    assert vllm_check.lifted_outcome(None, exact=False) == vllm_check.WRONG
    assert vllm_check.lifted_outcome(None, exact=True) == vllm_check.NOT_PROVEN  # served exactly: not needed


def test_a_masked_lm_folder_loads_into_the_bare_model_as_vllm_maps_it(tmp_path):
    """vLLM builds the bare model (AutoModel) for a masked-LM folder and drops the checkpoint keys its
    ``_keys_to_ignore_on_load_unexpected`` patterns match; every other key must be a parameter of the bare model
    (vLLM 0.32 failed at load: "There is no module or parameter named 'lm_head_transform'"). A decoder's bare model
    must keep its head's keys: vLLM's language model loads lm_head from them."""
    from safetensors import safe_open
    from transformers import AutoModel

    from hf_vanilla import VanillaForMaskedLM

    for cls, preset, head_ignored in ((VanillaForMaskedLM, "tiny-bert", True), (VanillaForCausalLM, "tiny-gpt2", False)):
        config = VanillaConfig.from_preset(preset, hidden_size=64, num_attention_heads=2, tie_word_embeddings=False)
        folder = tmp_path / preset
        cls(config).save_pretrained(folder)
        bare = AutoModel.from_pretrained(folder)
        with safe_open(folder / "model.safetensors", "pt") as weights:
            keys = list(weights.keys())
        patterns = [re.compile(pattern) for pattern in bare._keys_to_ignore_on_load_unexpected]
        kept = [key for key in keys if not any(pattern.search(key) for pattern in patterns)]
        own = {f"model.{name}" for name in bare.state_dict()}
        head = [key for key in keys if key.startswith("lm_head")]
        assert head and (set(head).isdisjoint(kept) if head_ignored else set(head) <= set(kept)), preset
        if head_ignored:
            assert set(kept) <= own, set(kept) - own
    masked = VanillaForMaskedLM.from_pretrained(tmp_path / "tiny-bert")
    bare = AutoModel.from_pretrained(tmp_path / "tiny-bert")
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():  # the embedding vLLM serves is the masked-LM's own encoder state
        torch.testing.assert_close(bare(ids).last_hidden_state, masked.model(ids).last_hidden_state)


def test_rows_passes_a_served_model_only_within_the_tolerance_the_docs_claim():
    assert vllm_check.DEFAULT_ATOL <= 1e-4
    assert vllm_check.parse_args(["rows"]).atol == vllm_check.DEFAULT_ATOL
    beyond = vllm_check.compare_embeddings([[0.5, 1.0]], [[0.5 + 2 * vllm_check.DEFAULT_ATOL, 1.0]],
                                           vllm_check.DEFAULT_ATOL)
    assert not beyond.passed
    deploying = (ROOT / "docs" / "deploying.md").read_text()
    assert f"within {vllm_check.DEFAULT_ATOL:.0e}".replace("e-0", "e-") in deploying  # "within 1e-4"


def test_the_count_says_what_was_served_and_how_each_refusal_was_proven():
    R = vllm_check.RowResult
    results = [R("a", "/a", "served", "", True, 3e-6), R("b", "/b", "served", "", False, 2e-3),
               R("c", "/c", "x", "", True, None, vllm_check.FAILS), R("d", "/d", "y", "", True, None, vllm_check.WRONG),
               R("e", "/e", "z", "", False, None, vllm_check.NOT_PROVEN)]
    summary = vllm_check.rows_summary(results, 1e-4)
    assert summary.startswith("3/5 models pass (5 distinct folders): 1/2 served within 0.0001 (worst 2.0e-03)")
    assert "2/3 refusals proven needed by lifting each alone (1 fail at load, 1 serve wrong numbers, 1 not proven)" \
        in summary


def test_folders_given_relative_reach_the_worker_absolute(tmp_path, monkeypatch):
    # `rows --out runs/x` failed every row: the worker, started elsewhere, took the relative folder for a Hub repo id
    monkeypatch.chdir(tmp_path)
    args = vllm_check.parse_args(["rows", "--out", "runs/x", "--venv", "venv"])
    assert (args.out, args.venv) == (str(tmp_path / "runs" / "x"), str(tmp_path / "venv"))
    assert vllm_check.parse_args(["check", "model"]).folder == str(tmp_path / "model")
    assert vllm_check.parse_args(["serve", "model"]).folder == str(tmp_path / "model")
    assert vllm_bench.parse_args(["bench", "--models", "vanilla=a,llama=b"]).models == {
        "vanilla": str(tmp_path / "a"), "llama": str(tmp_path / "b")}


def test_a_vllm_log_line_is_quoted_without_its_prefix():
    line = ("(Worker pid=28191) ERROR 12-04 23:49:47 [multiproc_executor.py:953] ValueError: Layer 0 dispatches "
            "attention from more than one module")
    assert vllm_check.log_message(line) == "ValueError: Layer 0 dispatches attention from more than one module"
    assert vllm_check.log_message("ValueError: no prefix") == "ValueError: no prefix"
    log = "\n".join(["(EngineCore pid=1) ERROR 12-06 05:56:02 [core.py:1510]     raise ValueError(msg)", line,
                     "(EngineCore pid=1) ERROR 12-06 05:56:02 [core.py:1510] RuntimeError: Engine core "
                     "initialization failed. See root cause above."])
    assert vllm_check.failure_cause(log) == "ValueError: Layer 0 dispatches attention from more than one module"


def test_the_scripts_are_doors_to_the_package():
    for name in ("vllm_check", "vllm_bench"):
        text = (ROOT / "scripts" / f"{name}.py").read_text()
        assert len(text.splitlines()) < 100 and f"from hf_vanilla.tools.{name} import main" in text, name
    worker = (ROOT / "hf_vanilla" / "tools" / "vllm_worker.py").read_text()
    assert "hf_vanilla" not in re.sub(r'""".*?"""', "", worker, flags=re.S)  # runs under vLLM's venv, by path
