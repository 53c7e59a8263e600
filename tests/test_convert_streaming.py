"""convert_checkpoint streams: sharded sources give sharded outputs with an index, tensor by tensor exactly what the
in-memory conversion (from_hf / to_hf) gives, without ever loading the source model whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

import hf_vanilla.convert as convert
from hf_vanilla.convert import convert_checkpoint, from_hf
from tests.test_convert import BARE, CASES, build

# Loaded whole on purpose: Marian's fixed sinusoids are checked against (or recomputed by) a real model. (A T5 v1.1
# checkpoint, whose config ties the lm_head it holds apart, streams: the tie is undone where the values differ.)
LOADED_WHOLE = ("marian", "marian-model")
SHARD = "24KB"  # a few shards for every tiny model


def tensors(folder: Path) -> dict[str, torch.Tensor]:
    out = {}
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(path, framework="pt") as handle:
            out.update({name: handle.get_tensor(name) for name in handle.keys()})
    return out


def data_bytes(path: Path) -> int:
    with safe_open(path, framework="pt") as handle:
        return sum(handle.get_tensor(name).nbytes for name in handle.keys())


def shards(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.glob("*.safetensors"))


def indexed(folder: Path) -> dict[str, str]:
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in tensors(folder).values())
    assert sorted(set(index["weight_map"].values())) == shards(folder)
    return index["weight_map"]


def assert_same_tensors(got: dict, expected: dict) -> None:
    assert sorted(got) == sorted(expected)
    different = [k for k in expected if got[k].dtype != expected[k].dtype or not torch.equal(got[k], expected[k])]
    assert not different


@pytest.fixture
def never_loaded_whole(monkeypatch):
    """Loading the source model whole is the path streaming replaces: make it fail loudly."""
    def refuse(*args, **kwargs):
        raise AssertionError("convert_checkpoint loaded the whole source model instead of streaming it")
    monkeypatch.setattr(convert, "_load_source", refuse)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", [n for n in [*CASES, *BARE] if n not in LOADED_WHOLE])
def test_a_sharded_checkpoint_streams_both_ways_exactly(name, dtype, tmp_path, request):
    native, _ = build(name)
    native = native.to(dtype)
    source, vanilla_dir, back = tmp_path / "native", tmp_path / "vanilla", tmp_path / "back"
    native.save_pretrained(source, max_shard_size=SHARD)
    assert len(shards(source)) > 1, "the fixture must be sharded"
    request.getfixturevalue("never_loaded_whole")

    convert_checkpoint(source, vanilla_dir)
    in_memory = tmp_path / "in-memory"
    from_hf(native).save_pretrained(in_memory)
    # What save_pretrained of the in-memory conversion writes, shard by shard: every tensor, config, generation.
    assert_same_tensors(tensors(vanilla_dir), tensors(in_memory))
    for file in ("config.json", "generation_config.json"):
        if (in_memory / file).exists():
            assert json.loads((vanilla_dir / file).read_text()) == json.loads((in_memory / file).read_text()), file
    assert sorted(p.name for p in vanilla_dir.glob("*.py")) == sorted(p.name for p in in_memory.glob("*.py"))
    # Sharded like the source (its largest shard is the limit; the order of the tensors differs, so the count
    # may by one), with an index naming every tensor's shard.
    assert abs(len(shards(vanilla_dir)) - len(shards(source))) <= 1
    assert max(map(data_bytes, vanilla_dir.glob("*.safetensors"))) <= max(map(data_bytes, source.glob("*.safetensors")))
    assert sorted(indexed(vanilla_dir)) == sorted(tensors(vanilla_dir))

    convert_checkpoint(vanilla_dir, back)
    assert_same_tensors(tensors(back), tensors(source))
    assert abs(len(shards(back)) - len(shards(source))) <= 1
    assert sorted(indexed(back)) == sorted(tensors(back))
    returned = type(native).from_pretrained(back).state_dict()  # (a BertModel is built with a pooler: ignored)
    assert_same_tensors({key: returned[key] for key in native.state_dict()}, native.state_dict())


@pytest.mark.parametrize("name", LOADED_WHOLE)
def test_what_cannot_stream_is_loaded_whole_converted_the_same_and_still_sharded(name, tmp_path):
    native, _ = build(name)
    native.save_pretrained(tmp_path / "native", max_shard_size=SHARD)
    convert_checkpoint(tmp_path / "native", tmp_path / "vanilla")
    from_hf(native).save_pretrained(tmp_path / "in-memory")
    assert_same_tensors(tensors(tmp_path / "vanilla"), tensors(tmp_path / "in-memory"))
    assert len(shards(tmp_path / "vanilla")) > 1
    assert sorted(indexed(tmp_path / "vanilla")) == sorted(tensors(tmp_path / "vanilla"))


def test_max_shard_size_overrides_the_sources_and_one_file_stays_one_file(tmp_path, never_loaded_whole):
    native, _ = build("llama-gqa-untied-linear-rope")
    native.save_pretrained(tmp_path / "native")
    convert_checkpoint(tmp_path / "native", tmp_path / "one")
    assert shards(tmp_path / "one") == ["model.safetensors"]
    assert not (tmp_path / "one" / "model.safetensors.index.json").exists()
    convert_checkpoint(tmp_path / "native", tmp_path / "many", max_shard_size="16KB")
    assert len(shards(tmp_path / "many")) > 2
    assert_same_tensors(tensors(tmp_path / "many"), tensors(tmp_path / "one"))


def test_each_shard_is_written_before_the_next_is_made(tmp_path, monkeypatch, never_loaded_whole):
    """Memory holds one shard: every tensor made after a shard was written belongs to a later shard."""
    native, _ = build("llama-gqa-untied-linear-rope")
    native.save_pretrained(tmp_path / "native", max_shard_size=SHARD)
    events = []
    make, save = convert._make, convert.save_file
    monkeypatch.setattr(convert, "_make", lambda plan, name, read, **kw: events.append(("make", name)) or make(plan, name, read, **kw))
    monkeypatch.setattr(convert, "save_file", lambda shard, path, **kw: events.append(("save", sorted(shard))) or save(shard, path, **kw))
    convert_checkpoint(tmp_path / "native", tmp_path / "vanilla")
    made: list[str] = []
    for kind, what in events:
        if kind == "make":
            made.append(what)
        else:
            assert sorted(made) == what  # exactly the tensors made since the last write
            made = []
    assert sum(kind == "save" for kind, _ in events) == len(shards(tmp_path / "native")) > 1


def test_a_checkpoint_transformers_must_rename_is_loaded_whole_and_converted_the_same(tmp_path):
    """GPT-2 checkpoints on the Hub name tensors without the ``transformer.`` prefix; loading adds it."""
    native, _ = build("gpt2")
    native.save_pretrained(tmp_path / "native")
    state = {name.removeprefix("transformer."): tensor.contiguous() for name, tensor in tensors(tmp_path / "native").items()}
    from safetensors.torch import save_file
    save_file(state, tmp_path / "native" / "model.safetensors", metadata={"format": "pt"})
    convert_checkpoint(tmp_path / "native", tmp_path / "vanilla")
    in_memory = tmp_path / "in-memory"
    from_hf(native).save_pretrained(in_memory)
    assert_same_tensors(tensors(tmp_path / "vanilla"), tensors(in_memory))


def test_a_tied_heads_saved_copy_streams_as_one_tensor(tmp_path, never_loaded_whole):
    """A checkpoint holding both ends of a tie with equal values (as a .bin turned safetensors does) is tied, as
    loading ties it, not untied nor loaded whole."""
    native, _ = build("t5-relu-tied")
    native.save_pretrained(tmp_path / "native")
    state = tensors(tmp_path / "native")
    assert "lm_head.weight" not in state
    from safetensors.torch import save_file
    save_file({**state, "lm_head.weight": state["shared.weight"].clone()}, tmp_path / "native" / "model.safetensors",
              metadata={"format": "pt"})
    convert_checkpoint(tmp_path / "native", tmp_path / "vanilla")
    from_hf(native).save_pretrained(tmp_path / "in-memory")
    assert_same_tensors(tensors(tmp_path / "vanilla"), tensors(tmp_path / "in-memory"))
    assert json.loads((tmp_path / "vanilla" / "config.json").read_text())["tie_word_embeddings"] is True


@pytest.mark.parametrize("name", ["llama-gqa-tied-llama3-rope", "bart", "t5-relu-tied"])
def test_loading_a_sharded_bf16_conversion_initialises_nothing_and_upcasts_nothing(name, tmp_path, monkeypatch):
    """What crawls only at size: an init pass over loaded weights, an fp32 copy, a device_map splitting a block."""
    from transformers import initialization

    native, _ = build(name)
    native.to(torch.bfloat16).save_pretrained(tmp_path / "native", max_shard_size=SHARD)
    convert_checkpoint(tmp_path / "native", tmp_path / "vanilla")
    touched = []
    for function, original in list(initialization.TORCH_INIT_FUNCTIONS.items()):
        def record(tensor, *args, _original=original, _function=function, **kwargs):
            touched.append((_function, tuple(tensor.shape)))
            return _original(tensor, *args, **kwargs)
        monkeypatch.setitem(initialization.TORCH_INIT_FUNCTIONS, function, record)
    vanilla_class = type(from_hf(native))
    loaded = vanilla_class.from_pretrained(tmp_path / "vanilla", dtype="auto")
    assert touched == []  # every weight came from the files; none was drawn and then overwritten
    assert {p.dtype for p in loaded.parameters()} == {torch.bfloat16}
    blocks = {type(module).__name__ for module in loaded.modules()}
    assert set(loaded._no_split_modules) <= blocks and loaded._no_split_modules
