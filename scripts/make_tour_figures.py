"""Draw the pictures of docs/tour.md (into runs/tour-figures/; pass --out docs/figures to replace the committed ones).

    python scripts/make_tour_figures.py [MODEL_DIR] [--out runs/tour-figures] [--text ...] [--target ...]
    python scripts/make_tour_figures.py --model-free-only --out docs/figures   # refresh the committed ones

This script trains nothing. With MODEL_DIR (a directory written by ``save_pretrained``, model and
tokenizer, e.g. the translation model of the project's main training job) the attention pictures
show that model. Without it, it builds a tiny randomly initialised encoder-decoder and a word-level
tokenizer over the example sentences, and every title says the weights are untrained: such
pictures show the *shapes* (masks, padding, the causal triangle), not learned behaviour.

The positional-scheme pictures (``positions-*.png``) and the cost curve (``attention-cost.png``) do
not depend on any model: they use the paper's base sizes (d_model 512, d_ff 2048, 8 heads of 64)
and are the ones committed to the repository. The others are regenerated from a model.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

import hf_vanilla as hv  # noqa: E402
from hf_vanilla.tools import viz  # noqa: E402

# Genesis 1:1 in the two public-domain Bibles of the project's translation corpus (bible-en-es).
TEXT = "In the beginning God created the heaven and the earth ."
TARGET = "En el principio creó Dios los cielos y la tierra ."
UNTRAINED = "untrained tiny model (random weights)"


def word_tokenizer(sentences: list[str]):
    """A word-level tokenizer over the example sentences: enough to label the axes of a random model."""
    words = sorted({w for s in sentences for w in s.split()})
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, **{w: i + 4 for i, w in enumerate(words)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")


def random_model(vocab_size: int, norm_position: str = "post", layers: int = 3, seed: int = 0):
    """A tiny paper-shaped encoder-decoder with random weights.

    The init std is raised from 0.02 to 0.3: at 0.02 every q.k is ~0 and every head is a flat,
    uniform map; a larger spread lets heads differ, which is all an untrained picture can show.
    """
    torch.manual_seed(seed)
    config = hv.VanillaConfig.from_preset(
        "tiny-transformer", vocab_size=vocab_size, num_hidden_layers=layers, hidden_dropout=0.0,
        initializer_range=0.3, norm_position=norm_position,
    )
    return hv.VanillaForSeq2SeqLM(config).eval()


def norm_inputs(model, tokenizer, text: str) -> dict[str, torch.Tensor]:
    """One forward's inputs for the residual-stream norms: the text, fed to the decoder too (after its start token)."""
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    if viz.model_family(model) == "encoder-decoder":
        start = torch.full_like(ids[:, :1], model.config.decoder_start_token_id)
        return {"input_ids": ids, "decoder_input_ids": torch.cat([start, ids], 1)}
    return {"input_ids": ids}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", nargs="?", metavar="MODEL_DIR", help="a trained model (default: tiny random)")
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "tour-figures",
                        help="output folder (default: runs/tour-figures; the committed pictures live in docs/figures "
                        "and are replaced only when that is passed here)")
    parser.add_argument("--text", default=TEXT, help="the input sentence")
    parser.add_argument("--target", help="decoder text (encoder-decoder); default: the model's own translation, "
                        "or the Spanish verse for the random model")
    parser.add_argument("--layer", type=int, help="layer of the single-head pictures (default: the last)")
    parser.add_argument("--head", type=int, default=0, help="head of the single-head pictures")
    parser.add_argument("--model-free-only", action="store_true",
                        help="only the committed, model-free pictures (positions-*.png, attention-cost.png)")
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    written = [p.path for p in viz.write_positional_figures(out).values()]
    base = hv.VanillaConfig.from_preset("transformer-base")
    written.append(viz.plot_attention_cost(base.hidden_size, base.intermediate_size, base.num_attention_heads,
                                           path=out / "attention-cost.png").path)
    if args.model_free_only:
        print("\n".join(f"wrote {p}" for p in written))
        return 0

    if args.model_dir:
        model, tokenizer = viz.load_model_and_tokenizer(args.model_dir)
        label, target = Path(args.model_dir).name, args.target
    else:
        print(f"No MODEL_DIR given: drawing an {UNTRAINED}; pass a trained model's directory for real pictures.")
        tokenizer = word_tokenizer([args.text, args.target or TARGET])
        model = random_model(len(tokenizer))
        label, target = UNTRAINED, args.target or TARGET

    maps = viz.attention_maps(model, tokenizer, args.text, target=target, title=label)
    first = maps.kinds[0]
    # The last layer every stack has (an encoder-decoder's decoder may be shallower than its encoder).
    layer = args.layer if args.layer is not None else min(w.shape[0] for w in maps.weights.values()) - 1
    written.append(viz.plot_attention(maps, first, layer, args.head, path=out / "attention-head.png").path)
    written.append(viz.plot_attention(maps, first, path=out / "attention-grid.png").path)
    written.append(viz.plot_attention_kinds(maps, layer, args.head, path=out / "attention-kinds.png").path)
    if "cross" in maps.weights:
        written.append(viz.plot_attention(maps, "cross", path=out / "attention-cross.png").path)
        written.append(viz.plot_attention(maps, "cross", average=True, path=out / "attention-alignment.png").path)
    distances = {k: viz.average_attention_distance(maps.weights[k]) for k in maps.kinds if k != "cross"}
    title = f"{label}\naverage attention distance per head (dots: heads, line: layer mean)"
    written.append(viz.plot_attention_distance(distances, title, path=out / "attention-distance.png").path)

    if args.model_dir:
        norms = viz.hidden_state_norms(model, **norm_inputs(model, tokenizer, args.text))
        norms = {f"{kind} ({model.config.norm_position}-norm)": values for kind, values in norms.items()}
        title = f"{label}: residual stream through the stacks"
    else:  # the same random model twice, pre- and post-norm, six layers: the contrast is the point
        norms = {}
        for position in ("pre", "post"):
            twin = random_model(len(tokenizer), position, layers=6)
            encoder = viz.hidden_state_norms(twin, **norm_inputs(twin, tokenizer, args.text))["encoder"]
            norms[f"{position}-norm encoder"] = encoder
        title = "Residual stream, pre- vs post-norm (untrained, random weights)"
    written.append(viz.plot_hidden_state_norms(norms, title, path=out / "block-norms.png").path)

    print("\n".join(f"wrote {p}" for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
