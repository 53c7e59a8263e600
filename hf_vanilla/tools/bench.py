"""`hf-vanilla bench`: hf_vanilla against transformers' own models, built at matched sizes.

Each pair is one of our configs and the transformers model it imitates, with the same widths, depths,
vocabulary, activation, norm, positions and attention backend (parameter counts agree):

* ``llama``: ``LlamaForCausalLM`` (RoPE, RMSNorm, SwiGLU, grouped-query attention)
* ``gpt2``: ``GPT2LMHeadModel`` (learned positions, pre-LayerNorm, tanh-GELU, tied head)
* ``bert``: ``BertForMaskedLM`` (post-LayerNorm encoder, token types, MLM transform)
* ``bart``: ``BartForConditionalGeneration`` (post-LayerNorm encoder-decoder, learned positions)

Everything runs in one process, with the same threads and the same inputs, and the two models of a
pair take turns (the order flips every round) so that the load of a shared machine hits both alike.
Throughputs are medians over the rounds; a row's ratio is the median over rounds of the per-round
ratio, which cancels slow drifts; ratio > 1 means ours is better (faster, or less memory).

Rows: ``train/<pair>`` (tokens/s of forward + backward), ``forward/<pair>`` (tokens/s, no grad),
``generate-b1/<pair>`` and ``generate-b8/<pair>`` (new tokens/s from ``generate()`` with the KV cache),
``mfu-train/<pair>`` (model FLOP utilisation against a large float32 ``F.linear`` product timed in the same
rounds; the log gives that product's rate before any model runs),
``memory-train/<pair>`` (peak resident memory a training step adds) and ``memory-T<n>/<backend>``
(peak memory of a forward at n tokens: eager attention materialises (T, T) scores, SDPA must not).
With ``--compile``: ``compile-train/<pair>`` and ``compile-generate-b1/<pair>`` (static cache), both
models compiled, plus the speed-up of compiling ours.

With ``--control`` one more model takes its turn: an identical copy of ours (same code, same weights). Its
ratio against ours (the "A/A" column) would be 1.00 on a perfect machine; how far it strays is how far
noise alone moves every other ratio of that run.

The command's arguments are in :mod:`hf_vanilla.tools.bench_cli`, which imports this module when the command runs.
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import math
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
import transformers
from torch import nn
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    BertConfig,
    BertForMaskedLM,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
)

from ..configuration_vanilla import VanillaConfig
from ..errors import refuse
from ..files.atomic import atomic_write_json
from ..modeling_vanilla import VanillaForCausalLM, VanillaForMaskedLM, VanillaForSeq2SeqLM
from ..presets import PRESETS
from .bench_cli import DESCRIPTION, MEASURES, PAIRS, add_arguments

GENERATING = ("llama", "gpt2", "bart")  # the pairs with a generate() worth timing


# ----------------------------------------------------------------------------------------------
# Sizes and the pairs


@dataclass(frozen=True)
class Sizes:
    """Shapes shared by both models of every pair, and by the inputs they see."""

    vocab: int = 8192
    hidden: int = 512
    layers: int = 6  # the encoder-decoder pair splits them: layers // 2 each side
    heads: int = 8
    kv_heads: int = 4  # grouped-query attention in the Llama pair
    ffn: int = 2048  # 4 * hidden, the paper's ratio
    gated_ffn: int = 1376  # SwiGLU width ~ 8/3 * hidden (Llama's rule), rounded to a multiple of 32
    seq: int = 256
    batch: int = 8
    prompt: int = 16  # generate(): prompt length and new tokens per sequence
    new_tokens: int = 32
    memory_lengths: tuple[int, ...] = (1024, 2048, 4096, 8192)
    matmul: int = 2048  # side of the square matmul that stands for the machine's peak


FULL = Sizes()
TINY = Sizes(
    vocab=128, hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, gated_ffn=64, seq=16, batch=2, prompt=4,
    new_tokens=4, memory_lengths=(32, 64), matmul=256,
)


@dataclass
class Pair:
    name: str
    kind: str  # "causal", "masked" or "seq2seq": which inputs the models take
    ours: PreTrainedModel
    reference: PreTrainedModel
    control: PreTrainedModel | None = None  # an identical copy of ours (--control): the noise of the run

    def contestants(self) -> dict[str, PreTrainedModel]:
        models = {"ours": self.ours, "reference": self.reference, "control": self.control}
        return {side: model for side, model in models.items() if model is not None}


def _ours(head: type, attn: str, **fields: Any) -> PreTrainedModel:
    # Dropout off in both models of every pair: it is random work that would make runs differ.
    config = VanillaConfig(**{**fields, "hidden_dropout": 0.0, "attention_dropout": 0.0, "activation_dropout": 0.0})
    config._attn_implementation = attn
    return head(config)


def llama_pair(sizes: Sizes, attn: str) -> Pair:
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    shape = dict(vocab_size=sizes.vocab, hidden_size=sizes.hidden, intermediate_size=sizes.gated_ffn,
                 num_hidden_layers=sizes.layers, num_attention_heads=sizes.heads,
                 num_key_value_heads=sizes.kv_heads, max_position_embeddings=max(2048, *sizes.memory_lengths))
    ours = _ours(VanillaForCausalLM, attn, **{**PRESETS["llama"], **shape}, rope_parameters=rope, pad_token_id=0)
    reference = LlamaForCausalLM(LlamaConfig(**shape, rms_norm_eps=1e-6, rope_parameters=rope, pad_token_id=0,
                                             tie_word_embeddings=False, attn_implementation=attn))
    return Pair("llama", "causal", ours, reference)


def gpt2_pair(sizes: Sizes, attn: str) -> Pair:
    ours = _ours(VanillaForCausalLM, attn, **{**PRESETS["gpt2"], **dict(
        vocab_size=sizes.vocab, hidden_size=sizes.hidden, intermediate_size=sizes.ffn, num_hidden_layers=sizes.layers,
        num_attention_heads=sizes.heads, max_position_embeddings=1024, pad_token_id=0, bos_token_id=1,
        eos_token_id=2)})
    reference = GPT2LMHeadModel(GPT2Config(
        vocab_size=sizes.vocab, n_embd=sizes.hidden, n_inner=sizes.ffn, n_layer=sizes.layers, n_head=sizes.heads,
        n_positions=1024, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, pad_token_id=0,
        attn_implementation=attn))
    return Pair("gpt2", "causal", ours, reference)


def bert_pair(sizes: Sizes, attn: str) -> Pair:
    ours = _ours(VanillaForMaskedLM, attn, **{**PRESETS["bert-base"], **dict(
        vocab_size=sizes.vocab, hidden_size=sizes.hidden, intermediate_size=sizes.ffn, num_hidden_layers=sizes.layers,
        num_attention_heads=sizes.heads, max_position_embeddings=512)})
    reference = BertForMaskedLM(BertConfig(
        vocab_size=sizes.vocab, hidden_size=sizes.hidden, intermediate_size=sizes.ffn, num_hidden_layers=sizes.layers,
        num_attention_heads=sizes.heads, max_position_embeddings=512, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, attn_implementation=attn))
    return Pair("bert", "masked", ours, reference)


def bart_pair(sizes: Sizes, attn: str) -> Pair:
    depth = max(1, sizes.layers // 2)
    ours = _ours(VanillaForSeq2SeqLM, attn, **{**PRESETS["bart-base"], **dict(
        vocab_size=sizes.vocab, hidden_size=sizes.hidden, intermediate_size=sizes.ffn, num_hidden_layers=depth,
        num_decoder_layers=depth, num_attention_heads=sizes.heads, max_position_embeddings=1024)})
    reference = BartForConditionalGeneration(BartConfig(
        vocab_size=sizes.vocab, d_model=sizes.hidden, encoder_ffn_dim=sizes.ffn, decoder_ffn_dim=sizes.ffn,
        encoder_layers=depth, decoder_layers=depth, encoder_attention_heads=sizes.heads,
        decoder_attention_heads=sizes.heads, max_position_embeddings=1024, dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0, attn_implementation=attn))
    return Pair("bart", "seq2seq", ours, reference)


BUILDERS: dict[str, Callable[[Sizes, str], Pair]] = {
    "llama": llama_pair, "gpt2": gpt2_pair, "bert": bert_pair, "bart": bart_pair,
}


def build_pair(name: str, sizes: Sizes, attn: str = "sdpa", seed: int = 0, control: bool = False) -> Pair:
    """The pair; with ``control``, also a copy of ours (same weights)."""

    torch.manual_seed(seed)
    pair = BUILDERS[name](sizes, attn)
    if control:
        pair.control = copy.deepcopy(pair.ours)
    return pair


def count_params(model: PreTrainedModel) -> int:
    return sum(p.numel() for p in model.parameters())


def flop_params(model: PreTrainedModel) -> int:
    """N of the 6·N rule: parameters outside embedding tables, plus the output head (tied or not)."""
    embedding_weights = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    body = sum(p.numel() for p in model.parameters() if id(p) not in embedding_weights)
    head = model.get_output_embeddings()
    tied_head = head is not None and id(head.weight) in embedding_weights
    return body + (head.weight.numel() if tied_head else 0)


def train_flops_per_step(model: PreTrainedModel, sizes: Sizes) -> float:
    """6·N per token for forward + backward, plus attention's 12·L·d·T (scores and weighted sum, both passes).

    An encoder-decoder's encoder and decoder each see ``seq`` tokens, so N and L count both stacks per
    position (cross-attention's scores are left out, as the guide's formula has no term for them).
    """
    config = model.config
    layers = config.num_hidden_layers + (config.num_decoder_layers if config.is_encoder_decoder else 0)
    per_token = 6 * flop_params(model) + 12 * layers * config.hidden_size * sizes.seq
    return per_token * sizes.batch * sizes.seq


# ----------------------------------------------------------------------------------------------
# Inputs and the work being timed


def make_inputs(kind: str, batch: int, length: int, vocab: int, labels: bool, seed: int = 0) -> dict[str, torch.Tensor]:
    """The same random tokens (ids >= 3, clear of the special tokens) for both models of a pair."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (batch, length), generator=generator)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if kind == "seq2seq":
        target = torch.randint(3, vocab, (batch, length), generator=generator)
        if labels:
            inputs["labels"] = target  # both models shift labels right into decoder inputs
        else:
            inputs["decoder_input_ids"] = target
    elif labels:
        inputs["labels"] = ids
    return inputs


def tokens_per_batch(kind: str, inputs: dict[str, torch.Tensor]) -> int:
    """Tokens the model reads: both sides of an encoder-decoder."""
    return inputs["input_ids"].numel() * (2 if kind == "seq2seq" else 1)


def train_step(model: PreTrainedModel, inputs: dict[str, torch.Tensor]) -> Callable[[], None]:
    def step() -> None:
        model(**inputs).loss.backward()
        model.zero_grad(set_to_none=True)

    return step


def forward_pass(model: PreTrainedModel, inputs: dict[str, torch.Tensor], kind: str) -> Callable[[], None]:
    # A plain forward builds no KV cache (encoders have none to turn off).
    settings = {} if kind == "masked" else {"use_cache": False}

    def run() -> None:
        with torch.inference_mode():
            model(**inputs, **settings)

    return run


def generation(
    model: PreTrainedModel, inputs: dict[str, torch.Tensor], new_tokens: int, **settings: Any
) -> Callable[[], None]:
    """Greedy generate() of exactly ``new_tokens`` per sequence (no EOS), the KV cache on."""
    def run() -> None:
        with torch.inference_mode():
            model.generate(**inputs, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                           eos_token_id=None, pad_token_id=0, use_cache=True, **settings)

    return run


# ----------------------------------------------------------------------------------------------
# Timing and memory


def alternate(
    runs: dict[str, Callable[[], object]], repeats: int, warmup: int = 1, pause: float = 0.0
) -> dict[str, list[float]]:
    """Seconds per call of each callable. They take turns, and the order flips every round, so that
    the other load of a shared machine and slow drifts (heat, caches) hit them alike. ``pause`` seconds pass
    untimed before each call (for engines whose processes keep spinning a while after answering)."""
    names = list(runs)
    for _ in range(warmup):
        for name in names:
            runs[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repeats):
        for name in names if round_ % 2 == 0 else reversed(names):
            time.sleep(pause)
            start = time.perf_counter()
            runs[name]()
            times[name].append(time.perf_counter() - start)
    return times


class square_matmul:  # noqa: N801 -- used like a function that carries its FLOP count
    """A large float32 product ``F.linear(a, b)`` (``a @ b.T``), as the models' linear layers compute it: the most
    this machine does, the denominator of the MFU."""

    def __init__(self, side: int):
        self.a, self.b = torch.randn(side, side), torch.randn(side, side)
        self.flops = 2 * side**3

    def __call__(self) -> None:
        torch.nn.functional.linear(self.a, self.b)


def matmul_flops(side: int, repeats: int = 5) -> float:
    """FLOP/s of :class:`square_matmul` (the median over ``repeats`` calls)."""
    matmul = square_matmul(side)
    return matmul.flops / statistics.median(alternate({"matmul": matmul}, repeats)["matmul"])


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(f"{field} not in /proc/self/status")


def _return_freed_memory() -> None:
    """Fix glibc's mmap threshold and give the heap's free blocks back to the system.

    Blocks >= 64 KiB are then mapped and unmapped, never parked in the heap, so freed activations leave
    the RSS and a peak is the real high-water mark of the call being measured.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 64 * 1024)  # M_MMAP_THRESHOLD
        libc.malloc_trim(0)
    except OSError:
        pass


def _start_peak_tracking() -> int:
    """Make the peak RSS start at the current RSS and return it (KiB)."""
    _return_freed_memory()
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # resets VmHWM to VmRSS (Linux >= 4.0)
        return _rss_kib("VmRSS")
    except OSError:  # not Linux: the peak so far stands in for the start (an underestimate)
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _peak_kib() -> int:
    try:
        return _rss_kib("VmHWM")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def peak_memory_mib(run: Callable[[], object]) -> float:
    """Peak resident memory that ``run()`` adds, in MiB, measured in a forked child.

    A fork starts every measurement from the same heap, and whatever the call allocates dies with the
    child, so models measured one after the other do not see each other's leftovers. The child calls
    ``run()`` twice before measuring a third call: one-off set-ups (kernels a library generates for the
    child's thread count, MKL's and oneDNN's per-thread buffers) belong to the process, not to the call.
    NaN without fork.
    """
    if not hasattr(os, "fork"):
        return float("nan")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: measure, report through the pipe, leave without running the parent's cleanup
        result = "nan"
        try:
            torch.set_num_threads(1)  # OpenMP's thread pool does not survive fork; one thread cannot deadlock
            _return_freed_memory()  # first, so that the warm-ups' blocks leave the RSS when freed
            run()
            run()
            start = _start_peak_tracking()
            run()
            result = repr((_peak_kib() - start) / 1024)
        finally:
            os.write(write_end, result.encode())
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        answer = pipe.read()
    os.waitpid(pid, 0)
    return float(answer or "nan")


# ----------------------------------------------------------------------------------------------
# Rows


@dataclass
class Row:
    name: str
    ours: float
    reference: float
    unit: str
    ratio: float
    control_ratio: float | None = None  # ours against an identical copy of itself (A/A): 1.00 but for noise


def _paired_ratio(ours: list[float], reference: list[float], higher_is_better: bool) -> float:
    """Median over rounds of the per-round ratio; > 1 means ours is better."""
    ratios = [(o / r if higher_is_better else r / o) for o, r in zip(ours, reference, strict=True)]
    return statistics.median(ratios)


def memory_ratio(ours: float, reference: float) -> float:
    """Reference / ours; either side at least one 4 KiB page, the resolution of the RSS counters."""
    page = 4 / 1024
    return max(reference, page) / max(ours, page)


def throughput_row(name: str, times: dict[str, list[float]], work: float, unit: str) -> Row:
    rates = {side: [work / t for t in series] for side, series in times.items()}
    row = Row(name, statistics.median(rates["ours"]), statistics.median(rates["reference"]), unit,
              _paired_ratio(rates["ours"], rates["reference"], True))
    if "control" in rates:
        row.control_ratio = _paired_ratio(rates["ours"], rates["control"], True)
    return row


def timed_pair(pair: Pair, make: Callable[[PreTrainedModel], Callable[[], None]], repeats: int,
               warmup: int = 1) -> dict[str, list[float]]:
    return alternate({side: make(model) for side, model in pair.contestants().items()}, repeats, warmup)


def bench_pair(pair: Pair, sizes: Sizes, measures: Sequence[str], repeats: int, log) -> list[Row]:
    rows: list[Row] = []
    name, kind = pair.name, pair.kind
    train_inputs = make_inputs(kind, sizes.batch, sizes.seq, sizes.vocab, labels=True)
    models = pair.contestants()
    if "memory" in measures:  # first, while the parent's heap is as fresh as it gets
        for model in models.values():
            model.train()
            train_step(model, train_inputs)()  # one-off set-ups (autograd, kernels) are not the step's memory
        peaks = {side: peak_memory_mib(train_step(model, train_inputs)) for side, model in models.items()}
        row = Row(f"memory-train/{name}", peaks["ours"], peaks["reference"], "MiB",
                  memory_ratio(peaks["ours"], peaks["reference"]))
        if "control" in peaks:
            row.control_ratio = memory_ratio(peaks["ours"], peaks["control"])
        rows.append(row)
        log(rows[-1])
    if "train" in measures:
        for model in models.values():
            model.train()
        # The matmul that stands for the peak takes its turn in the same rounds, under the same load.
        matmul = square_matmul(sizes.matmul)
        times = alternate({**{side: train_step(model, train_inputs) for side, model in models.items()},
                           "matmul": matmul}, repeats)
        row = throughput_row(f"train/{name}", {side: times[side] for side in models},
                             tokens_per_batch(kind, train_inputs), "tokens/s")
        rows.append(row)
        log(row)
        peak = matmul.flops / statistics.median(times["matmul"])
        step_flops = train_flops_per_step(pair.ours, sizes)
        mfu = {side: statistics.median([100 * step_flops / t / peak for t in times[side]]) for side in models}
        rows.append(Row(f"mfu-train/{name}", mfu["ours"], mfu["reference"], "% of matmul", row.ratio,
                        row.control_ratio))
        log(rows[-1])
    for model in models.values():
        model.eval()
    if "forward" in measures:
        inputs = make_inputs(kind, sizes.batch, sizes.seq, sizes.vocab, labels=False)
        times = timed_pair(pair, lambda m: forward_pass(m, inputs, kind), repeats)
        rows.append(throughput_row(f"forward/{name}", times, tokens_per_batch(kind, inputs), "tokens/s"))
        log(rows[-1])
    if "generate" in measures and name in GENERATING:
        for batch in (1, 8):
            inputs = make_inputs(kind, batch, sizes.prompt, sizes.vocab, labels=False)
            inputs.pop("decoder_input_ids", None)
            times = timed_pair(pair, lambda m, inputs=inputs: generation(m, inputs, sizes.new_tokens), repeats)
            rows.append(throughput_row(f"generate-b{batch}/{name}", times, batch * sizes.new_tokens, "tokens/s"))
            log(rows[-1])
    return rows


def bench_compile(pair: Pair, sizes: Sizes, repeats: int, eager_rows: dict[str, Row], log) -> list[Row]:
    """Both models compiled (inductor): a training step, and generate() with a static cache."""
    rows: list[Row] = []
    name, kind = pair.name, pair.kind
    inputs = make_inputs(kind, sizes.batch, sizes.seq, sizes.vocab, labels=True)
    compiled = {}
    for label, model in (("ours", pair.ours), ("reference", pair.reference)):
        model.train()
        compiled[label] = train_step(torch.compile(model), inputs)
    times = alternate(compiled, repeats, warmup=2)  # the first calls compile (forward, then backward)
    rows.append(throughput_row(f"compile-train/{name}", times, tokens_per_batch(kind, inputs), "tokens/s"))
    log(rows[-1])
    if name in GENERATING:
        prompt = make_inputs(kind, 1, sizes.prompt, sizes.vocab, labels=False)
        prompt.pop("decoder_input_ids", None)
        runs = {}
        for label, model in (("ours", pair.ours), ("reference", pair.reference)):
            model.eval()
            model.forward = torch.compile(model.forward, dynamic=False)  # as a user would; shapes fixed by the cache
            runs[label] = generation(model, prompt, sizes.new_tokens, cache_implementation="static")
        times = alternate(runs, repeats, warmup=2)
        rows.append(throughput_row(f"compile-generate-b1/{name}", times, sizes.new_tokens, "tokens/s"))
        log(rows[-1])
        for model in (pair.ours, pair.reference):
            del model.forward  # back to the class's eager forward
    for row in rows:
        eager = eager_rows.get(row.name.removeprefix("compile-"))
        if eager is not None:
            log(f"  {row.name}: compiling speeds ours up {row.ours / eager.ours:.2f}x, "
                f"the reference {row.reference / eager.reference:.2f}x")
    return rows


def attention_memory_rows(sizes: Sizes, log) -> list[Row]:
    """Peak memory of one forward of a Llama-shaped stack (one layer) at growing lengths, eager vs SDPA.

    The bare models (no LM head) at batch 1, so the numbers are the attention's: eager attention holds
    (heads, T, T) scores and grows quadratically with T; SDPA's flash kernel works in tiles and must not.
    """
    memory_sizes = replace(sizes, hidden=sizes.hidden // 2, heads=max(2, sizes.heads // 2),
                           kv_heads=max(1, sizes.kv_heads // 2), layers=1)
    rows = []
    for attn in ("eager", "sdpa"):
        pair = build_pair("llama", memory_sizes, attn)
        for length in sizes.memory_lengths:
            ids = make_inputs("causal", 1, length, sizes.vocab, labels=False)["input_ids"]

            def forward(model: PreTrainedModel, ids: torch.Tensor = ids) -> Callable[[], None]:
                def run() -> None:
                    with torch.inference_mode():
                        model.eval().model(input_ids=ids, use_cache=False)

                return run

            ours = peak_memory_mib(forward(pair.ours))
            reference = peak_memory_mib(forward(pair.reference))
            rows.append(Row(f"memory-T{length}/{attn}", ours, reference, "MiB", memory_ratio(ours, reference)))
            log(rows[-1])
    return rows


# ----------------------------------------------------------------------------------------------
# Running and reporting


def run_benchmark(
    pairs: Sequence[str] = PAIRS,
    measures: Sequence[str] = MEASURES,
    tiny: bool = False,
    repeats: int | None = None,
    threads: int | None = None,
    compile: bool = False,
    attn: str = "sdpa",
    control: bool = False,
    log: Callable[[object], None] | None = None,
) -> list[Row]:
    """Build every pair, measure, and return the rows (see the module docstring)."""
    log = log or (lambda message: None)
    transformers.logging.set_verbosity_error()  # config notices from the reference models are not results
    if threads:
        torch.set_num_threads(threads)
    sizes = TINY if tiny else FULL
    repeats = repeats or (3 if tiny else 7)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    log(f"threads={torch.get_num_threads()} cores={os.cpu_count()} load average={load} repeats={repeats} "
        f"sizes={asdict(sizes)}")
    log(f"a {sizes.matmul}x{sizes.matmul} float32 product: {matmul_flops(sizes.matmul) / 1e9:.0f} GFLOP/s "
        "(the MFU rows count against the same product timed in their rounds)")
    rows: list[Row] = []
    per_pair = [measure for measure in measures if measure != "attention-memory"]
    for name in pairs if per_pair else ():
        pair = build_pair(name, sizes, attn, control=control)
        log(f"{name}: ours {count_params(pair.ours):,} parameters, reference {count_params(pair.reference):,}; "
            f"{train_flops_per_step(pair.ours, sizes) / 1e9:.0f} GFLOP per training step")
        pair_rows = bench_pair(pair, sizes, per_pair, repeats, log)
        rows += pair_rows
        if compile:
            rows += bench_compile(pair, sizes, repeats, {row.name: row for row in pair_rows}, log)
    if "attention-memory" in measures:
        rows += attention_memory_rows(sizes, log)
    return rows


def _number(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def format_table(rows: Sequence[Row]) -> str:
    """A Markdown table: pastes as is into docs/performance.md (the A/A column when any row has it)."""
    control = any(row.control_ratio is not None for row in rows)

    def ratio(value: float | None) -> str:
        return "" if value is None else f"{value:.2f}"

    # (header, right-aligned, cell of a row)
    columns: list[tuple[str, bool, Callable[[Row], str]]] = [
        ("name", False, lambda row: row.name),
        ("ours", True, lambda row: _number(row.ours)),
        ("reference", True, lambda row: _number(row.reference)),
        ("unit", False, lambda row: row.unit),
        ("ratio", True, lambda row: ratio(row.ratio)),
        *([("A/A ratio", True, lambda row: ratio(row.control_ratio))] if control else []),
    ]
    lines = ["| " + " | ".join(header for header, _, _ in columns) + " |",
             "|" + "|".join("---:" if right else "---" for _, right, _ in columns) + "|"]
    lines += ["| " + " | ".join(cell(row) for _, _, cell in columns) + " |" for row in rows]
    return "\n".join(lines)


def write_json(rows: Sequence[Row], path: str) -> None:
    def finite(value: object) -> object:  # NaN/inf are not JSON: a figure that could not be measured is null
        return value if not isinstance(value, float) or math.isfinite(value) else None


    atomic_write_json(path, [{key: finite(value) for key, value in asdict(row).items()} for row in rows])


def log_message(message: object) -> None:
    """Progress on stderr (the table goes to stdout)."""
    if isinstance(message, Row):
        control = "" if message.control_ratio is None else f"  A/A {message.control_ratio:.2f}"
        message = f"  {message.name:<22} ours {_number(message.ours):>10}  reference {_number(message.reference):>10} " \
                  f"{message.unit:<12} ratio {message.ratio:.2f}{control}"
    print(message, file=sys.stderr, flush=True)


def run_from_args(args: argparse.Namespace) -> int:
    if getattr(args, "estimate", False) and not args.size:
        return refuse("bench", ValueError("--estimate prices the size ladder: add --size 124m, 350m or 1b."))
    if args.size:  # the size ladder: its own rows, each in a fresh process
        from .ladder import Options, run_ladder  # the ladder's modules only for --size (start-up time)

        try:
            run_ladder(Options(sizes=args.size, work=args.work, json=args.json, threads=args.threads,
                               estimate=args.estimate, rows=args.rows), log=log_message)
        except MemoryError as error:
            print(f"hf-vanilla bench: {error}", file=sys.stderr)
            return 1
        return 0
    rows = run_benchmark(pairs=args.pairs, measures=args.measures, tiny=args.tiny, repeats=args.repeats,
                         threads=args.threads, compile=args.compile, attn=args.attn, control=args.control, log=log_message)
    print(format_table(rows))
    if args.json:
        write_json(rows, args.json)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench", description=DESCRIPTION)
    add_arguments(parser)
    return run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
