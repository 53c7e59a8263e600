"""scripts/vllm_check.py and vllm_bench.py without vLLM: which folders they refuse, how they compare two engines,
the reference side (transformers), the worker protocol, and the tables. vLLM itself (3.5 GB) stays out of the default suite."""

from __future__ import annotations

import importlib.util
import json
import math
import signal
import sys
from pathlib import Path

import pytest
import torch

from hf_vanilla import VanillaConfig, VanillaForCausalLM, variants
from tests.factories import config_for_row

ROOT = Path(__file__).resolve().parents[1]


def load_script(name: str):
    """scripts/NAME.py as the module NAME, as running it puts scripts/ first on the path (vllm_bench imports
    vllm_check by name; dataclasses look their module up by name)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


vllm_check = load_script("vllm_check")
vllm_bench = load_script("vllm_bench")

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
    assert "bias would be dropped" in vllm_check.refusal(alibi_encoder)
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
# rows: one model per row, built from the table


def folder_digest(folder: Path) -> str:
    import hashlib

    return hashlib.sha256(b"".join((folder / name).read_bytes() for name in ("config.json", "model.safetensors")))\
        .hexdigest()


@pytest.fixture(scope="module")
def row_models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rows")
    return {case.name: (case, vllm_check.build_case(case, folder, TINY)) for case in vllm_check.cases(TINY)}


def test_rows_builds_every_row_of_the_table_and_a_classifier_of_each_family():
    cases = vllm_check.cases(TINY)
    shown = {(case.row.option, case.row.value) for case in cases if case.row is not None}
    assert shown == {(row.option, row.value) for row in variants.VARIANTS}
    encoders = {case.row.setting for case in cases if case.kind is vllm_check.ENCODER
                and case.row.option == "position_embedding_type"}
    assert encoders == set(variants.values("position_embedding_type"))  # learned (BERT's), sinusoidal, none, RoPE...
    assert {case.fields["architecture"] for case in cases if case.row is None} == {"encoder", "decoder"}


def test_each_row_s_model_differs_from_its_default_in_the_row_s_option_and_there_only():
    for case in (case for case in vllm_check.cases(TINY) if case.row is not None):
        option = case.row.option
        assert case.fields[option] == case.row.setting != case.default[option], case.name
        if option != "architecture":  # an architecture row's default is the other kind's default model
            assert {k for k in case.fields if case.fields[k] != case.default.get(k)} == {option}, case.name


def test_every_row_s_saved_model_is_its_own_and_carries_the_row_s_value(row_models):
    """No two folders alike (the checker once certified seven copies of its default model as seven rows)."""
    digests = {name: folder_digest(folder) for name, (_, folder) in row_models.items()}
    assert len(set(digests.values())) == len(digests), [n for n in digests if list(digests.values()).count(digests[n]) > 1]
    for case, folder in row_models.values():
        config = json.loads((folder / "config.json").read_text())
        assert config["architectures"] == [case.head], case.name
        if case.row is not None:
            assert config[case.row.option] == case.row.setting, case.name
        if case.kind.runner == "pooling":
            assert (folder / "tokenizer.json").is_file(), case.name


def test_rows_expects_the_refusal_the_table_declares_and_service_otherwise(row_models):
    for case, folder in row_models.values():
        words = vllm_check.expected_refusal(case, folder)
        if case.row is not None and case.row.attention_bias:  # refused as vLLM names its attention, before any module
            assert "attn_implementation='vllm' cannot be used with" in words, case.name
        elif case.row is None:
            assert words == variants.VLLM_CLASSIFIER_REFUSAL
        elif not case.row.served_by_vllm and (case.kind is vllm_check.DECODER or not case.row.output_layer):
            assert f"{case.row.option}={case.row.setting!r}: {case.row.vllm_refusal}" in words, case.name
        elif " with " in case.name:  # a combination the table refuses (lm_head_bias beside lm_head_scale)
            assert " with " in words and dict(case.row.vllm_conflicts)[case.name.split(" with ")[1].split("=")[0]] \
                in words, case.name
        else:
            assert words == "" and vllm_check.refusal(json.loads((folder / "config.json").read_text())) is None, \
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
    auto = AutoModelForSequenceClassification if config.architectures[0].endswith("Classification") else AutoModel
    try:
        config._attn_implementation = "engine_like"  # as vLLM does before it builds the model
        auto.from_config(config, trust_remote_code=True)
        seen[folder] = "built"
    except ValueError as error:
        seen[folder] = str(error)
print(json.dumps(seen))
"""


def test_a_lifted_copy_builds_where_the_folder_refuses(row_models, tmp_path):
    """What `rows` serves to see each refusal's reason hold: the same model with the refusals lifted in its copy
    of the table, built as an engine builds it, in a Python without hf_vanilla (as vLLM's)."""
    from tests.factories import run_without_package

    names = ["encoder classifier", "decoder: position_embedding_type='alibi'",
             "decoder: lm_head_bias=True with lm_head_scale=0.5"]
    folders = [str(row_models[name][1]) for name in names]
    lifted = [str(vllm_check.lifted_copy(Path(folder))) for folder in folders]
    script = ENGINE_BUILD.replace("sys.argv[1:]", repr(folders + lifted))
    ran = run_without_package(script, tmp_path)
    assert ran.returncode == 0, ran.stderr
    seen = json.loads(ran.stdout.strip().splitlines()[-1])
    for name, folder, copy in zip(names, folders, lifted, strict=True):
        assert vllm_check.expected_refusal(row_models[name][0], Path(folder), "engine_like") in seen[folder], name
        if "alibi" in name:  # the bias stays refused: decided by the engine's function, which takes no position_bias
            assert "has no `position_bias` parameter" in seen[copy]
        else:
            assert seen[copy] == "built", (name, seen[copy])


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
