"""See inside: pictures of attention and of the positional schemes, with the numbers behind them.

Every ``plot_*`` function returns a :class:`Picture`: the matplotlib ``Figure`` and a ``data`` dict
holding exactly the arrays that were drawn, so code (and tests) can check what a picture shows
without reading pixels. Pass ``path=`` to also write a PNG.

* Attention: :func:`collect_attentions` (batched weights of any model), :func:`attention_maps` (one
  text through a model and its tokenizer), :func:`plot_attention` (one head, a layer, a head across
  layers, or the full layers x heads overview), :func:`average_attention_distance` and
  :func:`plot_attention_distance`.
* Positions: :func:`plot_sinusoidal`, :func:`plot_rope`, :func:`plot_alibi`,
  :func:`plot_relative_bias`, :func:`plot_scores_vs_distance`, all written by
  :func:`write_positional_figures`.
* The block and its cost: :func:`hidden_state_norms` / :func:`plot_hidden_state_norms` (pre- vs
  post-norm residual streams) and :func:`attention_cost` / :func:`plot_attention_cost`.

Command line: ``hf-vanilla attention MODEL_DIR "text" --out FILE.png`` and
``hf-vanilla positions --out DIR``.

matplotlib is the [viz] extra (``pip install 'hf_vanilla[viz]'``); importing this module without it fails in one
line that says so. Figures are built on the Agg canvas directly, never through pyplot: nothing opens a window,
nothing needs a display, and no global figure state leaks between calls.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..extras import require_extra

require_extra("viz", __name__)  # before matplotlib's import, so a missing extra is one line naming it

import numpy as np  # noqa: E402
import torch  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from transformers import (  # noqa: E402
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForQuestionAnswering,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
)

from .. import register  # noqa: E402
from ..checkpoint import load_complete  # noqa: E402
from ..configuration_vanilla import VanillaConfig  # noqa: E402
from ..errors import HfVanillaError, refuse  # noqa: E402
from ..modeling_vanilla import stacks_of  # noqa: E402
from ..positional import (  # noqa: E402
    ALiBiPositions,
    RelativePositionBias,
    RotaryPositions,
    relative_position_bucket,
    rotate,
    sinusoid_table,
)

#: Which attention a map comes from: self-attention of the encoder or decoder, or the decoder's cross-attention.
KINDS = ("encoder", "decoder", "cross")

def _new_figure(width: float, height: float) -> Figure:
    """A Figure on an Agg canvas: headless by construction, whatever backend pyplot would pick."""
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


@dataclass
class Picture:
    """A rendered figure and the numbers drawn in it."""

    figure: Figure
    data: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    def save(self, path: str | Path, dpi: int = 100) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        # No "Software" tag: the same picture gives the same bytes across matplotlib versions.
        self.figure.savefig(path, dpi=dpi, format="png", metadata={"Software": None})
        self.path = path
        return path


def _finish(picture: Picture, path: str | Path | None) -> Picture:
    if path is not None:
        picture.save(path)
    return picture


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to("cpu", torch.float32).numpy()


def _label(token: str) -> str:
    # "$" would start mathtext in a tick label; long sub-words would squeeze the heatmap.
    token = token.replace("$", r"\$")
    return token if len(token) <= 12 else token[:11] + "\u2026"


# ----------------------------------------------------------------------------------------------
# Collecting attention weights


def model_family(model: torch.nn.Module) -> str:
    """``"encoder"``, ``"decoder"`` or ``"encoder-decoder"``, for hf_vanilla models and other transformers models."""
    config = model.config
    family = getattr(config, "architecture", None)
    if family in ("encoder", "decoder", "encoder-decoder"):
        return family
    if getattr(config, "is_encoder_decoder", False):
        return "encoder-decoder"
    return "decoder" if getattr(config, "is_decoder", False) or type(model).__name__.endswith("CausalLM") else "encoder"


@torch.no_grad()
def collect_attentions(model: torch.nn.Module, **inputs: Any) -> dict[str, torch.Tensor]:
    """Attention probabilities of one forward: ``{kind: (batch, layers, heads, queries, keys)}`` on the CPU.

    Kinds are ``"encoder"`` and/or ``"decoder"`` (self-attention) and ``"cross"`` (decoder queries over
    encoder keys). Only the eager kernel materialises the probabilities (SDPA and flash never form
    them), so the model is switched to ``"eager"`` for this call and switched back afterwards; it
    also runs in eval mode, because attention dropout would punch random holes in the maps.
    """
    family = model_family(model)
    previous_impl = model.config._attn_implementation
    was_training = model.training
    if previous_impl != "eager":
        model.set_attn_implementation("eager")
    model.eval()
    try:
        if family != "encoder":
            inputs.setdefault("use_cache", False)  # a cache is of no use for one forward
        outputs = model(**inputs, output_attentions=True)
    finally:
        if previous_impl != "eager":
            model.set_attn_implementation(previous_impl)
        model.train(was_training)

    if family == "encoder-decoder":
        found = {"encoder": outputs.encoder_attentions, "decoder": outputs.decoder_attentions,
                 "cross": outputs.cross_attentions}
    else:
        found = {family: outputs.attentions}
    return {kind: torch.stack(layers, dim=1).detach().float().cpu() for kind, layers in found.items() if layers}


@dataclass
class AttentionMaps:
    """Attention of one sequence: ``weights[kind]`` is (layers, heads, queries, keys); ``tokens`` label the axes.

    ``tokens`` has ``"encoder"`` and/or ``"decoder"``; cross-attention uses decoder tokens for the
    queries and encoder tokens for the keys.
    """

    weights: dict[str, torch.Tensor]
    tokens: dict[str, list[str]]
    title: str = ""

    def axes(self, kind: str) -> tuple[list[str], list[str]]:
        """(query tokens, key tokens) of a kind."""
        if kind == "cross":
            return self.tokens["decoder"], self.tokens["encoder"]
        return self.tokens[kind], self.tokens[kind]

    @property
    def kinds(self) -> list[str]:
        return [kind for kind in KINDS if kind in self.weights]


def attention_memory(model: torch.nn.Module, source_length: int, target_length: int = 0) -> int:
    """Bytes :func:`collect_attentions` holds at its peak for one sequence: every layer's (heads, queries, keys)
    probabilities as the model returns them, their stack, and its float32 copy. ``target_length``: the
    decoder's tokens of an encoder-decoder (its self- and cross-attention)."""
    config = model.config
    heads, layers = config.num_attention_heads, config.num_hidden_layers
    size = next(model.parameters()).element_size()
    per_probability = 2 * size + (4 if size != 4 else 0)
    if model_family(model) != "encoder-decoder":
        return layers * heads * source_length**2 * per_probability
    decoder_layers = getattr(config, "num_decoder_layers", None) or layers
    cells = layers * source_length**2 + decoder_layers * (target_length**2 + target_length * source_length)
    return heads * cells * per_probability


def available_memory() -> int:
    """Half the memory the system has free now (Linux ``MemAvailable``), else 4 GiB."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 // 2
    except OSError:
        pass
    return 4 << 30


def check_attention_memory(model: torch.nn.Module, source_length: int, target_length: int, limit: int) -> None:
    """Refuse maps that would not fit in ``limit`` bytes, before anything is computed, saying how many tokens do."""
    needed = attention_memory(model, source_length, target_length)
    if needed <= limit:
        return
    fits = max((n for n in range(1, source_length) if attention_memory(model, n, min(n, target_length)) <= limit),
               default=0)
    decoder = f" and {target_length} decoder tokens" if target_length else ""
    raise ValueError(f"the attention maps of {source_length} tokens{decoder} would take about {needed / 2**30:.1f} "
                     f"GiB (every layer's and head's queries x keys probabilities), more than the {limit / 2**30:.1f} "
                     f"GiB allowed; draw the first {fits} tokens (--max-tokens {fits}) or a shorter text")


@torch.no_grad()
def attention_maps(
    model: torch.nn.Module,
    tokenizer: Any,
    text: str,
    target: str | None = None,
    max_new_tokens: int = 32,
    title: str = "",
    max_tokens: int | None = None,
    memory_limit: int | None = None,
) -> AttentionMaps:
    """Run ``text`` through ``model`` and keep every attention map, labelled with the tokenizer's tokens.

    For an encoder-decoder the decoder reads ``target`` (after the decoder start token); without a
    target it reads the model's own greedy output for ``text``, so cross-attention shows which source
    tokens each generated token looked at. ``max_tokens`` keeps the text's first tokens (and the target's).
    Maps that would take more than ``memory_limit`` bytes (default: half the free memory) are refused
    before anything runs (:func:`check_attention_memory`).
    """
    device = next(model.parameters()).device
    cut = dict(truncation=True, max_length=max_tokens) if max_tokens is not None else {}
    encoded = tokenizer(text, return_tensors="pt", **cut)
    input_ids = encoded["input_ids"].to(device)
    family = model_family(model)
    target_ids = tokenizer(target, return_tensors="pt", **cut)["input_ids"].to(device) if target is not None else None
    target_length = 0 if family != "encoder-decoder" else (
        1 + (target_ids.shape[1] if target_ids is not None else max_new_tokens))
    check_attention_memory(model, input_ids.shape[1], target_length,
                           available_memory() if memory_limit is None else memory_limit)
    tokens = token_labels(tokenizer, input_ids[0].tolist())
    if family != "encoder-decoder":
        weights = collect_attentions(model, input_ids=input_ids)
        return AttentionMaps({k: v[0] for k, v in weights.items()}, {family: tokens}, title)

    start = model.config.decoder_start_token_id
    if target_ids is not None:
        decoder_input_ids = torch.cat([torch.full_like(target_ids[:, :1], start), target_ids], dim=1)
    elif hasattr(model, "generate"):
        decoder_input_ids = model.generate(
            input_ids=input_ids, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1
        )
    else:  # a bare model cannot generate: the decoder sees only its start token
        decoder_input_ids = torch.full_like(input_ids[:, :1], start)
    weights = collect_attentions(model, input_ids=input_ids, decoder_input_ids=decoder_input_ids)
    decoder_tokens = token_labels(tokenizer, decoder_input_ids[0].tolist())
    return AttentionMaps({k: v[0] for k, v in weights.items()}, {"encoder": tokens, "decoder": decoder_tokens}, title)


def token_labels(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """Each token as the tokenizer's own decoding writes it (byte-level ``Ġcat`` is `` cat``), not its raw
    vocabulary entry; a token that decodes to nothing keeps its entry."""
    return [tokenizer.convert_tokens_to_string([token]) or token for token in tokenizer.convert_ids_to_tokens(ids)]


# ----------------------------------------------------------------------------------------------
# Attention distance


def average_attention_distance(weights: torch.Tensor, query_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over queries of sum_j w[i, j] * |i - j|: how far, in tokens, a head looks on average.

    ``weights`` is (..., queries, keys) with queries and keys on the same positions (self-attention;
    for cross-attention the two axes are different sequences and the number means nothing).
    ``query_mask`` (..., queries), 1 for real tokens, leaves padded queries out of the mean (padded keys
    already get zero weight). Returns the leading shape, e.g. (layers, heads).
    """
    queries, keys = weights.shape[-2:]
    offset = keys - queries  # queries sit at the end of the keys (a decoder step with a cache)
    distance = (torch.arange(keys)[None, :] - torch.arange(queries)[:, None] - offset).abs()
    per_query = (weights.double() * distance.to(weights.device, torch.float64)).sum(-1)
    if query_mask is None:
        return per_query.mean(-1).float()
    mask = query_mask.to(per_query.dtype)
    while mask.dim() < per_query.dim():  # (batch, q) against (batch, layers, heads, q)
        mask = mask.unsqueeze(-2)
    return ((per_query * mask).sum(-1) / mask.sum(-1).clamp(min=1)).float()


def plot_attention_distance(
    distances: Mapping[str, torch.Tensor] | torch.Tensor, title: str = "", path: str | Path | None = None
) -> Picture:
    """Average attention distance of every head, by layer: local heads sit low, global heads high."""
    if isinstance(distances, torch.Tensor):
        distances = {"self": distances}
    figure = _new_figure(6.5, 4)
    ax = figure.add_subplot()
    data: dict[str, Any] = {}
    markers = {"encoder": "o", "decoder": "s", "self": "o"}
    for index, (kind, values) in enumerate(distances.items()):
        values = _numpy(values)
        layers, heads = values.shape
        # Spread heads a little along x so points of one layer do not sit on top of each other.
        jitter = (np.arange(heads) - (heads - 1) / 2) * (0.3 / max(heads, 1))
        shift = 0.08 * (index - (len(distances) - 1) / 2)
        for layer in range(layers):
            ax.scatter(layer + jitter + shift, values[layer], marker=markers.get(kind, "o"), s=25,
                       color=f"C{index}", label=kind if layer == 0 else None)
        ax.plot(np.arange(layers) + shift, values.mean(1), color=f"C{index}", alpha=0.5)
        data[kind] = values
    ax.set_xticks(range(max(len(v) for v in data.values())))
    ax.set_xlabel("layer")
    ax.set_ylabel("average attention distance (tokens)")
    ax.set_title(title or "How far each head looks (dots: heads, line: layer mean)", fontsize=10)
    ax.legend()
    return _finish(Picture(figure, data), path)


# ----------------------------------------------------------------------------------------------
# Attention heatmaps


def _heatmap(ax: Axes, weights: np.ndarray, query_tokens: Sequence[str] | None, key_tokens: Sequence[str] | None,
             ticks: bool, cmap: str = "viridis"):
    # Scale each panel to its own maximum: a near-uniform head over 40 tokens would vanish on a 0-1 scale.
    image = ax.imshow(weights, cmap=cmap, vmin=0.0, vmax=max(float(weights.max()), 1e-9), aspect="auto",
                      interpolation="nearest")
    if ticks and query_tokens is not None and key_tokens is not None:
        size = 8 if max(len(query_tokens), len(key_tokens)) <= 24 else 6
        ax.set_xticks(range(len(key_tokens)), [_label(t) for t in key_tokens], rotation=90, fontsize=size)
        ax.set_yticks(range(len(query_tokens)), [_label(t) for t in query_tokens], fontsize=size)
    else:
        ax.set_xticks([])
        ax.set_yticks([])
    return image


def plot_attention_head(
    weights: torch.Tensor,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    title: str = "",
    path: str | Path | None = None,
) -> Picture:
    """One head's (queries, keys) probabilities, tokens on both axes: row i is where token i looks."""
    values = _numpy(weights)
    size = min(4 + 0.25 * max(values.shape), 14)
    figure = _new_figure(size + 1.2, size)
    ax = figure.add_subplot()
    image = _heatmap(ax, values, query_tokens, key_tokens, ticks=max(values.shape) <= 64)
    figure.colorbar(image, ax=ax, label="attention probability")
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    ax.set_title(title)
    return _finish(Picture(figure, {"weights": values}), path)


def plot_attention_grid(
    weights: torch.Tensor,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    title: str = "",
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
    distances: torch.Tensor | None = None,
    path: str | Path | None = None,
) -> Picture:
    """Overview: (layers, heads, queries, keys) as a grid of heatmaps, one row per layer, one column per head.

    ``layers`` and ``heads`` name the rows and columns (when ``weights`` is a slice); ``distances``
    (layers, heads), if given, is printed in each panel's title.
    """
    values = _numpy(weights)
    rows, cols = values.shape[:2]
    layers = list(layers) if layers is not None else list(range(rows))
    heads = list(heads) if heads is not None else list(range(cols))
    length = max(values.shape[2:])
    # Token labels only where they can be read: short sequences, on the outer panels.
    ticks = length <= 16 and rows * cols <= 16
    panel = 2.0 if not ticks else 2.6
    figure = _new_figure(min(1 + panel * cols, 30), min(0.8 + panel * rows, 30))
    axes = figure.subplots(rows, cols, squeeze=False)
    for r in range(rows):
        for c in range(cols):
            ax = axes[r][c]
            _heatmap(ax, values[r, c], query_tokens, key_tokens, ticks=ticks)
            if ticks and c:
                ax.set_yticklabels([])
            if ticks and r < rows - 1:
                ax.set_xticklabels([])
            label = f"layer {layers[r]} head {heads[c]}"
            if distances is not None:
                label += f"\ndist {float(distances[r, c]):.2f}"
            ax.set_title(label, fontsize=8)
    if title:
        figure.suptitle(title)
    data: dict[str, Any] = {"weights": values, "layers": layers, "heads": heads}
    if distances is not None:
        data["distances"] = _numpy(distances)
    return _finish(Picture(figure, data), path)


def plot_attention(
    maps: AttentionMaps,
    kind: str | None = None,
    layer: int | None = None,
    head: int | None = None,
    path: str | Path | None = None,
    average: bool = False,
) -> Picture:
    """Draw ``maps``: one head (layer and head), one layer's heads, one head across layers, or everything.

    ``kind`` defaults to the first stack (the encoder of an encoder-decoder). ``average=True`` draws the mean
    of the selected heads as one map: for cross-attention, the model's soft alignment of target to source.
    """
    kind = kind or maps.kinds[0]
    if kind not in maps.weights:
        raise ValueError(f"No {kind!r} attention in these maps; available: {', '.join(maps.kinds)}. "
                         "Cross-attention exists only in encoder-decoder models.")
    weights = maps.weights[kind]
    num_layers, num_heads = weights.shape[:2]
    for name, value, limit in (("layer", layer, num_layers), ("head", head, num_heads)):
        if value is not None and not 0 <= value < limit:
            raise ValueError(f"{name} {value} is out of range: the {kind} attention has {limit} {name}s (0-{limit - 1}).")
    query_tokens, key_tokens = maps.axes(kind)
    what = {"encoder": "encoder self-attention", "decoder": "decoder self-attention",
            "cross": "cross-attention (decoder queries, encoder keys)"}[kind]
    prefix = f"{maps.title}: " if maps.title else ""
    if layer is not None and head is not None:
        picture = plot_attention_head(weights[layer, head], query_tokens, key_tokens,
                                      f"{prefix}{what}, layer {layer}, head {head}", path=None)
        picture.data.update(kind=kind, layer=layer, head=head)
        return _finish(picture, path)
    layers = [layer] if layer is not None else list(range(num_layers))
    heads = [head] if head is not None else list(range(num_heads))
    selected = weights[layers][:, heads]
    if average:
        picture = plot_attention_head(selected.mean(dim=(0, 1)), query_tokens, key_tokens,
                                      f"{prefix}{what},\nmean of {_span(layers, 'layer')}, {_span(heads, 'head')}")
        picture.data.update(kind=kind, layers=layers, heads=heads)
        return _finish(picture, path)
    distances = average_attention_distance(selected) if kind != "cross" else None
    picture = plot_attention_grid(selected, query_tokens, key_tokens, f"{prefix}{what}", layers, heads, distances)
    picture.data["kind"] = kind
    return _finish(picture, path)


def _span(items: Sequence[int], name: str) -> str:
    return f"{name} {items[0]}" if len(items) == 1 else f"{name}s {items[0]}-{items[-1]}"


def plot_attention_kinds(maps: AttentionMaps, layer: int = 0, head: int = 0, path: str | Path | None = None) -> Picture:
    """Side by side, the same head of every attention the model has: full, causal (triangle), cross (rectangle)."""
    kinds = maps.kinds
    figure = _new_figure(4.2 * len(kinds), 4.4)
    axes = figure.subplots(1, len(kinds), squeeze=False)[0]
    data: dict[str, Any] = {}
    names = {"encoder": "encoder: every token sees every token", "decoder": "decoder: causal, no peeking ahead",
             "cross": "cross: decoder queries, encoder keys"}
    for ax, kind in zip(axes, kinds, strict=True):
        values = _numpy(maps.weights[kind][layer, head])
        query_tokens, key_tokens = maps.axes(kind)
        _heatmap(ax, values, query_tokens, key_tokens, ticks=max(values.shape) <= 24)
        ax.set_title(names[kind], fontsize=9)
        data[kind] = values
    figure.suptitle(f"{maps.title + ': ' if maps.title else ''}layer {layer}, head {head}")
    return _finish(Picture(figure, data), path)


# ----------------------------------------------------------------------------------------------
# Positional schemes


def _scheme_config(**fields: Any) -> VanillaConfig:
    """A throwaway config to instantiate a scheme module, so pictures come from the code the model runs."""
    base = dict(architecture="decoder", vocab_size=8, intermediate_size=8, num_hidden_layers=1)
    return VanillaConfig(**{**base, **fields})


def plot_sinusoidal(
    length: int = 100, dim: int = 128, interleaved: bool = True, path: str | Path | None = None
) -> Picture:
    """The paper's sinusoid table: fast waves in the first frequencies, slow ones in the last.

    Drawn as two panels, the sine channels and the cosine channels, whatever the layout: interleaved
    sin/cos columns would otherwise alias into stripes. ``data["table"]`` is the whole table.
    """
    table = _numpy(sinusoid_table(torch.arange(length), dim, interleaved))
    half = dim // 2
    sines, cosines = (table[:, 0 : 2 * half : 2], table[:, 1 : 2 * half : 2]) if interleaved else (
        table[:, :half], table[:, half : 2 * half])
    figure = _new_figure(11, 4.2)
    axes = figure.subplots(1, 2, sharey=True)
    for ax, values, name in zip(axes, (sines, cosines), ("sin", "cos"), strict=True):
        image = ax.imshow(values, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
        channel = ("2i" if name == "sin" else "2i+1") if interleaved else ("i" if name == "sin" else f"{half}+i")
        ax.set_xlabel(f"frequency index i (channel {channel})")
        ax.set_title(f"PE(pos, {channel}) = {name}(pos / 10000^(2i/d))", fontsize=10)
    axes[0].set_ylabel("position")
    figure.colorbar(image, ax=axes, label="value")
    figure.suptitle(f"Sinusoidal positions (Vaswani et al. 3.5), d_model={dim}, "
                    f"{'interleaved' if interleaved else 'concatenated'} layout")
    return _finish(Picture(figure, {"table": table, "positions": np.arange(length)}), path)


def rope_scores(
    head_dim: int = 64, length: int = 128, theta: float = 10000.0, scheme: RotaryPositions | None = None, seed: int = 0
) -> dict[str, np.ndarray]:
    """q.k after RoPE, as a function of the query-key distance, for fixed q and k.

    The key sits at position 0 and the query at position ``d``; since RoPE turns q.k into
    q^T R(d) k, the same numbers come out for any pair of positions ``d`` apart. ``ones``: q = k =
    all ones (RoFormer's long-term decay); ``random``: q = k = one Gaussian vector.
    """
    if scheme is None:
        config = _scheme_config(position_embedding_type="rope", hidden_size=head_dim, num_attention_heads=1,
                                max_position_embeddings=length, rope_parameters={"rope_theta": theta, "rope_type": "default"})
        scheme = RotaryPositions(config)
    head_dim = scheme.inv_freq.shape[0] * 2
    positions = torch.arange(length)
    cos, sin = scheme(torch.zeros(1, dtype=torch.float32), positions[None])
    generator = torch.Generator().manual_seed(seed)
    vectors = {"ones": torch.ones(head_dim), "random": torch.randn(head_dim, generator=generator)}
    data: dict[str, np.ndarray] = {"distance": positions.numpy(), "inv_freq": _numpy(scheme.inv_freq),
                                   "angles": _numpy(positions[:, None].float() * scheme.inv_freq[None].float())}
    for name, vector in vectors.items():
        queries = rotate(vector.expand(1, 1, length, head_dim), cos, sin)[0, 0]  # query at position d
        data[name] = _numpy(queries @ vector)  # key at position 0: unrotated
    return data


def plot_rope(
    head_dim: int = 64, length: int = 128, theta: float = 10000.0, scheme: RotaryPositions | None = None,
    path: str | Path | None = None,
) -> Picture:
    """RoPE: the rotation angle of each dimension pair by position, and q.k against distance."""
    data = rope_scores(head_dim, length, theta, scheme)
    figure = _new_figure(11, 4.2)
    left, right = figure.subplots(1, 2)
    image = left.imshow(np.cos(data["angles"]), cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
    figure.colorbar(image, ax=left, label="cos(position x theta_i)")
    left.set_xlabel("dimension pair i (theta_i = base^(-2i/d))")
    left.set_ylabel("position")
    left.set_title("RoPE rotation per dimension pair")
    pairs = data["inv_freq"].shape[0]
    right.plot(data["distance"], data["ones"] / (2 * pairs), label="q = k = ones")
    right.plot(data["distance"], data["random"] / data["random"][0], label="q = k = random", alpha=0.8)
    right.axhline(0, color="grey", lw=0.5)
    right.set_xlabel("query - key distance")
    right.set_ylabel("q . R(d) k  /  q . k")
    right.set_title("RoPE: the score depends only on the distance")
    right.legend()
    return _finish(Picture(figure, data), path)


def alibi_bias(num_heads: int = 8, length: int = 16) -> dict[str, np.ndarray]:
    """ALiBi's bias, (heads, queries, keys), computed by :class:`ALiBiPositions` itself."""
    scheme = ALiBiPositions(_scheme_config(position_embedding_type="alibi", hidden_size=num_heads * 4,
                                           num_attention_heads=num_heads))
    bias = scheme.attention_inputs(torch.zeros(1, length, 1), *[torch.arange(length)[None]] * 2).bias[0]
    return {"bias": _numpy(bias), "slopes": _numpy(scheme.slopes)}


def plot_alibi(num_heads: int = 8, length: int = 16, path: str | Path | None = None) -> Picture:
    """ALiBi: one linear distance penalty per head, -slope * |i - j|, steep heads local, gentle heads global."""
    data = alibi_bias(num_heads, length)
    cols = min(num_heads, 4)
    rows = math.ceil(num_heads / cols)
    figure = _new_figure(2.6 * cols + 1, 2.5 * rows + 0.5)
    axes = figure.subplots(rows, cols, squeeze=False)
    low = float(data["bias"].min())
    for index, ax in enumerate(axes.flat):
        if index >= num_heads:
            ax.set_visible(False)
            continue
        image = ax.imshow(data["bias"][index], cmap="magma", vmin=low, vmax=0, interpolation="nearest")
        ax.set_title(f"head {index}: slope {data['slopes'][index]:.4g}", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    figure.colorbar(image, ax=axes, label="bias added to q.k (logits)")
    figure.suptitle(f"ALiBi biases (Press et al.), {length} positions: query on y, key on x")
    return _finish(Picture(figure, data), path)


def relative_bias(
    length: int = 32, num_buckets: int = 32, max_distance: int = 128, num_heads: int = 8,
    scheme: RelativePositionBias | None = None, seed: int = 0,
) -> dict[str, np.ndarray]:
    """T5's bucketed bias, (heads, queries, keys), from :class:`RelativePositionBias` (a model's, or a random one).

    Also the bucket of every (query, key) pair and, for distances -length..length, the bucket in a
    bidirectional (encoder) and a causal (decoder) stack.
    """
    if scheme is None:
        config = _scheme_config(position_embedding_type="relative", hidden_size=num_heads * 4,
                                num_attention_heads=num_heads, relative_attention_num_buckets=num_buckets,
                                relative_attention_max_distance=max_distance)
        scheme = RelativePositionBias(config, bidirectional=True)
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():  # untrained: one random value per bucket and head, so the bucket shapes show
            scheme.relative_attention_bias.weight.copy_(torch.randn(scheme.relative_attention_bias.weight.shape,
                                                                    generator=generator))
    with torch.no_grad():
        bias = scheme.attention_inputs(torch.zeros(1, length, 1), *[torch.arange(length)[None]] * 2).bias[0]
    signed = torch.arange(-length, length + 1)
    positions = torch.arange(length)
    pairs = positions[None, :] - positions[:, None]
    return {
        "bias": _numpy(bias),
        "buckets": relative_position_bucket(pairs, scheme.bidirectional, scheme.num_buckets, scheme.max_distance).numpy(),
        "distance": signed.numpy(),
        "bucket_bidirectional": relative_position_bucket(signed, True, scheme.num_buckets, scheme.max_distance).numpy(),
        "bucket_causal": relative_position_bucket(signed, False, scheme.num_buckets, scheme.max_distance).numpy(),
        "weight": _numpy(scheme.relative_attention_bias.weight),
        "bidirectional": np.array(scheme.bidirectional),
    }


def plot_relative_bias(
    length: int = 32, num_buckets: int = 32, max_distance: int = 128, num_heads: int = 8,
    scheme: RelativePositionBias | None = None, trained: bool = False, path: str | Path | None = None,
) -> Picture:
    """T5 relative bias: distance -> bucket (exact near, logarithmic far), and one head's bias matrix."""
    data = relative_bias(length, num_buckets, max_distance, num_heads, scheme)
    figure = _new_figure(13, 4.2)
    steps, buckets, bias = figure.subplots(1, 3)
    steps.step(data["distance"], data["bucket_bidirectional"], where="mid", label="bidirectional (encoder)")
    steps.step(data["distance"], data["bucket_causal"], where="mid", label="causal (decoder)")
    steps.set_xlabel("key - query distance")
    steps.set_ylabel("bucket")
    steps.set_title("Distance -> bucket")
    steps.legend(fontsize=8)
    image = buckets.imshow(data["buckets"], cmap="viridis", interpolation="nearest")
    figure.colorbar(image, ax=buckets)
    buckets.set_title("Bucket of each (query, key)")
    image = bias.imshow(data["bias"][0], cmap="RdBu_r", interpolation="nearest",
                        vmin=-np.abs(data["bias"][0]).max(), vmax=np.abs(data["bias"][0]).max())
    figure.colorbar(image, ax=bias, label="bias (logits)")
    bias.set_title("Head 0 bias" + ("" if trained else " (untrained: random per bucket)"))
    for ax in (buckets, bias):
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    figure.suptitle(f"T5 relative position bias: {data['weight'].shape[0]} buckets, max distance {max_distance}")
    return _finish(Picture(figure, data), path)


def scores_vs_distance(
    length: int = 64, d_model: int = 512, head_dim: int = 64, num_heads: int = 8, theta: float = 10000.0,
    relative: RelativePositionBias | None = None,
) -> dict[str, np.ndarray]:
    """What each scheme alone adds to (or makes of) the score of a query and a key ``d`` tokens apart.

    * ``sinusoidal``: PE(0).PE(d) / (d_model/2), the position-only part of q.k with identity projections;
    * ``rope``: q.R(d)k / q.k for q = k = ones;
    * ``alibi_h``: the bias of head h, -slope_h * d;
    * ``relative``: head 0's T5 bias for key ``d`` tokens before the query (a random one unless given);
    * ``none``: 0, no positional term (learned positions have no shape before training).
    """
    distance = torch.arange(length)
    table = sinusoid_table(distance, d_model, interleaved=True)
    rope = rope_scores(head_dim, length, theta)
    data: dict[str, np.ndarray] = {
        "distance": distance.numpy(),
        "sinusoidal": _numpy(table @ table[0] / (d_model // 2)),
        "rope": rope["ones"] / head_dim,
        "none": np.zeros(length, dtype=np.float32),
    }
    alibi = alibi_bias(num_heads, length)
    for head in range(num_heads):
        data[f"alibi_{head}"] = alibi["bias"][head, -1, ::-1].copy()  # last query, keys walking back
    rel = relative_bias(length, num_heads=num_heads, scheme=relative)
    data["relative"] = rel["bias"][0, -1, ::-1].copy()
    return data


def plot_scores_vs_distance(
    length: int = 64, d_model: int = 512, head_dim: int = 64, num_heads: int = 8,
    relative: RelativePositionBias | None = None, path: str | Path | None = None,
) -> Picture:
    """All schemes on one figure: how the score of a query and a key changes with their distance."""
    data = scores_vs_distance(length, d_model, head_dim, num_heads, relative=relative)
    x = data["distance"]
    figure = _new_figure(11, 4.2)
    similarity, bias = figure.subplots(1, 2, sharex=True)
    similarity.plot(x, data["sinusoidal"], label=f"sinusoidal: PE(0).PE(d), d_model={d_model}")
    similarity.plot(x, data["rope"], label=f"RoPE: q.R(d)k, q=k=ones, head_dim={head_dim}")
    similarity.plot(x, data["none"] + 1, label="none: constant (no position signal)", color="grey", ls="--")
    similarity.set_ylabel("normalised score (1 at distance 0)")
    similarity.set_title("Schemes that shape q.k itself")
    similarity.legend(fontsize=8)
    for head in range(num_heads):
        bias.plot(x, data[f"alibi_{head}"], color="C3", alpha=0.3 + 0.7 * (head + 1) / num_heads,
                  label="ALiBi, one line per head" if head == 0 else None)
    bias.step(x, data["relative"], where="mid", color="C4",
              label="T5 relative, head 0" + ("" if relative is not None else " (untrained, random)"))
    bias.set_ylim(max(float(data["alibi_0"].min()), -12) - 1, max(2.0, float(data["relative"].max()) + 0.5))
    bias.set_ylabel("bias added to the logit")
    bias.set_title("Schemes that add a bias")
    bias.legend(fontsize=8)
    for ax in (similarity, bias):
        ax.set_xlabel("distance between query and key (tokens)")
        ax.axhline(0, color="black", lw=0.5)
    figure.suptitle("How attention scores change with distance, scheme by scheme")
    return _finish(Picture(figure, data), path)


def write_positional_figures(out_dir: str | Path, config: VanillaConfig | None = None,
                             model: torch.nn.Module | None = None) -> dict[str, Picture]:
    """Write every positional picture into ``out_dir`` (``positions-*.png``), sized like ``config``'s model.

    Without a config the sizes are the paper's base model (d_model 512, 8 heads of 64). With a
    ``model`` whose scheme is T5's relative bias, its trained bias is drawn instead of a random one.
    """
    out_dir = Path(out_dir)
    d_model = config.hidden_size if config is not None else 512
    heads = config.num_attention_heads if config is not None else 8
    head_dim = config.head_dim if config is not None else 64
    rope = getattr(config, "rope_parameters", None)  # absent without RoPE (and without a config)
    theta = float(rope.get("rope_theta", 10000.0)) if rope else 10000.0
    interleaved = config.sinusoidal_layout == "interleaved" if config is not None else True
    relative = None
    if model is not None:
        relative = next((m for m in model.modules() if isinstance(m, RelativePositionBias)), None)
    buckets = relative.num_buckets if relative is not None else 32
    max_distance = relative.max_distance if relative is not None else 128
    pictures = {
        "sinusoidal": plot_sinusoidal(100, d_model, interleaved, path=out_dir / "positions-sinusoidal.png"),
        "rope": plot_rope(head_dim, 128, theta, path=out_dir / "positions-rope.png"),
        "alibi": plot_alibi(heads, 16, path=out_dir / "positions-alibi.png"),
        "relative": plot_relative_bias(32, buckets, max_distance, heads, relative, trained=relative is not None,
                                       path=out_dir / "positions-relative.png"),
        "distance": plot_scores_vs_distance(64, d_model, head_dim, heads, relative,
                                            path=out_dir / "positions-distance.png"),
    }
    return pictures


# ----------------------------------------------------------------------------------------------
# The block and the cost


@torch.no_grad()
def hidden_state_norms(model: torch.nn.Module, **inputs: Any) -> dict[str, torch.Tensor]:
    """Root-mean-square of the residual stream after the embeddings and after each block, per stack.

    Returns ``{"encoder"|"decoder": (layers + 1,)}``, averaged over real tokens. Pre-norm stacks let
    the residual stream grow with depth (each block adds to it); post-norm stacks renormalise it
    after every sub-layer, so it stays near 1 (times the norm's weight).

    For hf_vanilla models the block outputs are caught with hooks, before a stack's final norm:
    ``output_hidden_states`` reports the last one after that norm, which would hide the growth. For
    other models the hidden states are used as reported.
    """
    family = model_family(model)
    stacks = stacks_of(model)
    caught: dict[str, list[torch.Tensor]] = {kind: [] for kind in stacks}
    handles = []
    for kind, stack in stacks.items():
        handles.append(stack.layers[0].register_forward_pre_hook(
            lambda module, args, kind=kind: caught[kind].append(args[0])))
        for layer in stack.layers:
            handles.append(layer.register_forward_hook(
                lambda module, args, output, kind=kind: caught[kind].append(output)))
    was_training = model.training
    model.eval()
    try:
        if family != "encoder":
            inputs.setdefault("use_cache", False)
        outputs = model(**inputs, output_hidden_states=not stacks)
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    masks = {"encoder": inputs.get("attention_mask"), "decoder": inputs.get("decoder_attention_mask")}
    if family == "decoder":
        masks["decoder"] = inputs.get("attention_mask")
    if stacks:
        found = {kind: (caught[kind], masks[kind]) for kind in KINDS if kind in caught}
    elif family == "encoder-decoder":
        found = {"encoder": (outputs.encoder_hidden_states, masks["encoder"]),
                 "decoder": (outputs.decoder_hidden_states, masks["decoder"])}
    else:
        found = {family: (outputs.hidden_states, masks[family])}
    norms = {}
    for kind, (states, mask) in found.items():
        stacked = torch.stack(list(states)).float()  # (layers + 1, batch, seq, hidden)
        rms = stacked.pow(2).mean(-1).sqrt()
        weights = torch.ones_like(rms[0]) if mask is None else mask.to(rms)
        norms[kind] = ((rms * weights).sum((1, 2)) / weights.sum()).cpu()
    return norms


def plot_hidden_state_norms(norms: Mapping[str, torch.Tensor], title: str = "", path: str | Path | None = None) -> Picture:
    """One line per stack (or per model): residual-stream RMS from the embeddings (0) through each block."""
    figure = _new_figure(6.5, 4)
    ax = figure.add_subplot()
    data = {}
    for label, values in norms.items():
        values = _numpy(values)
        ax.plot(np.arange(len(values)), values, marker="o", label=label)
        data[label] = values
    ax.set_xlabel("after block (0 = embeddings)")
    ax.set_ylabel("RMS of the residual stream")
    ax.set_title(title or "Residual stream size through the stack", fontsize=10)
    ax.legend(fontsize=8)
    return _finish(Picture(figure, data), path)


def attention_cost(
    lengths: Sequence[int] | np.ndarray, hidden_size: int = 512, intermediate_size: int = 2048, num_heads: int = 8
) -> dict[str, np.ndarray]:
    """Multiply-adds x2 (FLOPs) of one encoder layer's forward for a sequence of n tokens.

    projections (q, k, v, o): 8 n d^2; scores Q K^T and weights x V: 4 n^2 d; feed-forward: 4 n d d_ff;
    the probabilities themselves: heads x n^2 numbers in memory. Attention overtakes the rest at
    n = 2 d + d_ff (the ``crossover``).
    """
    n = np.asarray(lengths, dtype=np.float64)
    d, d_ff = float(hidden_size), float(intermediate_size)
    return {
        "length": n,
        "projections": 8 * n * d * d,
        "attention": 4 * n * n * d,
        "ffn": 4 * n * d * d_ff,
        "weights_memory": num_heads * n * n,
        "crossover": np.array(2 * d + d_ff),
    }


def plot_attention_cost(
    hidden_size: int = 512, intermediate_size: int = 2048, num_heads: int = 8, max_length: int = 32768,
    path: str | Path | None = None,
) -> Picture:
    """FLOPs of a layer against sequence length: linear parts vs the quadratic attention matrix."""
    lengths = np.unique(np.geomspace(16, max_length, 60).astype(int))
    data = attention_cost(lengths, hidden_size, intermediate_size, num_heads)
    figure = _new_figure(6.5, 4.2)
    ax = figure.add_subplot()
    ax.loglog(data["length"], data["projections"], label="q, k, v, o projections: 8 n d^2")
    ax.loglog(data["length"], data["ffn"], label="feed-forward: 4 n d d_ff")
    ax.loglog(data["length"], data["projections"] + data["ffn"], label="projections + feed-forward", color="grey", ls=":")
    ax.loglog(data["length"], data["attention"], label="QK^T and AV: 4 n^2 d", lw=2)
    crossover = float(data["crossover"])
    ax.axvline(crossover, color="grey", ls="--", lw=0.8)
    ax.annotate(f"n = 2d + d_ff = {crossover:.0f}", (crossover, ax.get_ylim()[0]), rotation=90, fontsize=8,
                xytext=(3, 10), textcoords="offset points")
    ax.set_xlabel("sequence length n (tokens)")
    ax.set_ylabel("FLOPs per layer")
    ax.set_title(f"Cost of one layer, d={hidden_size}, d_ff={intermediate_size}")
    ax.legend(fontsize=8)
    return _finish(Picture(figure, data), path)


#: Generation scores the periodic evaluations can log (translation), drawn beside the losses.
SCORE_NAMES = {"bleu": "BLEU", "chrf": "chrF"}


def _points(log_history: Sequence[Mapping[str, Any]], name: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of ``eval_<name>`` (periodic) and ``validation_<name>`` (the run's final evaluation)."""
    found = {e["step"]: e[key] for e in log_history for key in (f"eval_{name}", f"validation_{name}")
             if key in e and "step" in e}
    steps = sorted(found)
    return np.array(steps), np.array([found[s] for s in steps])


def training_curves(log_history: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Training loss, validation loss and any validation scores (BLEU, chrF) against optimizer step, from a
    Trainer's ``log_history``.

    Validation points are the periodic evaluations (``eval_*``) and the run's final evaluation
    (``validation_*``), so the curves end where the run ended.
    """
    train = [(e["step"], e["loss"]) for e in log_history if "loss" in e and "step" in e]
    curves = {"train_step": np.array([s for s, _ in train]), "train_loss": np.array([v for _, v in train])}
    curves["eval_step"], curves["eval_loss"] = _points(log_history, "loss")
    for name in SCORE_NAMES:
        steps, values = _points(log_history, name)
        if len(steps):
            curves[f"{name}_step"], curves[name] = steps, values
    return curves


def plot_training_curves(log_history: Sequence[Mapping[str, Any]], task: str = "",
                         baseline: Mapping[str, Any] | None = None, path: str | Path | None = None) -> Picture:
    """Loss curves of a training run, with the unigram baseline's level when there is one, and the validation
    scores (BLEU, chrF) beside them when the run logged any."""
    data = training_curves(log_history)
    scores = [name for name in SCORE_NAMES if name in data]
    figure = _new_figure(11 if scores else 7, 4.2)
    ax = figure.add_subplot(1, 2 if scores else 1, 1)
    if len(data["train_step"]):
        ax.plot(data["train_step"], data["train_loss"], label="training loss", lw=1.2)
    if len(data["eval_step"]):
        ax.plot(data["eval_step"], data["eval_loss"], "o-", label="validation loss", lw=1.5)
    ppl = (baseline or {}).get("validation_perplexity")
    if ppl:
        data["baseline_loss"] = np.array(math.log(ppl))
        ax.axhline(math.log(ppl), color="grey", ls="--", lw=1, label=f"unigram baseline (ppl {ppl:.0f})")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy (nats per token)" if task in ("clm", "mlm", "translation") else "loss")
    ax.set_title(f"hf_vanilla {task}: loss curves" if task else "loss curves")
    ax.grid(alpha=0.3)
    ax.legend()
    if scores:
        right = figure.add_subplot(1, 2, 2)
        for name in scores:
            right.plot(data[f"{name}_step"], data[name], "o-", label=f"validation {SCORE_NAMES[name]}", lw=1.5)
        right.set_xlabel("optimizer step")
        right.set_ylabel("score (greedy decoding)")
        right.set_title("validation scores")
        right.grid(alpha=0.3)
        right.legend()
    return _finish(Picture(figure, data), path)


# ----------------------------------------------------------------------------------------------
# Command line


def load_model_and_tokenizer(model_dir: str | Path) -> tuple[torch.nn.Module, Any]:
    """The model saved in ``model_dir`` (with its own task head, so strict loading finds every weight) and its tokenizer."""
    register()  # the Auto classes must know hf_vanilla's model type before they read the config
    config = AutoConfig.from_pretrained(model_dir)
    saved = set(config.architectures or ())
    # Load the class that saved the checkpoint: a bare AutoModel would refuse a head's extra weights.
    chosen = AutoModelForSeq2SeqLM if getattr(config, "is_encoder_decoder", False) else AutoModel
    for auto in (AutoModelForSeq2SeqLM, AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSequenceClassification,
                 AutoModelForTokenClassification, AutoModelForQuestionAnswering, AutoModel):
        try:
            candidate = auto._model_mapping[type(config)]
        except (KeyError, ValueError):
            continue
        if candidate.__name__ in saved:
            chosen = auto
            break
    model = load_complete(chosen, model_dir, exact=True, attn_implementation="eager").eval()  # never random weights
    return model, AutoTokenizer.from_pretrained(model_dir)


def run_attention(args: argparse.Namespace) -> int:
    """``hf-vanilla attention`` (its arguments: :mod:`hf_vanilla.commands`)."""
    try:
        model, tokenizer = load_model_and_tokenizer(args.model_dir)
        maps = attention_maps(model, tokenizer, args.text, target=args.target, max_new_tokens=args.max_new_tokens,
                              title=Path(args.model_dir).name, max_tokens=args.max_tokens)
        kind = "cross" if args.cross else args.stack
        if kind == "cross" and "cross" not in maps.weights:
            raise ValueError(f"--cross needs an encoder-decoder; {args.model_dir} is a {model_family(model)} model.")
        if kind is not None and kind != "cross" and kind not in maps.weights:
            raise ValueError(f"--stack {kind}: this {model_family(model)} model has only {', '.join(maps.kinds)}.")
        picture = plot_attention(maps, kind, args.layer, args.head, path=args.out, average=args.average)
    except (HfVanillaError, ValueError, ImportError, OSError) as error:
        return refuse("attention", error)
    print(f"wrote {picture.path} ({picture.data['kind']} attention)")
    return 0


def run_positions(args: argparse.Namespace) -> int:
    """``hf-vanilla positions`` (its arguments: :mod:`hf_vanilla.commands`)."""
    try:
        config = model = None
        if args.model is not None:
            model, _ = load_model_and_tokenizer(args.model)
            config = model.config
        pictures = write_positional_figures(args.out, config, model)
    except (HfVanillaError, ValueError, ImportError, OSError) as error:
        return refuse("positions", error)
    for picture in pictures.values():
        print(f"wrote {picture.path}")
    return 0


__all__ = [
    "AttentionMaps",
    "Picture",
    "alibi_bias",
    "attention_cost",
    "attention_maps",
    "average_attention_distance",
    "collect_attentions",
    "hidden_state_norms",
    "load_model_and_tokenizer",
    "model_family",
    "plot_alibi",
    "plot_attention",
    "plot_attention_cost",
    "plot_attention_distance",
    "plot_attention_grid",
    "plot_attention_head",
    "plot_attention_kinds",
    "plot_hidden_state_norms",
    "plot_relative_bias",
    "plot_rope",
    "plot_scores_vs_distance",
    "plot_sinusoidal",
    "relative_bias",
    "rope_scores",
    "run_attention",
    "run_positions",
    "scores_vs_distance",
    "token_labels",
    "write_positional_figures",
]
