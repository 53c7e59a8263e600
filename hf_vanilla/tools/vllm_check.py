"""Serve a saved hf_vanilla model in vLLM and check its numbers against transformers' (``scripts/vllm_check.py``).

    python scripts/vllm_check.py check RUN_DIR        # a causal LM's greedy tokens and logprobs against transformers'
                                                      # (a bare model or masked-LM: its embeddings, pooled)
    python scripts/vllm_check.py serve RUN_DIR        # the same through `vllm serve`, over HTTP on 127.0.0.1
    python scripts/vllm_check.py rows --out DIR       # every (row of the table, class a user saves): served or refused

Timing is ``vllm_bench`` (``scripts/vllm_bench.py``), which checks its models with this module's pieces first.

vLLM runs in a venv of its own (``scripts/vllm_env.sh`` builds it on first use: about 5 minutes and 3.5 GB from
PyPI) because it pins its own torch and transformers (<5.20). This process runs under the project's venv: it builds
and saves the models, runs transformers, and holds the clock. It starts the vLLM side as a worker -- the file
``vllm_worker.py`` beside this one, run by path under the vLLM venv's python -- and sends it one JSON line per
request. The worker imports neither hf_vanilla nor this project's transformers: the model files travel in the saved
folder and load with ``trust_remote_code`` on the transformers vLLM brings.

``check``: greedy new tokens and the logprob of every prompt token and every new token, from vLLM's Transformers
backend (``model_impl="transformers"``), requests one at a time and all in one batch, against transformers'
``generate()`` and ``log_softmax`` of its forward on the same token ids, one prompt at a time, within
``DEFAULT_ATOL``. Prompts are random token ids of different lengths (a batch flattens them into one row: positions
must come from ``position_ids``). An embedding model: every component of the pooled state, within the same bound.

``rows``: one small model per (row of hf_vanilla's table of variants, class a user saves), built from the table when
it runs (``kinds``): a causal LM for every row, a bare encoder for each positional scheme, a masked-LM with the BERT
presets' head for each output-layer row, and every other class of each family once. A row's model is the default
model of its kind with the row's value; where the default has that value already, the kind's alternate (every
option at another value vLLM serves) with it, so no two models are the same. A model vLLM serves is checked as
``check`` does; a refused one must be refused in our words when vLLM builds it, and, with that refusal alone lifted
in a copy of its files, vLLM must fail at load or serve other numbers: a copy another refusal of ours stops, or one
vLLM serves exactly, proves nothing and fails the row. No model meets two refusals (each is shown alone).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoModel, AutoModelForCausalLM, GenerationConfig, PreTrainedTokenizerFast

import hf_vanilla
from hf_vanilla import VanillaConfig, register, variants
from hf_vanilla.engines import VLLM_HEAD_REFUSALS, bias_refusal, vllm_refusals, vllm_refused_rows

ROOT = Path(__file__).resolve().parents[2]  # the repository: scripts/vllm_env.sh and the default venv's place
DEFAULT_VENV = ROOT / ".venv-vllm"
ENV_SCRIPT = ROOT / "scripts" / "vllm_env.sh"
#: The vLLM side, run by path under the vLLM venv's python (it imports neither hf_vanilla nor this transformers).
WORKER = Path(__file__).resolve().with_name("vllm_worker.py")

#: Head sizes vLLM's CPU attention kernels support.
CPU_HEAD_SIZES = (32, 512)

#: Agreement bound on every logprob (nats) and every embedding component: what docs/deploying.md claims. Both sides
#: compute in float32 from the same weights and the same token ids; they differ only in the order of sums (vLLM's
#: GEMMs and paged attention kernel against MKL and SDPA), which moves a logprob by about 1e-5 here (the check reports
#: transformers' own eager-vs-SDPA spread beside it). A real fault moves it by orders more: a dropped ALiBi bias or a
#: wrong position costs > 0.1.
DEFAULT_ATOL = 1e-4

@dataclass(frozen=True)
class Shape:
    """The benchmark models: small enough for a 2-core CPU, large enough that the matmuls are most of the time."""

    vocab: int = 8192
    hidden: int = 512
    layers: int = 8
    heads: int = 8  # head_dim 64, inside vLLM's CPU kernels' 32-512
    kv_heads: int = 4
    ffn: int = 1376  # SwiGLU width ~ 8/3 * hidden, as hf_vanilla's bench
    max_positions: int = 512
    init_std: float = 0.1  # sharper logits than 0.02, so greedy choices are rarely near-ties (see compare())


# ----------------------------------------------------------------------------------------------
# Which saved folders vLLM can serve


def refusal(config: dict[str, Any]) -> str | None:
    """Why vLLM's Transformers backend cannot serve the model of this config.json, or None."""
    if config.get("model_type") != "vanilla":
        return None  # a native transformers model: vLLM decides

    refusals = vllm_refusals(VanillaConfig.from_dict(config))
    if refusals:
        return " | ".join(refusals) + " (docs/support-matrix.md lists what vLLM serves)."
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    low, high = CPU_HEAD_SIZES
    if not low <= head_dim <= high:
        return (f"head_dim={head_dim}: vLLM's CPU attention kernels support head sizes {low}-{high} only "
                "(hidden_size / num_attention_heads, or head_dim).")
    return None


def read_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    if not path.is_file():
        raise SystemExit(f"{folder}: no config.json; pass the folder a run saved its model in (save_pretrained).")
    return json.loads(path.read_text())


#: The classes vLLM serves, by name: its runner, and for an embedding model the token it pools by family. A causal
#: language model generates; the bare model and the masked-LM (whose head vLLM leaves unread) are embedding models.
VLLM_RUNNERS = {"VanillaForCausalLM": "generate", "VanillaModel": "pooling", "VanillaForMaskedLM": "pooling"}
POOLING = {"encoder": "CLS", "decoder": "LAST"}


def vllm_path(config: dict[str, Any]) -> tuple[str, str]:
    """vLLM's runner for a servable folder (by the class that saved it) and, for an embedding model, its pooling."""
    head = (config.get("architectures") or ["VanillaModel"])[0]
    runner = VLLM_RUNNERS.get(head, "generate")  # a native model: vLLM decides; generation is what `check` compares
    return runner, POOLING.get(config.get("architecture", "decoder"), "LAST")


def check_servable(folder: Path) -> dict[str, Any]:
    config = read_config(folder)
    reason = refusal(config)
    if reason:
        raise SystemExit(f"{folder}: vLLM cannot serve this model: {reason}")
    return config


# ----------------------------------------------------------------------------------------------
# Requests and their answers


@dataclass
class Completion:
    """One request's answer: the greedy new tokens and the logprobs of each token."""

    tokens: list[int]
    logprobs: list[float]  # of each new token, given everything before it
    prompt_logprobs: list[float]  # of prompt token t given tokens < t, for t = 1 .. len(prompt) - 1
    margins: list[float] | None = None  # transformers only: top-1 minus top-2 logprob before each new token


def make_prompts(lengths: Sequence[int], vocab: int, seed: int = 0) -> list[list[int]]:
    """Random token ids >= 3 (clear of the usual special tokens), one prompt per length, the same every run."""

    generator = random.Random(seed)
    return [[generator.randrange(3, vocab) for _ in range(length)] for length in lengths]


# ----------------------------------------------------------------------------------------------
# Comparing two engines


@dataclass
class Agreement:
    """How closely a candidate engine's completions match the reference's (transformers')."""

    requests: int
    new_tokens: int = 0  # new tokens compared (each request's up to where the two may part)
    tokens_equal: int = 0
    near_ties: list[str] = field(default_factory=list)  # where the two parted at a near-tie: allowed, not compared on
    max_prompt_logprob_diff: float = 0.0
    max_logprob_diff: float = 0.0  # over new tokens both engines chose alike
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures


def compare(reference: Sequence[Completion], candidate: Sequence[Completion], atol: float) -> Agreement:
    """Tokens must be equal and logprobs within ``atol``, with one exception: a choice between two tokens whose
    reference logprobs differ by at most ``2 * atol`` is a near-tie that the candidate may break the other way
    (each of the two may move by ``atol``). The request is then compared only up to that step."""
    if len(reference) != len(candidate):
        raise ValueError(f"{len(candidate)} completions against {len(reference)} reference completions.")
    result = Agreement(requests=len(reference))
    for index, (ref, got) in enumerate(zip(reference, candidate, strict=True)):
        if len(ref.prompt_logprobs) != len(got.prompt_logprobs):
            result.failures.append(f"request {index}: {len(got.prompt_logprobs)} prompt logprobs, "
                                   f"expected {len(ref.prompt_logprobs)}")
            continue
        for position, (a, b) in enumerate(zip(ref.prompt_logprobs, got.prompt_logprobs, strict=True), start=1):
            diff = abs(a - b)
            result.max_prompt_logprob_diff = max(result.max_prompt_logprob_diff, diff)
            if not diff <= atol:  # NaN fails too
                result.failures.append(f"request {index}: prompt token {position} logprob {b:.6f}, "
                                       f"expected {a:.6f} (|diff| {diff:.2e} > {atol:g})")
        for step, (want, have) in enumerate(zip(ref.tokens, got.tokens, strict=False)):
            result.new_tokens += 1
            if want != have:
                margin = ref.margins[step] if ref.margins is not None else math.inf
                where = f"request {index}: new token {step} is {have}, expected {want}"
                if margin <= 2 * atol:
                    result.near_ties.append(f"{where} (a near-tie: reference margin {margin:.2e})")
                else:
                    result.failures.append(f"{where} (reference margin {margin:.2e} > {2 * atol:g})")
                break
            result.tokens_equal += 1
            diff = abs(ref.logprobs[step] - got.logprobs[step])
            result.max_logprob_diff = max(result.max_logprob_diff, diff)
            if not diff <= atol:
                result.failures.append(f"request {index}: new token {step} logprob {got.logprobs[step]:.6f}, "
                                       f"expected {ref.logprobs[step]:.6f} (|diff| {diff:.2e} > {atol:g})")
        else:
            if len(got.tokens) != len(ref.tokens):
                result.failures.append(f"request {index}: {len(got.tokens)} new tokens, expected {len(ref.tokens)}")
    return result


def max_spread(first: Sequence[Completion], second: Sequence[Completion]) -> float:
    """The largest difference between two engines' prompt logprobs (the noise floor of reordered float32 sums)."""
    return max((abs(a - b) for x, y in zip(first, second, strict=True)
                for a, b in zip(x.prompt_logprobs, y.prompt_logprobs, strict=True)), default=0.0)


@dataclass
class EmbeddingAgreement:
    """How closely a candidate engine's embeddings (the first token's final hidden state) match the reference's."""

    requests: int
    max_abs_diff: float = 0.0
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures


def compare_embeddings(reference: Sequence[Sequence[float]], candidate: Sequence[Sequence[float]],
                       atol: float) -> EmbeddingAgreement:
    """Every component of every request's embedding within ``atol`` of the reference's."""
    if len(reference) != len(candidate):
        raise ValueError(f"{len(candidate)} embeddings against {len(reference)} reference embeddings.")
    result = EmbeddingAgreement(requests=len(reference))
    for index, (want, have) in enumerate(zip(reference, candidate, strict=True)):
        if len(want) != len(have):
            result.failures.append(f"request {index}: {len(have)} components, expected {len(want)}")
            continue
        diff = max((abs(a - b) for a, b in zip(want, have, strict=True)), default=0.0)
        if not diff <= atol:  # NaN fails too
            result.failures.append(f"request {index}: max |embedding diff| {diff:.2e} > {atol:g}")
        result.max_abs_diff = max(result.max_abs_diff, diff) if diff == diff else math.inf
    return result


# ----------------------------------------------------------------------------------------------
# transformers' side (the project's venv)


def load_transformers(folder: Path, attn: str = "sdpa"):
    """The saved model through its own code (``trust_remote_code``), as the folder's users load it."""

    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True, dtype=torch.float32,
                                                 attn_implementation=attn)
    return model.eval()


def transformers_completions(model, prompts: Sequence[Sequence[int]], new_tokens: int) -> list[Completion]:
    """Greedy ``generate()`` one prompt at a time (no padding), then one forward over prompt + new tokens for the
    logprobs: of each prompt token, of each new token, and the top-2 margin where each new token was chosen.

    The model's own generation config is replaced by plain greedy decoding without EOS, as vLLM is asked for
    (``ignore_eos=True``): ``generate()`` fills every setting a config passed to it leaves None from the model's,
    so the folder's ``eos_token_id`` would otherwise end a prompt early."""

    model.generation_config = GenerationConfig(max_new_tokens=new_tokens, do_sample=False, eos_token_id=None,
                                               pad_token_id=0, use_cache=True)
    completions = []
    with torch.inference_mode():
        for prompt in prompts:
            ids = torch.tensor([list(prompt)])
            generated = model.generate(ids, attention_mask=torch.ones_like(ids))
            new = generated[0, ids.shape[1]:]
            if len(new) != new_tokens:
                raise RuntimeError(f"generate() gave {len(new)} new tokens, asked for {new_tokens}.")
            logprobs = torch.log_softmax(model(generated, use_cache=False).logits[0].float(), dim=-1)
            start = ids.shape[1] - 1  # the row that predicts the first new token
            targets = generated[0, 1:]
            chosen = logprobs[:-1].gather(1, targets[:, None])[:, 0]
            top2 = logprobs[start:-1].topk(2, dim=-1).values
            completions.append(Completion(tokens=new.tolist(), logprobs=chosen[start:].tolist(),
                                          prompt_logprobs=chosen[:start].tolist(),
                                          margins=(top2[:, 0] - top2[:, 1]).tolist()))
    return completions


#: Which token's final hidden state an embedding is, by vLLM's pooling type: an encoder's first token (BERT's CLS),
#: a decoder's last (the only one that has seen the whole prompt).
POOLED_TOKEN = {"CLS": 0, "LAST": -1}


def transformers_embeddings(folder: Path, prompts: Sequence[Sequence[int]], attn: str = "sdpa",
                            pooling: str = "CLS") -> list[list[float]]:
    """The bare model's final hidden state at the pooled token (vLLM's ``pooling``), one prompt at a time."""

    model = AutoModel.from_pretrained(folder, trust_remote_code=True, dtype=torch.float32,
                                      attn_implementation=attn).eval()
    token = POOLED_TOKEN[pooling]
    with torch.inference_mode():
        return [model(torch.tensor([list(prompt)])).last_hidden_state[0, token].tolist() for prompt in prompts]


# ----------------------------------------------------------------------------------------------
# Talking to the worker (the project's venv)


def ensure_venv(venv: Path, log: Callable[[str], None]) -> Path:
    """The vLLM venv's python, building the venv first if it cannot import vllm (about 5 minutes, 3.5 GB)."""
    python = venv / "bin" / "python"
    if python.exists() and subprocess.run([python, "-c", "import vllm"], capture_output=True).returncode == 0:
        return python
    log(f"building the vLLM venv at {venv} with {ENV_SCRIPT.name} (about 5 minutes, 3.5 GB)...")
    start = time.perf_counter()
    subprocess.run(["bash", str(ENV_SCRIPT), str(venv)], check=True, stdout=sys.stderr)
    log(f"built in {time.perf_counter() - start:.0f} s")
    return python


def worker_env(threads: int) -> dict[str, str]:
    """Offline, and vLLM's OpenMP threads bound to the first ``threads`` cores (its default would keep one core of
    a small machine for the scheduler); a KV cache sized by the script, not by a share of memory."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_CPU_OMP_THREADS_BIND=f"0-{threads - 1}",
               VLLM_NO_USAGE_STATS="1", TOKENIZERS_PARALLELISM="false")
    env.pop("PYTHONPATH", None)  # the worker must not import this checkout's packages
    return env


class Worker:
    """The vLLM side: a subprocess under the vLLM venv, one JSON line per request and per answer."""

    def __init__(self, python: Path, threads: int, log_path: Path):
        self.log_path = log_path
        self._log = open(log_path, "a")
        self.process = subprocess.Popen([str(python), str(WORKER)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self._log, text=True, env=worker_env(threads),
                                        cwd=tempfile.gettempdir(), start_new_session=True)

    def call(self, op: str, **arguments: Any) -> dict[str, Any]:
        self.process.stdin.write(json.dumps({"op": op, **arguments}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the vLLM worker exited ({self.process.poll()}); its log: {self.log_path}\n"
                               + _tail(self.log_path))
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"vLLM worker, {op}: {reply['error']}\n{reply['traceback']}\nlog: {self.log_path}")
        return reply

    def completions(self, name: str, prompts: Sequence[Sequence[int]], max_tokens: int,
                    together: bool) -> list[Completion]:
        reply = self.call("generate", name=name, prompts=[list(p) for p in prompts], max_tokens=max_tokens,
                          logprobs=True, together=together)
        return [Completion(**completion) for completion in reply["completions"]]

    def close(self, timeout: float = 60) -> None:
        """Ask the worker to quit; if it does not within ``timeout`` (busy, or interrupted mid-request), end its
        session: the worker and the engine processes vLLM started under it."""
        if self.process.poll() is None:
            try:
                self.process.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.process.stdin.flush()
                self.process.wait(timeout=timeout)
            except (OSError, subprocess.TimeoutExpired):
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._log.close()


def _tail(path: Path, lines: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


# ----------------------------------------------------------------------------------------------
# check: one saved folder


@dataclass
class CheckResult:
    model: str
    folder: str
    atol: float
    requests: int
    new_tokens: int
    floor: float  # transformers eager against SDPA: the spread of reordered sums alone
    single: Agreement
    batched: Agreement

    @property
    def passed(self) -> bool:
        return self.single.passed and self.batched.passed


def check_lengths(max_len: int, new_tokens: int) -> list[int]:
    """Prompt lengths from 3 to as long as the model allows, uneven, so a batch mixes lengths."""
    longest = max(3, min(40, max_len - new_tokens))
    return sorted({3, 7, 12, 17, 23, 31, longest} & set(range(3, longest + 1)))


@dataclass
class Reference:
    """transformers' answers for one saved folder, and its own spread between two attention kernels."""

    prompts: list[list[int]]
    completions: list[Completion]
    floor: float  # max |prompt logprob| difference, eager against SDPA: what reordered float32 sums alone give


def reference_for(folder: Path, new_tokens: int) -> Reference:
    config = read_config(folder)
    prompts = make_prompts(check_lengths(config.get("max_position_embeddings", 512), new_tokens),
                           config["vocab_size"], seed=1)
    completions = transformers_completions(load_transformers(folder), prompts, new_tokens)
    eager = transformers_completions(load_transformers(folder, "eager"), prompts, new_tokens)
    return Reference(prompts, completions, max_spread(completions, eager))


def check_engine(worker: Worker, name: str, folder: Path, reference: Reference, atol: float, log) -> CheckResult:
    """Greedy tokens and logprobs of the engine ``name`` (loaded from ``folder``) against transformers."""
    new_tokens = len(reference.completions[0].tokens)
    results = {together: compare(reference.completions,
                                 worker.completions(name, reference.prompts, new_tokens, together=together), atol)
               for together in (False, True)}
    result = CheckResult(name, str(folder), atol, len(reference.prompts), new_tokens, reference.floor,
                         results[False], results[True])
    for mode, agreement in (("single", result.single), ("batched", result.batched)):
        log(f"  {name} {mode}: tokens {agreement.tokens_equal}/{agreement.new_tokens} equal, max |logprob diff| "
            f"prompt {agreement.max_prompt_logprob_diff:.2e} new {agreement.max_logprob_diff:.2e} "
            f"(transformers eager vs sdpa {reference.floor:.2e}); {'PASS' if agreement.passed else 'FAIL'}")
        for line in agreement.near_ties + agreement.failures[:10]:
            log(f"    {line}")
    return result


def model_len(config: dict[str, Any]) -> int:
    return min(int(config.get("max_position_embeddings") or 512), 512)


@dataclass
class EmbeddingCheckResult:
    folder: str
    atol: float
    requests: int
    floor: float  # transformers eager against SDPA
    single: EmbeddingAgreement
    batched: EmbeddingAgreement

    @property
    def passed(self) -> bool:
        return self.single.passed and self.batched.passed


def check_embedding_engine(worker: Worker, name: str, folder: Path, atol: float, log,
                           pooling: str = "CLS") -> EmbeddingCheckResult:
    """A model served as an embedding model: vLLM's pooled states against transformers', requests one at a time
    and all in one batch (flattened into one row: positions must come from ``position_ids``)."""
    config = read_config(folder)
    prompts = make_prompts(check_lengths(model_len(config), 0), config["vocab_size"], seed=1)
    reference = transformers_embeddings(folder, prompts, pooling=pooling)
    floor = compare_embeddings(reference, transformers_embeddings(folder, prompts, "eager", pooling),
                               math.inf).max_abs_diff
    results = {together: compare_embeddings(
        reference, worker.call("embed", name=name, prompts=prompts, together=together)["embeddings"], atol)
        for together in (False, True)}
    result = EmbeddingCheckResult(str(folder), atol, len(prompts), floor, results[False], results[True])
    for mode, agreement in (("single", result.single), ("batched", result.batched)):
        log(f"  {name} {mode}: max |embedding diff| {agreement.max_abs_diff:.2e} (transformers eager vs sdpa "
            f"{floor:.2e}); {'PASS' if agreement.passed else 'FAIL'}")
        for line in agreement.failures[:10]:
            log(f"    {line}")
    return result


def embedding_table(result: EmbeddingCheckResult) -> str:
    lines = ["| engine | requests | max \\|Δ embedding\\| | eager vs sdpa | result |", "|---|---|---:|---:|---|"]
    for mode, agreement in (("one at a time", result.single), ("one batch", result.batched)):
        lines.append(f"| vLLM embedding (transformers backend) | {mode} | {agreement.max_abs_diff:.1e} | "
                     f"{result.floor:.1e} | {'pass' if agreement.passed else 'FAIL'} |")
    return "\n".join(lines)


def run_check(args: argparse.Namespace) -> int:
    folder = Path(args.folder).resolve()
    config = check_servable(folder)
    runner, pooling = vllm_path(config)
    embedding = runner == "pooling"
    if embedding and not (folder / "tokenizer.json").is_file():
        raise SystemExit(f"{folder}: vLLM serves this model as an embedding model, which it loads with its tokenizer; "
                         "this folder has no tokenizer.json (save the tokenizer beside the model).")
    out = Path(args.out or tempfile.mkdtemp(prefix="vllm-check-"))
    out.mkdir(parents=True, exist_ok=True)
    set_threads(args.threads)
    worker = Worker(ensure_venv(Path(args.venv), log), args.threads, out / "worker.log")
    try:
        loaded = worker.call("load", name="model", folder=str(folder), impl="transformers",
                             max_model_len=model_len(config), kv_cache_bytes=args.kv_cache_mib << 20,
                             enforce_eager=args.eager, runner=runner, pooling=pooling)
        log(f"vLLM {loaded['vllm']} (torch {loaded['torch']}, transformers {loaded['transformers']}) "
            f"loaded {folder} in {loaded['seconds']:.0f} s" + (" as an embedding model" if embedding else ""))
        if embedding:
            result = check_embedding_engine(worker, "model", folder, args.atol, log, pooling)
        else:
            result = check_engine(worker, "model", folder, reference_for(folder, args.new_tokens), args.atol, log)
    finally:
        worker.close()
    if embedding:
        write_json(out / "check.json", {"versions": loaded, "check": {**asdict(result), "passed": result.passed}})
        print(embedding_table(result))
    else:
        write_json(out / "check.json", {"versions": loaded, "check": check_json(result)})
        print(check_table([result]))
    return 0 if result.passed else 1


# ----------------------------------------------------------------------------------------------
# rows: every (row of the table, class a user saves) in a model of its own, served or refused as the table says


def _no_rows(row: Any) -> bool:
    return False


@dataclass(frozen=True)
class Kind:
    """A class a user saves, in one family: the model ``rows`` builds by default for it, and which rows of the
    table it shows (a model each, differing from the default in that row's option)."""

    name: str
    head: str  # the hf_vanilla class saved (config.json's architectures)
    base: dict[str, Any]  # the fields of the kind's default model beyond the config's defaults
    shows: Callable[[Any], bool] = _no_rows

    @property
    def family(self) -> str:
        return self.base["architecture"]

    @property
    def runner(self) -> str:
        """vLLM's runner: the one it serves the class by, or its own choice ("auto") for a class it has no path for."""
        return VLLM_RUNNERS.get(self.head, "auto")

    @property
    def pooling(self) -> str:
        return POOLING[self.family]


#: The models ``rows`` builds: small, so some fifty of them check in reasonable time on a 2-core CPU (head_dim 32).
ROWS_SHAPE = Shape(vocab=1024, hidden=128, layers=2, heads=4, kv_heads=4, ffn=256, max_positions=128)

#: Every parameter of a row's model moved by this much noise after its init: zero biases and unit norm weights
#: would hide a fault that drops or scales them (a bias scaled by logit_scale is still zero).
PERTURBATION = 0.05

_DECODER_BASE = dict(architecture="decoder", position_embedding_type="rope", norm_position="pre")
_ENCODER_BASE = dict(architecture="encoder", position_embedding_type="learned", norm_position="post",
                     hidden_act="gelu", type_vocab_size=2)


def _bert_head() -> dict[str, Any]:
    """The output layer every BERT preset builds (dense + GELU + norm transform, biased, tied), from the preset."""

    bert = VanillaConfig.from_preset("bert-base")
    return {row.option: getattr(bert, row.option) for row in variants.VARIANTS if row.output_layer}


#: The default decoder (Llama-shaped apart from the table's defaults) shows every row but the encoder's; the bare
#: encoder (BERT-shaped) its architecture and the positional schemes (the rest act as in a decoder); the masked-LM
#: with the BERT presets' head the output-layer rows (vLLM pools its encoder: its head must load, unread).
DECODER = Kind("decoder", "VanillaForCausalLM", _DECODER_BASE,
               lambda row: row.option != "architecture" or row.value != "encoder")
ENCODER = Kind("encoder", "VanillaModel", _ENCODER_BASE,
               lambda row: row.option == "position_embedding_type" or (row.option, row.value) == ("architecture",
                                                                                                    "encoder"))


def kinds() -> list[Kind]:
    """Every class a user saves, in each family vLLM may build (the architecture rows' heads, read from the table):
    the three above, and each other class's default model. The encoder-decoder's classes are refused with their
    family (the decoder's architecture row shows it, saved by VanillaForSeq2SeqLM)."""

    masked_lm = Kind("masked-LM", "VanillaForMaskedLM", {**_ENCODER_BASE, **_bert_head()},
                     lambda row: row.output_layer)
    shown = [DECODER, ENCODER, masked_lm]
    for family, base in (("decoder", _DECODER_BASE), ("encoder", _ENCODER_BASE)):
        for head in variants.row("architecture", family).heads:
            if not any((kind.head, kind.family) == (head, family) for kind in shown):
                extra = {"num_labels": 3} if "Classification" in head else {}
                shown.append(Kind(f"{family} {head.removeprefix('Vanilla')}", head, {**base, **extra}))
    return shown


@dataclass(frozen=True)
class Refusal:
    """One refusal the table declares, as a case meets it: the words the model raises when vLLM builds it, and the
    code appended to a copy's travelling files that lifts this refusal and no other."""

    name: str
    words: str
    lift: tuple[tuple[str, str], ...]  # (file of the folder, code appended to it)


#: Appended to a copy's files to lift one refusal (``rows`` proves each refusal needed by lifting it alone).
LIFT_ROW = """
# vllm_check rows: the refusal of {option}={value} lifted, alone
VARIANTS[:] = [__import__("dataclasses").replace(v, vllm_refusal="") if (v.option, repr(v.value)) == ({option!r},
               {value!r}) else v for v in VARIANTS]
"""
LIFT_CONFLICT = """
# vllm_check rows: the refusal of {option}={value} beside {other} lifted, alone
VARIANTS[:] = [__import__("dataclasses").replace(v, vllm_conflicts=tuple(c for c in v.vllm_conflicts if c[0] !=
               {other!r})) if (v.option, repr(v.value)) == ({option!r}, {value!r}) else v for v in VARIANTS]
"""
LIFT_HEAD = """
# vllm_check rows: the refusal of a folder saved by {head} lifted, alone
VLLM_HEAD_REFUSALS = {{**VLLM_HEAD_REFUSALS, {head!r}: ""}}
"""
#: A bias scheme's refusal is said twice (the table's row, and the rule that refuses an attention function without
#: ``position_bias``, which vLLM meets first): one refusal, lifted together.
LIFT_BIAS = """
# vllm_check rows: the rule refusing an attention function that drops the bias lifted (with the scheme's row)
def refuse_attention_dropping_bias(config, implementation):
    return None
"""

#: The name vLLM registers its attention function under (vllm/model_executor/models/transformers/).
VLLM_ATTENTION = "vllm"


def refusals_of(config: Any, head: str, implementation: str = VLLM_ATTENTION) -> list[Refusal]:
    """Every refusal of the table this model meets when an engine builds it, first raised first: the class that
    saved it, then its rows and combinations (a bias scheme's as its attention rule says it)."""

    found = []
    if VLLM_HEAD_REFUSALS.get(head):
        found.append(Refusal(head, VLLM_HEAD_REFUSALS[head], (("engines.py", LIFT_HEAD.format(head=head)),)))
    for row, other, why in vllm_refused_rows(config):
        name, value = f"{row.option}={row.setting!r}", repr(row.value)
        if other:
            lift = (("variants.py", LIFT_CONFLICT.format(option=row.option, value=value, other=other)),)
            found.append(Refusal(f"{name} with {other}", why, lift))
        elif row.attention_bias:
            lift = (("variants.py", LIFT_ROW.format(option=row.option, value=value)),
                    ("engines.py", LIFT_BIAS))
            found.insert(0, Refusal(name, bias_refusal(row.value, implementation), lift))  # the config refuses first
        else:
            found.append(Refusal(name, why, (("variants.py", LIFT_ROW.format(option=row.option, value=value)),)))
    return found


def our_refusal_in(text: str) -> bool:
    """Whether a load failed with a refusal of ours (any the table declares, or the bias rule's), not vLLM's own."""

    sentences = [row.vllm_refusal for row in variants.VARIANTS if row.vllm_refusal]
    sentences += [why for row in variants.VARIANTS for _, why in row.vllm_conflicts]
    sentences += [why for why in VLLM_HEAD_REFUSALS.values() if why]
    return "takes no additive attention bias" in text or any(sentence in text for sentence in sentences)


@dataclass(frozen=True)
class Case:
    """One model ``rows`` builds: a row of the table (None for a kind's default model) shown in a model of one
    kind. ``default`` is the model it is built from, which differs from it in the row's option."""

    name: str
    kind: Kind
    row: Any
    fields: dict[str, Any]
    default: dict[str, Any]

    @property
    def head(self) -> str:
        """The class saved: the kind's, or the encoder-decoder's generating head for that architecture's row."""
        return "VanillaForSeq2SeqLM" if self.fields["architecture"] == "encoder-decoder" else self.kind.head

    @property
    def runner(self) -> str:
        return self.kind.runner if self.head == self.kind.head else VLLM_RUNNERS.get(self.head, "auto")

    def refusals(self, shape: Shape = ROWS_SHAPE) -> list[Refusal]:
        config = row_config(self.fields, shape)
        config.architectures = [self.head]
        return refusals_of(config, self.head)


def default_fields(kind: Kind) -> dict[str, Any]:
    """Every option of the table at the kind's value (the config's default where the kind sets none)."""

    defaults = VanillaConfig.__dataclass_fields__
    return {option: kind.base.get(option, defaults[option].default) for option in variants.options()}


def row_config(fields: dict[str, Any], shape: Shape = ROWS_SHAPE):
    """The VanillaConfig of a row's model: the rows' shape with the case's fields."""

    return VanillaConfig(**{**dict(
        vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.ffn, num_hidden_layers=2,
        num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads, max_position_embeddings=shape.max_positions,
        initializer_range=shape.init_std, pad_token_id=0, bos_token_id=1, eos_token_id=2), **fields})


def alternate(kind: Kind, shape: Shape = ROWS_SHAPE) -> dict[str, Any]:
    """The kind's other default: each option at its first other value that vLLM serves alongside the rest, so a
    row whose value is the kind's default is shown in a model that differs from the default model. Values compare
    as the config resolves them in ``shape`` (final_norm follows the norm's place, num_key_value_heads the heads)."""

    fields = default_fields(kind)
    default_model = row_config({**kind.base, **fields}, shape)
    for option in variants.options():
        if option == "architecture" or variants.values(option) == (variants.NON_DEFAULT,):
            continue
        resolved = getattr(default_model, option)
        for value in (row.setting for row in variants.rows(option) if row.setting != resolved):
            trial = {**kind.base, **fields, option: value}
            if not vllm_refusals(row_config(trial, shape)):
                fields[option] = value
                break
    return {**kind.base, **fields}


def kind_cases(kind: Kind, shape: Shape) -> list[Case]:
    """The kind's default model, and one model per row it shows."""

    base = {**kind.base, **default_fields(kind)}
    if kind.shows is _no_rows:
        return [Case(kind.name, kind, None, base, base)]
    other, built = alternate(kind, shape), []
    for row in (row for row in variants.VARIANTS if kind.shows(row)):
        if row.option == "architecture":  # the kind's default model, contrasted with the other kind's
            fields = base if row.value == kind.family else {**base, "architecture": row.value}
            default = {**base, "architecture": "encoder" if row.value != "encoder" else "decoder"}
        elif getattr(row_config(base, shape), row.option) != row.setting:  # as resolved (final_norm, head_dim)
            fields, default = {**base, row.option: row.setting}, base
        else:  # the default model has this value already: show it in the alternate, which has another
            fields = {**other, row.option: row.setting}
            default = {**other, row.option: next(r.setting for r in variants.rows(row.option)
                                                 if r.setting != row.setting)}
        built.append(Case(f"{kind.name}: {row.option}={row.setting!r}", kind, row, fields, default))
        for beside, _ in row.vllm_conflicts:  # a value vLLM serves alone, refused beside another option's
            setting = next(r.setting for r in variants.rows(beside) if r.setting != base[beside])
            pair = Case(f"{built[-1].name} with {beside}={setting!r}", kind, row, {**fields, beside: setting},
                        {**default, beside: setting})
            if pair.refusals(shape):  # only where the table refuses it (an encoder pools: its head is unread)
                built.append(pair)
    return built


def cases(shape: Shape = ROWS_SHAPE) -> list[Case]:
    """One model per (row of the table, kind that shows it), and each kind's default where it shows no row."""
    return [case for kind in kinds() for case in kind_cases(kind, shape)]


def folder_name(case_name: str) -> str:
    """The case's folder: letters, digits and ``_.=-`` only. vLLM compiles the folder's model code as a module named
    after the folder, and torch.compile's guards fail on a brace in that name (a dict-valued row once failed so)."""
    return re.sub(r"[^A-Za-z0-9_.=-]+", "-", case_name.replace("'", "")).strip("-")


def build_case(case: Case, folder: Path, shape: Shape, seed: int = 0) -> Path:
    """The case's model at ``shape``, random weights, saved with its code by the case's class (and, where vLLM
    may pool it, a tokenizer over the whole vocabulary: vLLM's pooling front end loads it)."""


    register()  # save_pretrained then copies the model files and writes auto_map
    torch.manual_seed(seed)
    config = row_config(case.fields, shape)
    path = folder / folder_name(case.name)
    model = getattr(hf_vanilla, case.head)(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(PERTURBATION * torch.randn_like(parameter))
    model.save_pretrained(path)
    if case.runner != "generate":
        save_word_tokenizer(path, shape.vocab)
    return path


def save_word_tokenizer(folder: Path, vocab: int) -> None:
    """A word-level tokenizer with one word per id, so every token id the check sends is in its vocabulary."""

    words = {"<pad>": 0, "<s>": 1, "</s>": 2} | {f"w{i}": i for i in range(3, vocab)}
    tokenizer = Tokenizer(models.WordLevel(words, unk_token="<pad>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                            unk_token="<pad>").save_pretrained(folder)


def lifted_copy(folder: Path, refusal: Refusal) -> Path:
    """A copy of the folder with this refusal, and no other, lifted in its travelling files."""

    copy = folder.with_name(folder.name + "-lifted")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(folder, copy)
    for name, code in refusal.lift:
        with open(copy / name, "a") as file:
            file.write(code)
    return copy


@dataclass
class RowResult:
    """What ``rows`` saw for one case."""

    case: str
    folder: str
    expected: str  # "served" or the refusal's name
    seen: str = ""  # a line: the agreement, or the refusal and what vLLM does without it
    passed: bool = False
    error: float | None = None  # a served case: the largest difference from transformers
    proof: str = ""  # a refused case: "fails at load", "serves wrong numbers" or "not proven"


#: Outcomes of lifting a refusal alone: what vLLM then does (either proves the refusal needed), or why nothing shows.
FAILS, WRONG, NOT_PROVEN = "fails at load", "serves wrong numbers", "not proven"


def load_case(worker: Worker, name: str, folder: Path, case: Case, args: argparse.Namespace) -> dict[str, Any]:
    return worker.call("load", name=name, folder=str(folder), impl="transformers",
                       max_model_len=model_len(read_config(folder)), kv_cache_bytes=args.kv_cache_mib << 20,
                       enforce_eager=args.eager, runner=case.runner, pooling=case.kind.pooling)


def check_served(worker: Worker, name: str, folder: Path, case: Case,
                 args: argparse.Namespace) -> tuple[bool, float, str]:
    """Tokens and logprobs (generation) or pooled states (an embedding model) against transformers': whether they
    agree within ``args.atol``, the largest difference, and a line."""
    if case.runner == "generate":
        result = check_engine(worker, name, folder, reference_for(folder, args.new_tokens), args.atol, log)
        agreements = (result.single, result.batched)
        error = max(max(a.max_prompt_logprob_diff, a.max_logprob_diff) for a in agreements)
        parts = [f"{a.tokens_equal}/{a.new_tokens} tokens, max |Δ logprob| "
                 f"{max(a.max_prompt_logprob_diff, a.max_logprob_diff):.1e}" for a in agreements]
    elif case.runner == "pooling":
        result = check_embedding_engine(worker, name, folder, args.atol, log, case.kind.pooling)
        agreements = (result.single, result.batched)
        error = max(a.max_abs_diff for a in agreements)
        parts = [f"{a.requests} requests, max |Δ state| {a.max_abs_diff:.1e}" for a in agreements]
    else:
        raise ValueError(f"{case.name}: vLLM has no path for {case.head}: nothing to compare its answers with.")
    return result.passed, error, f"one at a time {parts[0]}; one batch {parts[1]}"


def load_failure(worker: Worker, error: RuntimeError, since: int) -> str:
    """What the worker's log holds since ``since`` (its size before the load), with the error the load raised."""
    with open(worker.log_path, errors="replace") as file:
        file.seek(since)
        return str(error) + "\n" + file.read()


def refused_before_serving(worker: Worker, name: str, folder: Path, case: Case, args: argparse.Namespace,
                           words: str) -> tuple[bool, str]:
    """vLLM's load must fail with our words (the model refuses as vLLM builds it, before any token)."""
    since = worker.log_path.stat().st_size
    try:
        load_case(worker, name, folder, case, args)
    except RuntimeError as error:
        seen = load_failure(worker, error, since)
        return (words in seen, "refused in our words" if words in seen else
                f"load failed without our words: {str(error).splitlines()[0]}")
    worker.call("close", name=name)
    return False, "vLLM loaded it: the model did not refuse"


VLLM_LOG_PREFIX = re.compile(r"^\s*(\([^)]*\)\s*)?(DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d [\d:]+ \[[^\]]*\]\s*")


def log_message(line: str) -> str:
    """A vLLM log line without its process, level, time and source prefix: what a table may quote."""
    return VLLM_LOG_PREFIX.sub("", line).strip()


def failure_cause(text: str) -> str:
    """The root cause in a failed load's log: the last error line that is not vLLM's wrapper around it."""
    wrappers = ("Engine core initialization failed", "WorkerProc initialization failed", "raise ")
    lines = [log_message(line) for line in text.splitlines()]
    return next((line for line in reversed(lines) if "Error" in line and not any(w in line for w in wrappers)),
                lines[0] if lines else "")


def lifted_outcome(failure: str | None, exact: bool | None) -> str:
    """What lifting a refusal alone showed: vLLM failed at load (not by a refusal of ours), served numbers other than
    transformers', or nothing that proves the refusal needed (another refusal of ours stopped the copy, or vLLM
    served it exactly, or loaded what nothing here can compare)."""
    if failure is not None:
        return NOT_PROVEN if our_refusal_in(failure) else FAILS
    return WRONG if exact is False else NOT_PROVEN


def without_refusal(worker: Worker, name: str, folder: Path, case: Case, refusal: Refusal,
                    args: argparse.Namespace) -> tuple[str, str]:
    """This refusal alone lifted in a copy: what vLLM then does (an outcome) and a line saying it."""
    copy, since = lifted_copy(folder, refusal), worker.log_path.stat().st_size
    try:
        load_case(worker, name, copy, case, args)
    except RuntimeError as error:
        failure = load_failure(worker, error, since)
        outcome, cause = lifted_outcome(failure, None), failure_cause(failure)[:240]
        if outcome == NOT_PROVEN:
            return outcome, f"lifted alone: still refused by the model, so nothing is proven ({cause})"
        return outcome, f"lifted alone: vLLM fails at load ({cause})"
    try:
        try:
            exact, _, seen = check_served(worker, name, copy, case, args)
        except ValueError as error:  # loaded, with no path to compare (a class vLLM reads as another)
            return NOT_PROVEN, f"lifted alone: vLLM loaded it ({error})"
    finally:
        worker.call("close", name=name)
    outcome = lifted_outcome(None, exact)
    return outcome, (f"lifted alone: {'EXACT: the refusal is not needed' if exact else 'vLLM serves wrong numbers'} "
                     f"({seen})")


def run_case(worker: Worker, case: Case, folder: Path, args: argparse.Namespace) -> RowResult:
    refusals = case.refusals()
    if len(refusals) > 1:  # the plan shows each refusal alone; two at once prove neither
        raise ValueError(f"{case.name}: {len(refusals)} refusals at once ({[r.name for r in refusals]}).")
    result = RowResult(case.name, str(folder), refusals[0].name if refusals else "served")
    if not refusals:
        reason = refusal(read_config(folder))
        if reason:
            result.seen = f"the script refuses it: {reason}"
            return result
        load_case(worker, case.name, folder, case, args)
        try:
            result.passed, result.error, result.seen = check_served(worker, case.name, folder, case, args)
        finally:
            worker.call("close", name=case.name)
    else:
        refused, seen = refused_before_serving(worker, case.name, folder, case, args, refusals[0].words)
        result.proof, lifted = without_refusal(worker, case.name, folder, case, refusals[0], args)
        result.passed, result.seen = refused and result.proof != NOT_PROVEN, f"{seen}; {lifted}"
    log(f"{case.name}: {'pass' if result.passed else 'FAIL'}: {result.seen}")
    return result


def run_rows(args: argparse.Namespace) -> int:
    out = Path(args.out or tempfile.mkdtemp(prefix="vllm-rows-"))
    out.mkdir(parents=True, exist_ok=True)
    set_threads(args.threads)
    chosen = [case for case in cases() if not args.only or any(part in case.name for part in args.only)]
    if args.only:  # in the order the parts are given (the first that matches a case places it)
        chosen.sort(key=lambda case: next(i for i, part in enumerate(args.only) if part in case.name))
    folders = {case.name: build_case(case, out / "models", ROWS_SHAPE) for case in chosen}
    worker = Worker(ensure_venv(Path(args.venv), log), args.threads, out / "worker.log")
    start, results = time.perf_counter(), []
    try:
        loaded = worker.call("versions")
        for case in chosen:
            try:
                results.append(run_case(worker, case, folders[case.name], args))
            except RuntimeError as error:  # one case's failure is its row's result; the others still run
                results.append(RowResult(case.name, str(folders[case.name]), "?", str(error).splitlines()[0]))
                log(f"{case.name}: FAIL: {results[-1].seen}")
            write_json(out / "rows.json", {"versions": loaded, "planned": len(chosen), "atol": args.atol,
                                           "rows": [asdict(result) for result in results]})  # what finished so far
    finally:
        worker.close()
    print(rows_table(results, loaded, time.perf_counter() - start, args.atol))
    return 0 if all(result.passed for result in results) else 1


def rows_summary(results: Sequence[RowResult], atol: float) -> str:
    """The count: models passed, served within the tolerance (the worst difference), refusals proven needed."""
    served = [r for r in results if r.expected == "served"]
    refused = [r for r in results if r.expected not in ("served", "?")]
    worst = max((r.error for r in served if r.error is not None), default=0.0)
    proofs = {outcome: sum(r.proof == outcome for r in refused) for outcome in (FAILS, WRONG, NOT_PROVEN)}
    return (f"{sum(r.passed for r in results)}/{len(results)} models pass ({len({r.folder for r in results})} "
            f"distinct folders): {sum(r.passed for r in served)}/{len(served)} served within {atol:g} (worst "
            f"{worst:.1e}); {proofs[FAILS] + proofs[WRONG]}/{len(refused)} refusals proven needed by lifting each "
            f"alone ({proofs[FAILS]} fail at load, {proofs[WRONG]} serve wrong numbers, {proofs[NOT_PROVEN]} not "
            "proven)")


def rows_table(results: Sequence[RowResult], versions: dict[str, Any], seconds: float, atol: float) -> str:
    """Markdown: one line per model, then the count."""
    lines = ["| model | table says | seen | result |", "|---|---|---|---|"]
    lines += [f"| {r.case} | {r.expected} | {r.seen.replace('|', chr(92) + '|')} | {'pass' if r.passed else 'FAIL'} |"
              for r in results]
    lines.append(f"\n{rows_summary(results, atol)}; vLLM {versions['vllm']} (torch {versions['torch']}, transformers "
                 f"{versions['transformers']}), {seconds / 60:.0f} min")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# serve: the same check through `vllm serve`, the OpenAI-compatible server users run


class Server:
    """``vllm serve FOLDER`` on 127.0.0.1 in a session of its own, ended with everything it started."""

    def __init__(self, python: Path, folder: Path, config: dict[str, Any], args: argparse.Namespace, log_path: Path):
        with socket.socket() as probe:  # a free port, chosen by the system
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        # The server `vllm serve` starts, by its module: vllm-cpu 0.32.0's `vllm` command fails before parsing its
        # arguments (it asks for the version of a package named `vllm`; the CPU build is installed as `vllm-cpu`).
        command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder),
                   "--host", "127.0.0.1", "--port", str(self.port),
                   "--model-impl", "transformers", "--trust-remote-code", "--dtype", "float32",
                   "--skip-tokenizer-init", "--max-model-len", str(model_len(config)),
                   "--kv-cache-memory-bytes", str(args.kv_cache_mib << 20), "--no-enable-prefix-caching",
                   "--seed", "0"] + (["--enforce-eager"] if args.eager else [])
        self.log_path = log_path
        self._log = open(log_path, "a")
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, env=worker_env(args.threads),
                                        cwd=tempfile.gettempdir(), start_new_session=True)

    def wait_ready(self, timeout: float) -> float:
        """Seconds until ``/health`` answers 200; the server's log if it exits or the time runs out first."""

        start = time.perf_counter()
        while time.perf_counter() - start < timeout:
            if self.process.poll() is not None:
                raise RuntimeError(f"vllm serve exited ({self.process.returncode}); its log: {self.log_path}\n"
                                   + _tail(self.log_path))
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as reply:
                    if reply.status == 200:
                        return time.perf_counter() - start
            except OSError:
                pass
            time.sleep(2)
        raise TimeoutError(f"vllm serve did not answer /health within {timeout:.0f} s; its log: {self.log_path}\n"
                           + _tail(self.log_path))

    def completions(self, folder: Path, prompts: Sequence[Sequence[int]], max_tokens: int) -> list[Completion]:
        """One /v1/completions request for all the prompts, greedy, with every prompt and new token's logprob."""

        body = {"model": str(folder), "prompt": [list(p) for p in prompts], "max_tokens": max_tokens,
                "temperature": 0.0, "ignore_eos": True, "logprobs": 1, "prompt_logprobs": 1,
                "return_token_ids": True, "return_tokens_as_token_ids": True}
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/completions",
                                         data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=600) as reply:
            choices = sorted(json.loads(reply.read())["choices"], key=lambda choice: choice["index"])
        return [completion_of_choice(choice) for choice in choices]

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._log.close()


def completion_of_choice(choice: dict[str, Any]) -> Completion:
    """A /v1/completions choice (with ``return_token_ids`` and ``prompt_logprobs``) as a :class:`Completion`."""
    prompt = choice["prompt_token_ids"]
    prompt_logprobs = [step[str(token)]["logprob"] for step, token in zip(choice["prompt_logprobs"][1:], prompt[1:],
                                                                          strict=True)]
    return Completion(tokens=list(choice["token_ids"]), logprobs=list(choice["logprobs"]["token_logprobs"]),
                      prompt_logprobs=prompt_logprobs)


def run_serve(args: argparse.Namespace) -> int:
    folder = Path(args.folder).resolve()
    config = check_servable(folder)
    if config.get("architecture") == "encoder":
        raise SystemExit(f"{folder}: an encoder; `serve` checks generation. Use `check` for its embeddings.")
    out = Path(args.out or tempfile.mkdtemp(prefix="vllm-serve-"))
    out.mkdir(parents=True, exist_ok=True)
    set_threads(args.threads)
    reference = reference_for(folder, args.new_tokens)
    server = Server(ensure_venv(Path(args.venv), log), folder, config, args, out / "server.log")
    try:
        log(f"vllm serve {folder} on 127.0.0.1:{server.port} ready in {server.wait_ready(args.ready_timeout):.0f} s")
        batched = compare(reference.completions, server.completions(folder, reference.prompts, args.new_tokens),
                          args.atol)
        single = compare(reference.completions, [server.completions(folder, [prompt], args.new_tokens)[0]
                                                 for prompt in reference.prompts], args.atol)
    finally:
        server.close()
    new_tokens = len(reference.completions[0].tokens)
    result = CheckResult("vllm serve (transformers backend)", str(folder), args.atol, len(reference.prompts),
                         new_tokens, reference.floor, single, batched)
    write_json(out / "serve.json", {"check": check_json(result)})
    print(check_table([result]))
    return 0 if result.passed else 1


# ----------------------------------------------------------------------------------------------
# Output


def check_json(result: CheckResult) -> dict[str, Any]:
    return {**asdict(result), "passed": result.passed, "single": {**asdict(result.single), "passed": result.single.passed},
            "batched": {**asdict(result.batched), "passed": result.batched.passed}}


def check_table(results: Sequence[CheckResult]) -> str:
    """Markdown: one row per engine and request mode."""
    lines = ["| engine | requests | new tokens equal | max \\|Δ logprob\\| prompt | max \\|Δ logprob\\| new | "
             "eager vs sdpa | near-ties | result |", "|---|---|---:|---:|---:|---:|---:|---|"]
    for result in results:
        for mode, agreement in (("one at a time", result.single), ("one batch", result.batched)):
            lines.append(f"| {result.model} | {mode} | {agreement.tokens_equal}/{agreement.new_tokens} | "
                         f"{agreement.max_prompt_logprob_diff:.1e} | {agreement.max_logprob_diff:.1e} | "
                         f"{result.floor:.1e} | {len(agreement.near_ties)} | "
                         f"{'pass' if agreement.passed else 'FAIL'} |")
    return "\n".join(lines)


def write_json(path: Path, payload: Any) -> None:
    path.write_text(json.dumps(payload, indent=2) + "\n")


def set_threads(threads: int) -> None:
    torch.set_num_threads(threads)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------
# Command line


def absolute_path(text: str) -> str:
    """A folder option as an absolute path: vLLM's worker runs elsewhere and takes a relative one for a Hub repo id."""
    return str(Path(text).expanduser().resolve())


def common_options() -> argparse.ArgumentParser:
    """The options every command shares, here and in ``vllm_bench.py``."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--venv", type=absolute_path, default=str(DEFAULT_VENV), help=f"the vLLM venv (default {DEFAULT_VENV}; built if absent)")
    common.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="torch threads here and vLLM's bound OpenMP threads (default: every core)")
    common.add_argument("--out", type=absolute_path, help="folder for results, logs and built models (default: a new temp folder)")
    common.add_argument("--kv-cache-mib", type=int, default=256, help="vLLM's KV cache per engine (default 256 MiB)")
    common.add_argument("--new-tokens", type=int, default=24, help="new tokens per request in the check (default 24)")
    common.add_argument("--atol", type=float, default=DEFAULT_ATOL, help=f"logprob tolerance (default {DEFAULT_ATOL})")
    common.add_argument("--eager", action="store_true",
                        help="vLLM without its torch.compile (enforce_eager): loads in seconds instead of minutes")
    return common


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    common = common_options()

    check = commands.add_parser("check", parents=[common], help="check a saved decoder (generation) or encoder "
                                "(embedding model) in vLLM against transformers")
    check.add_argument("folder", type=absolute_path, help="a folder a run saved its model in (config.json, weights, model files)")
    check.set_defaults(func=run_check)

    rows = commands.add_parser("rows", parents=[common], help="every row of the table of variants in a model of "
                               "its own (decoders, encoders, classifiers): served rows checked as `check` does, "
                               "refused ones for our refusal and for what vLLM does without it")
    rows.add_argument("--only", nargs="+", metavar="TEXT",
                      help="only the models whose name contains one of these, in that order ('' matches every model)")
    rows.set_defaults(func=run_rows)

    serve = commands.add_parser("serve", parents=[common], help="the same check through `vllm serve` (its "
                                "OpenAI-compatible server on 127.0.0.1)")
    serve.add_argument("folder", type=absolute_path, help="a folder a run saved its decoder in")
    serve.add_argument("--ready-timeout", type=float, default=1800,
                       help="seconds to wait for the server to answer /health (default 1800: compiling is slow on CPU)")
    serve.set_defaults(func=run_serve)
    return parse_checked(parser, argv)


def parse_checked(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """The arguments of this module's command or ``vllm_bench``'s, with the options they share checked."""
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error("--threads must be at least 1")
    return args


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed command of this script or of ``vllm_bench.py`` from this checkout, its workers ended on SIGTERM."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # run the finally blocks: close workers
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return args.func(args)


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
