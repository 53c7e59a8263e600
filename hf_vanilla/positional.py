"""Positional schemes: how attention learns where each token sits.

Every scheme is a small module behind one interface, so the model never branches on which one it
holds. A stack calls its scheme twice per forward:

* ``embed(inputs_embeds, position_ids)`` -- schemes that add a vector to each token embedding
  (sinusoidal, learned) do it here; the others return the input unchanged.
* ``attention_inputs(hidden_states, position_ids, key_positions)`` -- once per forward, returns the
  :class:`PositionalAttentionInputs` every layer's self-attention uses: a rotation of queries and keys
  (RoPE) and/or an additive bias on the attention scores (ALiBi, T5 relative).

Each class names the row of the table of variants (variants.py) it implements and registers itself under it:
a new scheme is one row there and one class here, and the model builds it by name.

Every scheme reads positions, not cache places: a query sits at its ``position_ids``, and bias schemes
measure the distance to each key's position (:func:`key_positions`), so a padded batch with holes in
its mask and the same tokens packed without padding get the same bias, as RoPE gets the same rotation.
A key's position is the one its token had as a query. This forward's keys are its own tokens; a cached
key's position is not stored in the cache (beam search reorders caches behind our back), so it is read
again where generate() wrote it, the attention mask: the count of unmasked tokens before it (generate()'s
``cumsum(mask) - 1``, BLOOM's ALiBi rule), from a 2D mask or from a static cache's 4D one. That holds
only where the caller's positions follow that rule, so the mask is read only when the caller gives
``position_ids``; when it gives none, queries and keys both sit at their cache places (T5's rule, and
what position_ids default to), whatever the mask.

This file travels to the Hub with the model: it imports only torch, transformers and its siblings.
"""


import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn
from transformers import initialization as init
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS, dynamic_rope_update

from .configuration_vanilla import VanillaConfig
from .variants import enter_class, row, scheme_row


@dataclass
class PositionalAttentionInputs:
    """What a positional scheme hands to every self-attention layer of a stack for one forward."""

    rotary: tuple[torch.Tensor, torch.Tensor] | None = None  # (cos, signed sin) from fold_rotation_sign, (batch, 1, seq, head_dim)
    bias: torch.Tensor | None = None  # (batch or 1, heads, query_len, key_len), added to scores


NO_POSITIONAL_INPUTS = PositionalAttentionInputs()


#: position_embedding_type -> the class that implements it (each registers itself by naming its ``scheme``; a name
#: already taken is refused).
SCHEME_CLASSES: dict[str, type["PositionalScheme"]] = {}


class InitialisesItself:
    """A module that owns its initialisation: the model's ``_init_weights`` hands each such module the config.

    transformers' generic initialisation runs first (linears and embeddings N(0, initializer_range), norms at 1,
    biases at 0); :meth:`init_own_weights` draws what this module needs otherwise.
    """

    def init_own_weights(self, config: VanillaConfig) -> None:
        """Draw this module's own parameters and buffers where the generic initialisation does not fit them;
        transformers' init functions skip tensors already loaded. The default: nothing to add."""


class PositionalScheme(InitialisesItself, nn.Module):
    """The interface. Subclasses override what they use; the defaults do nothing."""

    #: The value of ``position_embedding_type`` (a row of the table of variants) this class implements.
    scheme: ClassVar[str | None] = None
    #: Positions beyond this raise an error (None: the scheme extrapolates).
    hard_max_positions: int | None = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("scheme") is not None:  # a subclass that names no scheme of its own registers none
            enter_class(SCHEME_CLASSES, "position_embedding_type", cls.scheme, cls)

    @classmethod
    def for_stack(cls, config: VanillaConfig, causal: bool) -> "PositionalScheme":
        """The scheme for a causal or a bidirectional stack (most schemes do not care which)."""
        return cls(config)

    @property
    def module_name(self) -> str:
        """The name a stack holds the scheme under (its tensors' checkpoint names start with it): its row's."""
        return row("position_embedding_type", self.scheme).module_name

    @property
    def uses_attention_bias(self) -> bool:
        """Adds a bias to attention scores (the table's ``attention_bias``): only attention functions that take
        `position_bias` apply it."""
        return row("position_embedding_type", self.scheme).attention_bias

    def embed(self, inputs_embeds: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        return inputs_embeds

    def attention_inputs(
        self,
        hidden_states: torch.Tensor,
        position_ids: torch.Tensor,
        key_positions: torch.Tensor | None,
    ) -> PositionalAttentionInputs:
        """``position_ids``: the queries' positions, (batch or 1, queries); ``key_positions``: the keys',
        (batch or 1, keys), from :func:`key_positions` (None for a scheme that adds no attention bias)."""
        return NO_POSITIONAL_INPUTS

    def check_positions(self, position_ids: torch.Tensor) -> None:
        """Refuse positions the scheme has no encoding for, before an opaque index error can happen."""
        if self.hard_max_positions is None or torch.compiler.is_compiling() or position_ids.numel() == 0:
            return
        largest = int(position_ids.max())
        if largest >= self.hard_max_positions:
            raise ValueError(
                f"Position {largest} is beyond the {self.hard_max_positions} learned positions "
                f"(config.max_position_embeddings={self.hard_max_positions}). Shorten the input (e.g. "
                "tokenizer(..., truncation=True, max_length=...)) or use a scheme that extrapolates "
                "(position_embedding_type='sinusoidal', 'rope', 'alibi' or 'relative')."
            )


class NoPositions(PositionalScheme):
    """No positional information: attention is permutation-equivariant (a bag of tokens)."""

    scheme = "none"

    def __init__(self, config: VanillaConfig):
        super().__init__()


def sinusoid_table(positions: torch.Tensor, dim: int, interleaved: bool) -> torch.Tensor:
    """The paper's encodings, PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...).

    ``interleaved`` keeps the paper's sin/cos alternation; otherwise all sines come first, then all
    cosines (the tensor2tensor/Marian layout). Both hold the same numbers in a different order.
    """
    half = dim // 2
    inv_freq = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float64) * 2 / dim)
    angles = positions.to(torch.float64)[..., None] * inv_freq
    if interleaved:
        table = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)
    else:
        table = torch.cat((angles.sin(), angles.cos()), dim=-1)
    if dim % 2:  # odd widths: the last channel has no partner frequency
        table = torch.nn.functional.pad(table, (0, 1))
    return table.float()


class SinusoidalPositions(PositionalScheme):
    """Fixed sinusoids added to the token embeddings (Vaswani et al., section 3.5)."""

    scheme = "sinusoidal"

    def __init__(self, config: VanillaConfig):
        super().__init__()
        self.dim = config.hidden_size
        self.interleaved = config.sinusoidal_layout == "interleaved"
        self.offset = config.position_offset
        # A cache, not a weight: recomputed on load and grown on demand, so any length works.
        table = sinusoid_table(torch.arange(config.max_position_embeddings + self.offset), self.dim, self.interleaved)
        self.table = nn.Buffer(table, persistent=False)

    def _table_for(self, length: int, device: torch.device) -> torch.Tensor:
        if length > self.table.shape[0]:
            grown = sinusoid_table(torch.arange(length), self.dim, self.interleaved).to(device)
            self.table = nn.Buffer(grown, persistent=False)
        return self.table

    def init_own_weights(self, config: VanillaConfig) -> None:
        init.copy_(self.table, sinusoid_table(torch.arange(self.table.shape[0]), self.dim, self.interleaved))

    def embed(self, inputs_embeds: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        positions = position_ids + self.offset
        if not torch.compiler.is_compiling() and positions.numel():
            self._table_for(int(positions.max()) + 1, inputs_embeds.device)
        return inputs_embeds + self.table[positions].to(inputs_embeds.dtype)


class LearnedPositions(PositionalScheme):
    """One trained vector per position (BERT, GPT-2, BART); no encoding exists past the last one."""

    scheme = "learned"

    def __init__(self, config: VanillaConfig):
        super().__init__()
        self.offset = config.position_offset  # BART reserves the first two rows
        self.hard_max_positions = config.max_position_embeddings
        self.embeddings = nn.Embedding(config.max_position_embeddings + self.offset, config.hidden_size)

    def embed(self, inputs_embeds: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        self.check_positions(position_ids)
        return inputs_embeds + self.embeddings(position_ids + self.offset)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def fold_rotation_sign(cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(batch, seq, head_dim) tables -> (batch, 1, seq, head_dim), rotate_half's minus sign moved onto the sine.

    Done once per forward, not per layer and per projection: decoding a token is small enough that
    every op call counts.
    """
    half = sin.shape[-1] // 2
    return cos.unsqueeze(1), torch.cat((-sin[..., :half], sin[..., half:]), dim=-1).unsqueeze(1)


def rotate_folded(states: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """``states * cos + rotate_half(states) * sin`` with tables from :func:`fold_rotation_sign`: three passes
    over the states instead of five."""
    first, second = states.chunk(2, dim=-1)
    # Two rounded products, then their sum (not addcmul): in every dtype the roundings of Llama's apply_rotary_pos_emb.
    return states * cos + torch.cat((second, first), dim=-1) * signed_sin


def rotate(states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (batch, heads, seq, head_dim) queries or keys; q.k then depends only on their distance."""
    return rotate_folded(states, *fold_rotation_sign(cos, sin))


class RotaryPositions(PositionalScheme):
    """RoPE (Su et al.): queries and keys rotated by position-dependent angles.

    Scaling variants (linear, dynamic, yarn, llama3, ...) come from transformers'
    ``ROPE_INIT_FUNCTIONS`` through ``config.rope_parameters``.
    """

    scheme = "rope"

    def __init__(self, config: VanillaConfig):
        super().__init__()
        self.config = config
        self.rope_type = config.rope_parameters.get("rope_type", "default")
        self.max_seq_len_cached = config.max_position_embeddings
        self.original_max_seq_len = config.max_position_embeddings
        inv_freq, self.attention_scaling = self.inverse_frequencies(config)
        self.inv_freq = nn.Buffer(inv_freq, persistent=False)
        self.original_inv_freq = nn.Buffer(inv_freq.clone(), persistent=False)

    def inverse_frequencies(self, config: VanillaConfig) -> tuple[torch.Tensor, float]:
        """The rotation frequencies and attention scaling of this config's ``rope_type``."""
        init_fn = self.default_inverse_frequencies if self.rope_type == "default" else ROPE_INIT_FUNCTIONS[self.rope_type]
        return init_fn(config)

    def init_own_weights(self, config: VanillaConfig) -> None:
        inv_freq, _ = self.inverse_frequencies(self.config)
        init.copy_(self.inv_freq, inv_freq)
        init.copy_(self.original_inv_freq, inv_freq)

    @staticmethod
    def default_inverse_frequencies(config: VanillaConfig, *args, **kwargs) -> tuple[torch.Tensor, float]:
        dim = int(config.head_dim * config.rope_parameters.get("partial_rotary_factor", 1.0))
        base = config.rope_parameters["rope_theta"]
        return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)), 1.0

    @torch.no_grad()
    @dynamic_rope_update
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = position_ids[..., None].float() * self.inv_freq.to(x.device)
        angles = torch.cat((freqs, freqs), dim=-1)
        cos, sin = angles.cos() * self.attention_scaling, angles.sin() * self.attention_scaling
        return cos.to(x.dtype), sin.to(x.dtype)

    def attention_inputs(self, hidden_states, position_ids, key_positions):
        return PositionalAttentionInputs(rotary=fold_rotation_sign(*self(hidden_states, position_ids)))


def mask_key_positions(attention_mask: torch.Tensor | None, key_length: int) -> torch.Tensor | None:
    """Each key slot's position as generate() wrote it in the attention mask, (batch, key_length): the number of
    unmasked tokens before it (``cumsum - 1``; a masked key gets any position, nothing sees it). A 2D mask is read
    directly; a 4D one (generate()'s for a static cache, True or 0.0 where attended) by its last query's row, which
    sees every unmasked cached key. None where no mask tensor says it (cache places then)."""
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() not in (2, 4):
        return None
    attended = attention_mask if attention_mask.dim() == 2 else attention_mask[:, 0, -1]
    if attended.dtype.is_floating_point and attention_mask.dim() == 4:  # an additive mask: 0 where attended
        attended = attended == 0
    attended = attended[:, :key_length].long()
    unfilled = key_length - attended.shape[-1]  # a 2D mask stops at this forward's tokens, a static cache does not
    return torch.nn.functional.pad(attended, (0, unfilled)).cumsum(-1) - 1


def key_positions(
    position_ids: torch.Tensor,
    past_length: int | torch.Tensor,
    key_length: int,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Every key slot's position, (batch or 1, key_length): this forward's tokens (slots ``past_length`` on) have
    their ``position_ids``; the cached keys before them have :func:`mask_key_positions`'s, or their cache places
    without a mask, as have the unfilled slots of a fixed-size cache (masked). Pass ``attention_mask`` only with
    ``position_ids`` the caller gave (module docstring). Shapes never depend on ``past_length``'s value (a static
    cache's is a tensor, and torch.compile traces this)."""
    length = position_ids.shape[-1]
    slots = torch.arange(key_length, device=position_ids.device)[None]
    from_mask = mask_key_positions(attention_mask, key_length)
    others = slots if from_mask is None else from_mask.to(slots.device)
    offset = slots - past_length  # where this forward's tokens sit among the keys
    own = position_ids.long().gather(-1, offset.clamp(0, length - 1).expand(position_ids.shape[0], -1))
    return torch.where((offset >= 0) & (offset < length), own, others)


def position_distances(position_ids: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
    """Signed distance key - query, (batch or 1, queries, keys), from the queries' and keys' positions."""
    return key_positions[:, None, :] - position_ids.long()[:, :, None]


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """Press et al.'s geometric slopes 2^(-8/n), 2^(-16/n), ...; interleaved for non-powers of two."""

    def power_of_two_slopes(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    closest = 2 ** math.floor(math.log2(num_heads))
    slopes = power_of_two_slopes(closest)
    if closest != num_heads:
        slopes += power_of_two_slopes(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float32)


class ALiBiPositions(PositionalScheme):
    """ALiBi (Press et al.): each head penalises attention linearly in distance, -slope * |i - j|, between the
    query's and the key's positions.

    A causal stack needs no (query, key) table: its bias is -slope * (i - j), signed, which for the keys a query
    sees (j <= i) is -slope * |i - j| and which differs from -slope * (last - j) by a constant of the query's row;
    softmax ignores a row's constant (BLOOM's per-key bias). So the bias is one row per batch row and head,
    -slope * (last query's position - j), broadcast over the queries: memory grows with the keys alone, and a
    cached decoding step's one row is exactly -slope * (i - j). A bidirectional stack gets the full table,
    built straight in the compute dtype without integer intermediates.
    """

    scheme = "alibi"

    def __init__(self, config: VanillaConfig, causal: bool = False):
        super().__init__()
        self.config = config  # read per call: the attention implementation may change after init
        self.causal = causal
        self.slopes = nn.Buffer(alibi_slopes(config.num_attention_heads), persistent=False)

    @classmethod
    def for_stack(cls, config: VanillaConfig, causal: bool) -> "ALiBiPositions":
        return cls(config, causal=causal)

    def init_own_weights(self, config: VanillaConfig) -> None:
        init.copy_(self.slopes, alibi_slopes(self.slopes.shape[0]))

    def distances(self, position_ids: torch.Tensor, key_positions: torch.Tensor, device) -> torch.Tensor:
        """query - key in float32 (exact integers, a quarter of int64's table): (batch, 1, keys) from the last
        query where the causal row trick applies, else (batch, queries, keys), absolute if bidirectional."""
        queries, keys = position_ids.to(torch.float32), key_positions.to(torch.float32)
        # torch 2.13's inductor cannot compile flex attention's CPU kernel reading a bias broadcast over queries
        if self.causal and not (self.config._attn_implementation == "flex_attention" and device.type == "cpu"):
            return queries[:, -1:, None] - keys[:, None, :]
        distance = queries[:, :, None] - keys[:, None, :]
        return distance if self.causal else distance.abs_()

    def attention_inputs(self, hidden_states, position_ids, key_positions):
        batch, query_length = hidden_states.shape[:2]
        device, dtype = hidden_states.device, hidden_states.dtype
        distance = self.distances(position_ids.to(device), key_positions.to(device), device)
        bias = torch.empty((len(self.slopes), *distance.shape), device=device, dtype=dtype)  # heads first: each
        for head, slope in enumerate(-self.slopes):  # head's float32 products rounded once to dtype, in place
            torch.mul(distance, slope, out=bias[head])  # (a contiguous out=, as torch.compile requires)
        return PositionalAttentionInputs(bias=bias.transpose(0, 1).expand(batch, -1, query_length, -1))


def relative_position_bucket(
    relative_position: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int
) -> torch.Tensor:
    """T5's buckets: exact for small distances, logarithmic up to ``max_distance``, then one bucket."""
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative_position > 0).long() * num_buckets
        relative_position = relative_position.abs()
    else:
        relative_position = -torch.clamp(relative_position, max=0)
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    log_position = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).long()
    log_position = torch.clamp(log_position, max=num_buckets - 1)
    return buckets + torch.where(is_small, relative_position, log_position)


class RelativePositionBias(PositionalScheme):
    """T5-style learned bias per head and distance bucket, shared by all layers of a stack."""

    scheme = "relative"

    @classmethod
    def for_stack(cls, config: VanillaConfig, causal: bool) -> "RelativePositionBias":
        return cls(config, bidirectional=not causal)

    def __init__(self, config: VanillaConfig, bidirectional: bool):
        super().__init__()
        self.bidirectional = bidirectional
        self.num_buckets = config.relative_attention_num_buckets
        self.max_distance = config.relative_attention_max_distance
        self.relative_attention_bias = nn.Embedding(self.num_buckets, config.num_attention_heads)

    def init_own_weights(self, config: VanillaConfig) -> None:
        if config.initializer_factor is not None:  # T5's: N(0, factor / sqrt(d_model))
            init.normal_(self.relative_attention_bias.weight, std=config.initializer_factor * config.hidden_size**-0.5)

    def attention_inputs(self, hidden_states, position_ids, key_positions):
        device = hidden_states.device
        distance = position_distances(position_ids.to(device), key_positions.to(device))
        buckets = relative_position_bucket(distance, self.bidirectional, self.num_buckets, self.max_distance)
        bias = self.relative_attention_bias(buckets).permute(0, 3, 1, 2)  # (batch or 1, heads, query, key)
        return PositionalAttentionInputs(bias=bias.to(hidden_states.dtype).expand(hidden_states.shape[0], -1, -1, -1))


def build_positional_scheme(config: VanillaConfig, causal: bool) -> PositionalScheme:
    """The scheme ``config.position_embedding_type`` names, for a causal or a bidirectional stack."""
    scheme = scheme_row(config).value
    if scheme not in SCHEME_CLASSES:
        raise ValueError(
            f"position_embedding_type={scheme!r} is in the table of variants but no PositionalScheme subclass names "
            f"it: define one with `scheme = {scheme!r}` (hf_vanilla/positional.py) before building the model."
        )
    return SCHEME_CLASSES[scheme].for_stack(config, causal)
