"""Inputs that used to take the machine's memory: a long text's attention maps (23 GB before the kernel killed the
command) and ALiBi's (T, T) integer tables. Memory now grows as the built-in schemes' does, and a job that would
not fit is refused before it starts, saying what does fit."""

from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from transformers import PreTrainedTokenizerFast

from hf_vanilla.positional import ALiBiPositions, build_positional_scheme
from hf_vanilla.tools import viz
from tests.factories import tiny_config, tiny_model


class Allocations(TorchDispatchMode):
    """Bytes of the new storages the ops allocate (views, in-place and ``out=`` results allocate none)."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        given = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        out = func(*args, **kwargs)
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in given:
                given.add(t.untyped_storage().data_ptr())
                self.bytes += t.untyped_storage().nbytes()
        return out


def old_alibi_bias(slopes: torch.Tensor, hidden: torch.Tensor, offset: int, key_length: int) -> torch.Tensor:
    """aafcb84's formula: an int64 |key - query| table, times the slopes in float32, cast to the compute dtype."""
    batch, length = hidden.shape[:2]
    distance = (torch.arange(key_length)[None, :] - (torch.arange(length)[:, None] + offset)).abs()
    return (-slopes[:, None, None] * distance).to(hidden.dtype)[None].expand(batch, -1, -1, -1)


def cache_places(length: int, offset: int = 0) -> torch.Tensor:
    """Positions offset, ..., offset + length - 1 for one batch row: the old formula's queries and keys."""
    return torch.arange(offset, offset + length)[None]


def alibi(causal: bool, heads: int = 4) -> ALiBiPositions:
    config = tiny_config("decoder" if causal else "encoder", "alibi", num_attention_heads=heads,
                         num_key_value_heads=heads, hidden_size=8 * heads)
    return build_positional_scheme(config, causal=causal)


@pytest.mark.parametrize("rows_positions", [1, 2], ids=["shared-positions", "positions-per-row"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_alibi_memory_grows_as_the_built_in_schemes_do(causal: bool, rows_positions: int) -> None:
    length, heads, scheme = 256, 4, alibi(causal)
    positions = cache_places(length).expand(rows_positions, -1) + torch.arange(rows_positions)[:, None]
    with Allocations() as allocated:
        bias = scheme.attention_inputs(torch.zeros(2, length, 8), positions, positions).bias
    assert bias.shape == (2, heads, length, length)
    rows = 32 * heads * length * rows_positions  # a few (heads, keys) rows a batch row: none grows with queries x keys
    if causal:  # one row of keys per head and row of positions, broadcast over the queries (and a shared batch)
        assert allocated.bytes <= rows
    else:  # the float bias itself and one float32 distance table per row of positions, no int64 ones
        assert allocated.bytes <= (heads + 1) * length * length * 4 * rows_positions + rows


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_bidirectional_alibi_bias_is_the_old_formula_bit_for_bit(dtype: torch.dtype) -> None:
    scheme = alibi(causal=False, heads=12)  # 12 heads: the interleaved slopes of a non-power of two
    for length, offset in ((9, 0), (1, 7), (4, 3)):
        hidden = torch.zeros(2, length, 8, dtype=dtype)
        new = scheme.attention_inputs(hidden, cache_places(length, offset), cache_places(length + offset)).bias
        assert torch.equal(new, old_alibi_bias(scheme.slopes, hidden, offset, length + offset))


def test_the_causal_alibi_bias_gives_the_old_attention() -> None:
    scheme = alibi(causal=True)
    hidden = torch.zeros(1, 1, 8)
    for offset in (0, 5, 11):  # a cached decoding step: the one query's row, bit for bit
        assert torch.equal(scheme.attention_inputs(hidden, cache_places(1, offset), cache_places(offset + 1)).bias,
                           old_alibi_bias(scheme.slopes, hidden, offset, offset + 1))
    model = tiny_model("decoder", "alibi", attn_implementation="eager")
    ids = torch.tensor([[5, 9, 3, 7, 1, 8, 2, 6, 4, 11, 13, 12]])
    with torch.no_grad():
        new = model(input_ids=ids).logits
        for stack_scheme in [m for m in model.modules() if isinstance(m, ALiBiPositions)]:
            stack_scheme.attention_inputs = lambda hidden, ids, keys, s=stack_scheme: type(
                "Inputs", (), {"rotary": None, "bias": old_alibi_bias(s.slopes, hidden, int(ids[0, 0]), keys.shape[-1])})()
        old = model(input_ids=ids).logits
    torch.testing.assert_close(new, old)  # softmax ignores each row's constant: equal up to float rounding


def word_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    vocab = {"<pad>": 0, "<unk>": 1, **{word: i + 2 for i, word in enumerate(words)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", unk_token="<unk>")


def test_attention_maps_that_would_not_fit_are_refused_before_anything_runs() -> None:
    model = tiny_model("decoder", "sinusoidal", vocab_size=40)  # 2 layers x 4 heads, float32: 8 bytes a cell
    tokenizer = word_tokenizer([f"w{i}" for i in range(30)])
    text = " ".join(f"w{i % 30}" for i in range(4000))
    assert viz.attention_memory(model, 4000) == 2 * 4 * 4000**2 * 8  # 1 GiB for this 2-layer toy
    calls = []
    model.register_forward_pre_hook(lambda *_: calls.append(1))
    with pytest.raises(ValueError, match=r"4000 tokens would take about 1\.0 GiB.*more than the 0\.0 GiB allowed; "
                                         r"draw the first 64 tokens \(--max-tokens 64\)"):
        viz.attention_maps(model, tokenizer, text, memory_limit=2 * 4 * 64**2 * 8)
    assert not calls  # refused from the estimate: the model never ran
    maps = viz.attention_maps(model, tokenizer, text, max_tokens=64, memory_limit=2 * 4 * 64**2 * 8)
    assert maps.weights["decoder"].shape == (2, 4, 64, 64) and maps.tokens["decoder"][:2] == ["w0", "w1"]


def test_an_encoder_decoders_estimate_counts_the_decoder_and_cross_attention() -> None:
    model = tiny_model("encoder-decoder", "sinusoidal")
    config = model.config
    cells = config.num_hidden_layers * 10**2 + config.num_decoder_layers * (5**2 + 5 * 10)
    assert viz.attention_memory(model, 10, 5) == config.num_attention_heads * cells * 8
