"""hf_vanilla.tools.viz: every picture renders headless to a real, non-blank PNG, and the numbers it draws are right."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("matplotlib")

from matplotlib.image import imread  # noqa: E402

from hf_vanilla import cli
from hf_vanilla.positional import alibi_slopes, relative_position_bucket, rotate, sinusoid_table  # noqa: E402
from hf_vanilla.tools import viz
from tests.factories import model_inputs, padded_batch, tiny_model  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_png(path) -> None:
    """A real PNG (magic bytes) with something drawn in it (not one flat colour)."""
    assert path.is_file(), path
    assert path.read_bytes()[:8] == PNG_MAGIC
    pixels = imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 50 and pixels.shape[1] > 50
    assert pixels[..., :3].var() > 0


# ----------------------------------------------------------------------------------------------
# Attention weights


def test_causal_attention_is_zero_above_the_diagonal_and_rows_sum_to_one():
    model = tiny_model("decoder", "rope")
    assert model.config._attn_implementation == "sdpa"
    ids, mask = padded_batch(left=True)
    weights = viz.collect_attentions(model, input_ids=ids, attention_mask=mask)
    assert set(weights) == {"decoder"}
    maps = weights["decoder"]
    assert maps.shape == (3, 2, 4, 9, 9)  # batch, layers, heads, queries, keys
    torch.testing.assert_close(maps.sum(-1), torch.ones(maps.shape[:-1]))
    assert (maps >= 0).all()
    assert torch.triu(maps[0], diagonal=1).abs().max() == 0  # the unpadded row: exactly nothing looks ahead
    # Left padding: a real query gives no weight to a future key nor to a padded one. (A padding query has
    # no key at all to attend to; softmax over an all-masked row is uniform, and no one reads it.)
    real = mask.bool()
    future = torch.ones(9, 9).triu(1).bool()
    for row in range(3):
        forbidden = (future | ~real[row][None, :]) & real[row][:, None]
        assert (maps[row][:, :, forbidden] == 0).all()
    # The eager switch is undone and the model's mode kept.
    assert model.config._attn_implementation == "sdpa" and not model.training


def test_padded_keys_get_zero_weight_in_encoder_and_cross_attention():
    model = tiny_model("encoder-decoder", "alibi").train()  # train mode: attention must still be deterministic
    ids, mask = padded_batch()
    weights = viz.collect_attentions(model, **model_inputs("encoder-decoder", ids, mask))
    assert set(weights) == {"encoder", "decoder", "cross"}
    assert weights["encoder"].shape == (3, 2, 4, 9, 9)
    assert weights["cross"].shape == (3, 2, 4, 6, 9)  # decoder queries over encoder keys
    for kind in ("encoder", "cross"):
        for row in range(3):
            padded = ~mask[row].bool()
            assert (weights[kind][row][..., padded] == 0).all()
        torch.testing.assert_close(weights[kind].sum(-1), torch.ones(weights[kind].shape[:-1]))
    assert model.training and model.config._attn_implementation == "sdpa"
    again = viz.collect_attentions(model, **model_inputs("encoder-decoder", ids, mask))
    torch.testing.assert_close(again["encoder"], weights["encoder"], rtol=0, atol=0)


def test_average_attention_distance_of_a_handcrafted_pattern():
    pattern = torch.tensor(
        [
            [1.0, 0.0, 0.0, 0.0],  # looks at itself: 0
            [0.5, 0.5, 0.0, 0.0],  # half one back: 0.5
            [0.0, 0.0, 0.0, 1.0],  # one ahead: 1
            [0.25, 0.25, 0.25, 0.25],  # uniform from the end: (3 + 2 + 1 + 0) / 4 = 1.5
        ]
    )
    assert viz.average_attention_distance(pattern).item() == pytest.approx(0.75, abs=1e-7)
    # Leaving the last query out (as padding): (0 + 0.5 + 1) / 3.
    assert viz.average_attention_distance(pattern, torch.tensor([1, 1, 1, 0])).item() == pytest.approx(0.5, abs=1e-7)
    # Leading dims are kept: (layers, heads); a previous-token head looks 1 back except at position 0.
    previous = torch.diag(torch.ones(3), -1)
    previous[0, 0] = 1.0
    stacked = torch.stack([torch.stack([pattern, torch.eye(4), previous])] * 2)
    distances = viz.average_attention_distance(stacked)
    assert distances.shape == (2, 3)
    torch.testing.assert_close(distances[1], torch.tensor([0.75, 0.0, 0.75]))
    # A batch with a query mask broadcasts over layers and heads.
    batched = viz.average_attention_distance(stacked[None].expand(2, -1, -1, -1, -1), torch.tensor([[1, 1, 1, 0]] * 2))
    torch.testing.assert_close(batched, torch.tensor([0.5, 0.0, 2 / 3]).expand(2, 2, 3))


def test_attention_pictures_draw_the_weights(tmp_path):
    model = tiny_model("encoder-decoder", "relative")
    ids, mask = padded_batch(batch=1, length=7)
    weights = viz.collect_attentions(model, **model_inputs("encoder-decoder", ids, mask))
    tokens = {"encoder": [f"src{i}" for i in range(7)], "decoder": ["<s>", "a", "b$c", "d", "e", "f"]}
    maps = viz.AttentionMaps({kind: w[0] for kind, w in weights.items()}, tokens, "untrained")

    head = viz.plot_attention(maps, "cross", layer=1, head=2, path=tmp_path / "head.png")
    assert head.data["weights"].shape == (6, 7)
    torch.testing.assert_close(torch.from_numpy(head.data["weights"]), weights["cross"][0, 1, 2])
    drawn = head.figure.axes[0].images[0].get_array()
    torch.testing.assert_close(torch.from_numpy(drawn.data), weights["cross"][0, 1, 2])
    assert [t.get_text() for t in head.figure.axes[0].get_xticklabels()] == tokens["encoder"]

    grid = viz.plot_attention(maps, "encoder", path=tmp_path / "grid.png")
    assert grid.data["weights"].shape == (2, 4, 7, 7)
    torch.testing.assert_close(torch.from_numpy(grid.data["distances"]),
                               viz.average_attention_distance(weights["encoder"][0]))
    layer = viz.plot_attention(maps, "decoder", layer=1, path=tmp_path / "layer.png")
    assert layer.data["layers"] == [1] and layer.data["heads"] == [0, 1, 2, 3]
    assert (torch.from_numpy(layer.data["weights"]).triu(1) == 0).all()
    column = viz.plot_attention(maps, "decoder", head=3, path=tmp_path / "column.png")
    assert column.data["layers"] == [0, 1] and column.data["heads"] == [3]
    kinds = viz.plot_attention_kinds(maps, path=tmp_path / "kinds.png")
    assert set(kinds.data) == {"encoder", "decoder", "cross"}
    distances = {k: viz.average_attention_distance(maps.weights[k]) for k in ("encoder", "decoder")}
    spread = viz.plot_attention_distance(distances, path=tmp_path / "distance.png")
    torch.testing.assert_close(torch.from_numpy(spread.data["decoder"]), distances["decoder"])
    for name in ("head", "grid", "layer", "column", "kinds", "distance"):
        assert_png(tmp_path / f"{name}.png")

    with pytest.raises(ValueError, match="out of range"):
        viz.plot_attention(maps, "encoder", layer=2)
    decoder_only = viz.AttentionMaps({"decoder": maps.weights["decoder"]}, {"decoder": tokens["decoder"]})
    with pytest.raises(ValueError, match="encoder-decoder"):
        viz.plot_attention(decoder_only, "cross")


# ----------------------------------------------------------------------------------------------
# Positional schemes


@pytest.mark.parametrize("interleaved", [True, False])
def test_sinusoidal_heatmap_is_the_table(tmp_path, interleaved):
    picture = viz.plot_sinusoidal(length=50, dim=64, interleaved=interleaved, path=tmp_path / "sin.png")
    table = sinusoid_table(torch.arange(50), 64, interleaved)
    torch.testing.assert_close(torch.from_numpy(picture.data["table"]), table, rtol=0, atol=0)
    sines = table[:, 0::2] if interleaved else table[:, :32]
    drawn = picture.figure.axes[0].images[0].get_array()
    torch.testing.assert_close(torch.from_numpy(drawn.data), sines, rtol=0, atol=0)
    assert_png(tmp_path / "sin.png")


def test_alibi_matrix_is_minus_slope_times_distance(tmp_path):
    picture = viz.plot_alibi(num_heads=8, length=12, path=tmp_path / "alibi.png")
    slopes = torch.tensor([2.0 ** (-(h + 1)) for h in range(8)])  # 2^(-8/n * (h+1)) with n = 8
    torch.testing.assert_close(torch.from_numpy(picture.data["slopes"]), slopes, rtol=0, atol=0)
    torch.testing.assert_close(alibi_slopes(8), slopes, rtol=0, atol=0)
    positions = torch.arange(12)
    expected = -slopes[:, None, None] * (positions[:, None] - positions[None, :]).abs()
    torch.testing.assert_close(torch.from_numpy(picture.data["bias"]), expected, rtol=0, atol=0)
    assert_png(tmp_path / "alibi.png")


def test_relative_bias_matrix_looks_up_each_pairs_bucket(tmp_path):
    picture = viz.plot_relative_bias(length=20, num_buckets=16, max_distance=32, num_heads=4, path=tmp_path / "rel.png")
    data = picture.data
    positions = torch.arange(20)
    relative = positions[None, :] - positions[:, None]  # key - query
    buckets = relative_position_bucket(relative, True, 16, 32)
    torch.testing.assert_close(torch.from_numpy(data["buckets"]), buckets)
    weight = torch.from_numpy(data["weight"])
    torch.testing.assert_close(torch.from_numpy(data["bias"]), weight[buckets].permute(2, 0, 1), rtol=0, atol=0)
    # Small distances get a bucket each; causal stacks give every future key bucket 0.
    causal = torch.from_numpy(data["bucket_causal"])
    assert (causal[torch.from_numpy(data["distance"]) >= 0] == 0).all()
    assert data["bucket_bidirectional"][20 - 3 : 20 + 4].tolist() == [3, 2, 1, 0, 9, 10, 11]
    assert_png(tmp_path / "rel.png")


def test_rope_score_depends_only_on_distance(tmp_path):
    picture = viz.plot_rope(head_dim=16, length=40, theta=100.0, path=tmp_path / "rope.png")
    data = picture.data
    inv_freq = 100.0 ** (-torch.arange(0, 16, 2).float() / 16)
    torch.testing.assert_close(torch.from_numpy(data["inv_freq"]), inv_freq)
    torch.testing.assert_close(torch.from_numpy(data["angles"]), torch.arange(40)[:, None] * inv_freq)
    assert data["ones"][0] == pytest.approx(16.0)  # no rotation at distance 0: |q|^2
    # The same numbers for any two positions d apart: query at 7 + d, key at 7, by hand with `rotate`.
    q = torch.ones(16)
    angles = torch.arange(40)[:, None].float() * inv_freq
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()
    rotated = rotate(q.expand(1, 1, 40, 16), cos[None], sin[None])[0, 0]
    shifted = rotated[7 + torch.arange(20)] @ rotated[7]
    torch.testing.assert_close(shifted, torch.from_numpy(data["ones"][:20]), rtol=1e-5, atol=1e-4)
    assert_png(tmp_path / "rope.png")


def test_scores_vs_distance_compares_every_scheme(tmp_path):
    picture = viz.plot_scores_vs_distance(path=tmp_path / "distance.png")
    assert_png(tmp_path / "distance.png")
    data = picture.data
    assert data["sinusoidal"][0] == pytest.approx(1.0) and data["rope"][0] == pytest.approx(1.0)
    table = sinusoid_table(torch.arange(64), 512, True)
    torch.testing.assert_close(torch.from_numpy(data["sinusoidal"]), table @ table[0] / 256)
    slopes = alibi_slopes(8)
    for head in range(8):
        torch.testing.assert_close(torch.from_numpy(data[f"alibi_{head}"]), -slopes[head] * torch.arange(64).float())
    assert (data["none"] == 0).all()


# ----------------------------------------------------------------------------------------------
# The block and the cost


def test_post_norm_keeps_the_residual_stream_normalised(tmp_path):
    ids, mask = padded_batch()
    norms, model_pre = {}, None
    for position in ("pre", "post"):
        model = tiny_model("decoder", "sinusoidal", norm_position=position, num_hidden_layers=4)
        model_pre = model if position == "pre" else model_pre
        norms[position] = viz.hidden_state_norms(model, input_ids=ids, attention_mask=mask)["decoder"]
        assert norms[position].shape == (5,)
    # A fresh LayerNorm (weight 1, bias 0) after every block: RMS 1 up to eps.
    torch.testing.assert_close(norms["post"][1:], torch.ones(4), rtol=0, atol=1e-3)
    torch.testing.assert_close(norms["pre"][0], norms["post"][0])  # same seed, same embeddings
    # The blocks' own outputs, as output_hidden_states reports them, except the last: that one is
    # reported after the pre-norm stack's final norm (RMS ~1), which would hide the residual stream.
    with torch.no_grad():
        states = model_pre.model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    by_hand = torch.stack([(s.pow(2).mean(-1).sqrt() * mask).sum() / mask.sum() for s in states])
    torch.testing.assert_close(norms["pre"][:-1], by_hand[:-1])
    assert by_hand[-1] == pytest.approx(1.0, abs=1e-3) and abs(norms["pre"][-1].item() - 1.0) > 0.1
    picture = viz.plot_hidden_state_norms(norms, path=tmp_path / "norms.png")
    assert set(picture.data) == {"pre", "post"}
    assert_png(tmp_path / "norms.png")


def test_attention_overtakes_the_rest_at_the_crossover(tmp_path):
    cost = viz.attention_cost([3072, 100], hidden_size=512, intermediate_size=2048)
    assert float(cost["crossover"]) == 3072
    assert cost["attention"][0] == cost["projections"][0] + cost["ffn"][0]
    assert cost["attention"][1] < cost["projections"][1] + cost["ffn"][1]
    viz.plot_attention_cost(path=tmp_path / "cost.png")
    assert_png(tmp_path / "cost.png")


# ----------------------------------------------------------------------------------------------
# Command line and optional dependency


def save_tiny(tmp_path, family):
    """A tiny saved model with a word-level tokenizer whose ids fit its vocabulary."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = "the cat sat on a mat and el gato se sentó".split()
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, **{w: i + 4 for i, w in enumerate(words)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", bos_token="<s>",
                                        eos_token="</s>", unk_token="<unk>")
    directory = tmp_path / family
    tiny_model(family, "sinusoidal").save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def test_cli_draws_a_saved_models_attention(tmp_path, capsys):
    seq2seq = save_tiny(tmp_path, "encoder-decoder")
    out = tmp_path / "cross.png"
    args = ["attention", str(seq2seq), "the cat sat on the mat", "--out", str(out), "--cross", "--layer", "1",
            "--head", "0", "--target", "el gato se sentó"]
    assert cli.main(args) == 0
    assert_png(out)
    assert "cross attention" in capsys.readouterr().out

    model, tokenizer = viz.load_model_and_tokenizer(seq2seq)
    maps = viz.attention_maps(model, tokenizer, "the cat sat on the mat", target="el gato se sentó")
    assert maps.tokens["encoder"] == ["the", "cat", "sat", "on", "the", "mat", "</s>"]
    assert maps.tokens["decoder"] == ["<s>", "el", "gato", "se", "sentó", "</s>"]
    assert maps.weights["cross"].shape == (2, 4, 6, 7)
    generated = viz.attention_maps(model, tokenizer, "the cat", max_new_tokens=3)  # greedy decoder input
    # --average: one map, the mean over every layer and head (the soft alignment), each row still a distribution.
    assert cli.main(["attention", str(seq2seq), "the cat sat on the mat", "--out", str(tmp_path / "mean.png"),
                     "--cross", "--average", "--target", "el gato se sentó"]) == 0
    assert_png(tmp_path / "mean.png")
    mean = viz.plot_attention(maps, "cross", average=True)
    torch.testing.assert_close(torch.from_numpy(mean.data["weights"]), maps.weights["cross"].mean(dim=(0, 1)))
    torch.testing.assert_close(torch.from_numpy(mean.data["weights"]).sum(-1), torch.ones(6))
    assert mean.data["layers"] == [0, 1] and mean.data["heads"] == [0, 1, 2, 3]
    assert generated.tokens["decoder"][0] == "<s>" and len(generated.tokens["decoder"]) <= 4

    decoder = save_tiny(tmp_path, "decoder")
    assert cli.main(["attention", str(decoder), "the cat sat", "--out", str(tmp_path / "grid.png")]) == 0
    assert_png(tmp_path / "grid.png")
    assert cli.main(["attention", str(decoder), "the cat", "--out", str(tmp_path / "x.png"), "--cross"]) == 2
    assert "--cross needs an encoder-decoder" in capsys.readouterr().err
    assert cli.main(["attention", str(decoder), "the cat", "--out", str(tmp_path / "x.png"), "--layer", "5"]) == 2
    assert "out of range" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_token_labels_are_readable_without_byte_level_markers():
    """Issue 24: attention plots labelled GPT-2-style tokens with their raw 'Ġ' markers."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    backend = ByteLevelBPETokenizer()
    backend.train_from_iterator(["the cat sat on the mat"] * 20, vocab_size=300, min_frequency=1)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend._tokenizer)
    text = "the cat sat on the mat"
    ids = tokenizer(text)["input_ids"]
    assert any("Ġ" in token for token in tokenizer.convert_ids_to_tokens(ids))  # the raw entries have them
    labels = viz.token_labels(tokenizer, ids)
    assert not any("Ġ" in label for label in labels) and "".join(labels) == text
    assert labels == [tokenizer.decode([i]) for i in ids]


def test_cli_positions_writes_every_picture(tmp_path):
    assert cli.main(["positions", "--out", str(tmp_path / "pos")]) == 0
    names = sorted(p.name for p in (tmp_path / "pos").iterdir())
    assert names == [f"positions-{n}.png" for n in ("alibi", "distance", "relative", "rope", "sinusoidal")]
    for name in names:
        assert_png(tmp_path / "pos" / name)

