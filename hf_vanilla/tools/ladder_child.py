"""One measurement of the size ladder, in a fresh process: ``python ladder_child.py '{"kind": ..., ...}'``.

Run by its path, not as a module, so that importing it imports no hf_vanilla: the ``load-remote`` measurement
loads the converted folder through ``trust_remote_code`` alone, and the twin's measurements never see our package.
Prints one JSON line: {"seconds", "peak_mib" (peak resident memory above the imports), "tokens"?}.
"""

from __future__ import annotations

import json
import resource
import sys
import tempfile
import time


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _model_class(spec: dict):
    import transformers

    if spec.get("side") == "ours" and spec["kind"] != "load-remote":
        import hf_vanilla  # noqa: F401  (registers the Vanilla* classes with the Auto classes)
    return transformers.AutoModelForCausalLM


def _load(spec: dict, dtype):
    return _model_class(spec).from_pretrained(spec["dir"], dtype=dtype, trust_remote_code=spec["kind"] == "load-remote")


def main(spec: dict) -> dict:
    import torch
    import transformers

    torch.manual_seed(0)
    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    kind = spec["kind"]
    if kind == "convert":
        from hf_vanilla.convert import convert_checkpoint
    model_class = _model_class(spec)
    if "dir" in spec and kind != "load-remote":
        # transformers imports a model's module on first use: import both classes before the clock starts, so
        # that neither side's figure holds an import the other one did earlier (ours: with hf_vanilla).
        architectures = transformers.AutoConfig.from_pretrained(spec["dir"]).architectures or []
        for name in architectures:
            getattr(transformers, name, None)
    base = _peak_mib()
    result: dict = {}
    start = time.perf_counter()
    if kind == "make":  # the twin's checkpoint: built on the meta device, filled by its own initialisation
        config = getattr(transformers, spec["config_class"])(**spec["config"])
        with torch.device("meta"):
            model = getattr(transformers, spec["model_class"])(config)
        model.to_empty(device="cpu")
        model.initialize_weights()  # every weight (nothing is flagged as loaded) and the computed buffers
        model.tie_weights()
        model.to(torch.bfloat16).save_pretrained(spec["out"], max_shard_size=spec["shard"])
    elif kind == "meta":
        config = transformers.AutoConfig.from_pretrained(spec["dir"])
        start = time.perf_counter()
        with torch.device("meta"):
            model_class.from_config(config)
    elif kind in ("load", "load-remote"):
        model = _load(spec, torch.bfloat16)
        if kind == "load-remote":
            assert "hf_vanilla" not in sys.modules, "the package was imported: this is not trust_remote_code alone"
    elif kind == "save":
        model = _load(spec, torch.bfloat16)
        with tempfile.TemporaryDirectory(dir=spec.get("scratch")) as out:
            start = time.perf_counter()
            model.save_pretrained(out, max_shard_size=spec["shard"])
            result["seconds"] = time.perf_counter() - start
    elif kind == "convert":
        convert_checkpoint(spec["dir"], spec["out"])
    elif kind == "train":
        model = _load(spec, torch.float32).train()
        if spec["checkpointing"]:
            # transformers 5.x renamed it; the older name still works on older releases
            enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
            enable()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        ids = torch.randint(3, model.config.vocab_size, (spec["batch"], spec["length"]))
        for _step in range(2):  # the first allocates the optimiser state; the second is timed
            start = time.perf_counter()
            model(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    elif kind == "forward":
        model = _load(spec, torch.bfloat16).eval()
        ids = torch.randint(3, model.config.vocab_size, (spec["batch"], spec["length"]))
        with torch.no_grad():
            model(input_ids=ids[:, :8])  # warm-up
            start = time.perf_counter()
            model(input_ids=ids)
    elif kind == "generate":
        model = _load(spec, torch.bfloat16).eval()
        generator = torch.Generator().manual_seed(1)
        ids = torch.randint(3, model.config.vocab_size, (spec["batch"], spec["length"]), generator=generator)
        settings = dict(do_sample=False, max_new_tokens=spec["new_tokens"], min_new_tokens=spec["new_tokens"],
                        pad_token_id=0)
        model.generate(input_ids=ids[:, :4], attention_mask=torch.ones_like(ids[:, :4]), do_sample=False,
                       max_new_tokens=2, pad_token_id=0)  # warm-up
        start = time.perf_counter()
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **settings)
        result["tokens"] = out[:, ids.shape[1]:].tolist()
    else:
        raise ValueError(f"unknown measurement {kind!r}")
    result.setdefault("seconds", time.perf_counter() - start)
    result["peak_mib"] = max(0.0, _peak_mib() - base)
    return result


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
