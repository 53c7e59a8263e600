"""The measurements of the size ladder, one process each: ``python ladder_child.py '{"kind": ..., ...}'``.

Run by its path, not as a module, so that importing it imports no hf_vanilla: the ``remote`` process loads the
converted folder through ``trust_remote_code`` alone, and the twin's processes never see our package.
Prints one JSON line: {measurement: {"seconds", "peak_mib"?, "tokens"?}}. A step's peak memory is the peak
resident set during it above what the process held after its imports (so the save's includes the loaded model,
a training step's the weights and AdamW's state); the peak restarts at each step where Linux allows it
(/proc/self/clear_refs), and each process runs its steps in increasing order of memory (load before save, the
checkpointed training step before the plain one) where it only grows.

One process per side does every step that needs the loaded bfloat16 model (``serve``: code import, meta build,
load, save, forward, generate), another the two float32 training steps (``train``): a process starts in seconds
on a quiet machine and in tens of seconds on a loaded one, so the ladder starts as few as it can.

Every import of torch, transformers or hf_vanilla waits inside the step that needs it (a comment says so at each):
what a process imports, and when, is what it measures.
"""

from __future__ import annotations

import json
import resource
import sys
import tempfile
import time


def _status_mib(field: str) -> float | None:
    """VmRSS (resident now) or VmHWM (its peak) from /proc/self/status, where Linux keeps them."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _peak_mib() -> float:
    peak = _status_mib("VmHWM")
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 if peak is None else peak


def _reset_peak() -> None:
    """Start the peak again from what is resident now (Linux: /proc/self/clear_refs); elsewhere it only grows."""
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
    except OSError:
        pass


class Clock:
    """Each step's seconds and peak memory above the base, what the process held after its imports (not their
    transient peak, which differs between processes by several MiB), under its measurement's name."""

    def __init__(self) -> None:
        resident = _status_mib("VmRSS")
        self.base = _peak_mib() if resident is None else resident
        self.results: dict[str, dict] = {}

    def step(self, name: str, function, *args, **kwargs):
        _reset_peak()  # the step's peak: what it held at its start (the loaded model, say) and what it added
        start = time.perf_counter()
        value = function(*args, **kwargs)
        self.results[name] = {"seconds": time.perf_counter() - start, "peak_mib": max(0.0, _peak_mib() - self.base)}
        return value


#: How many times the serving process builds the model on the meta device again (``meta-again``).
REBUILDS = 7


def least_cpu_seconds(run, times: int) -> float:
    """The least CPU time of ``times`` calls: the cost of the work itself, without the first call's one-time work
    (caches, the first garbage collections) or the time other processes take from it on a loaded machine."""
    spent = []
    for _ in range(times):
        start = time.process_time()
        run()
        spent.append(time.process_time() - start)
    return min(spent)


def _ours(spec: dict) -> bool:
    return spec.get("side") == "ours"


def _load(spec: dict, dtype, remote: bool = False):
    # imported in the step it serves (module docstring)
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(spec["dir"], dtype=dtype, trust_remote_code=remote)


def _import_model_code(spec: dict):
    """What each side imports before its first model: the twin's modeling module (transformers imports it on first
    use), or hf_vanilla (which registers the Vanilla* classes with the Auto classes)."""
    # imported in the step it serves (module docstring)
    import transformers

    if _ours(spec):
        import hf_vanilla  # noqa: F401
    for name in transformers.AutoConfig.from_pretrained(spec["dir"]).architectures or []:
        getattr(transformers, name, None)  # ours: not a transformers name; hf_vanilla imported its classes


def _import_remote_code(spec: dict):
    """The folder's code files copied into the modules cache and imported, as ``trust_remote_code`` does."""
    # imported in the step it serves (module docstring)
    import transformers
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    config = transformers.AutoConfig.from_pretrained(spec["dir"], trust_remote_code=True)
    return get_class_from_dynamic_module(config.auto_map["AutoModelForCausalLM"], spec["dir"])


def make(spec: dict) -> dict:
    """The twin's checkpoint: built on the meta device in bfloat16 (no float32 copy at 1.1B), filled by its own
    initialisation, saved in shards."""
    # imported in the step it serves (module docstring)
    import torch
    import transformers

    clock = Clock()
    config = getattr(transformers, spec["config_class"])(**spec["config"])

    def build():
        with torch.device("meta"):
            model = getattr(transformers, spec["model_class"])(config).to(torch.bfloat16)
        model.to_empty(device="cpu")
        model.initialize_weights()  # every weight (nothing is flagged as loaded) and the computed buffers
        model.tie_weights()
        model.save_pretrained(spec["out"], max_shard_size=spec["shard"])

    clock.step("make", build)
    return clock.results


def convert(spec: dict) -> dict:
    # imported in the step it serves (module docstring)
    from hf_vanilla.convert import convert_checkpoint

    clock = Clock()
    clock.step("convert", convert_checkpoint, spec["dir"], spec["out"])
    return clock.results


def serve(spec: dict) -> dict:
    """Code import, meta build, ``from_pretrained`` in bfloat16, ``save_pretrained``, a forward, greedy generate."""
    # imported in the step it serves (module docstring)
    import torch
    import transformers

    start = time.perf_counter()
    _import_model_code(spec)
    imported = time.perf_counter() - start
    clock = Clock()
    clock.results["import"] = {"seconds": imported}
    config = transformers.AutoConfig.from_pretrained(spec["dir"])

    def build_on_meta():
        with torch.device("meta"):
            transformers.AutoModelForCausalLM.from_config(config)

    clock.step("meta", build_on_meta)
    clock.results["meta-again"] = {"seconds": least_cpu_seconds(build_on_meta, REBUILDS)}
    model = clock.step("load", _load, spec, torch.bfloat16).eval()
    if spec.get("stop_after") == "load":  # `--rows build-load`: the build and load rows only
        return clock.results
    with tempfile.TemporaryDirectory(dir=spec.get("scratch")) as out:
        clock.step("save", model.save_pretrained, out, max_shard_size=spec["shard"])
    ids = torch.randint(3, model.config.vocab_size, (1, spec["length"]), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model(input_ids=ids[:, :8])  # warm-up
        clock.step("forward", model, input_ids=ids)
    for batch in spec.get("generate_batches", ()):
        ids = torch.randint(3, model.config.vocab_size, (batch, spec["prompt"]), generator=torch.Generator().manual_seed(1))
        mask = torch.ones_like(ids)
        model.generate(input_ids=ids[:, :4], attention_mask=mask[:, :4], do_sample=False, max_new_tokens=2,
                       pad_token_id=0)  # warm-up
        new = spec["new_tokens"]
        out = clock.step(f"generate-b{batch}", model.generate, input_ids=ids, attention_mask=mask, do_sample=False,
                         max_new_tokens=new, min_new_tokens=new, pad_token_id=0)
        clock.results[f"generate-b{batch}"]["tokens"] = out[:, ids.shape[1]:].tolist()
    return clock.results


def remote(spec: dict) -> dict:
    """Ours through ``trust_remote_code`` with the package never imported: the code's import, then the load."""
    # imported in the step it serves (module docstring)
    import torch

    start = time.perf_counter()
    _import_remote_code(spec)
    imported = time.perf_counter() - start
    clock = Clock()
    clock.results["import"] = {"seconds": imported}
    clock.step("load", _load, spec, torch.bfloat16, remote=True)
    assert "hf_vanilla" not in sys.modules, "the package was imported: this is not trust_remote_code alone"
    return clock.results


def train(spec: dict) -> dict:
    """One float32 AdamW step with gradient checkpointing, then one without (the larger peak second)."""
    # imported in the step it serves (module docstring)
    import torch

    _import_model_code(spec)
    clock = Clock()
    model = _load(spec, torch.float32).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(3, model.config.vocab_size, (1, spec["length"]), generator=torch.Generator().manual_seed(0))

    def step(tokens):
        model(input_ids=tokens, labels=tokens).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    # transformers 5.x renamed it; the older name still works on older releases
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    disable = getattr(model, "activation_checkpointing_disable", None) or model.gradient_checkpointing_disable
    enable()
    step(ids[:, :8])  # warm-up: allocates the optimiser's state, first calls
    clock.step("train-checkpointing", step, ids)
    disable()
    clock.step("train", step, ids)
    return clock.results


def calibrate(spec: dict) -> dict:
    """This machine's rates now, for the ladder's estimate: a process's imports, products in the layouts the models
    use (``F.linear``'s [out, in] weights; GPT-2's Conv1D multiplies by [in, out] ones, which bfloat16 runs several
    times slower on a CPU without bfloat16 instructions), filling and writing memory."""
    start = time.perf_counter()
    # imported in the step it serves (module docstring)
    import torch
    from transformers import AutoModelForCausalLM  # noqa: F401  (what every process imports before its model)
    from transformers.models.llama import modeling_llama  # noqa: F401

    imported = time.perf_counter() - start
    functional = torch.nn.functional

    def rate(rows: int, dtype, conv1d: bool = False) -> float:
        x = torch.randn(rows, 1024, dtype=dtype)
        weight = torch.randn(1024, 4096, dtype=dtype) if conv1d else torch.randn(4096, 1024, dtype=dtype)

        bias = torch.zeros(4096, dtype=dtype)

        def product():
            return torch.addmm(bias, x, weight) if conv1d else functional.linear(x, weight, bias)

        product()
        start, runs = time.perf_counter(), 0
        while time.perf_counter() - start < 0.5 or runs < 2:
            product()
            runs += 1
        return 2 * rows * 1024 * 4096 * runs / (time.perf_counter() - start)

    cpu, wall = time.process_time(), time.perf_counter()
    rates = {"fp32_flops": rate(128, torch.float32), "bf16_flops": rate(128, torch.bfloat16),
             "bf16_flops_b1": rate(1, torch.bfloat16), "bf16_flops_conv1d": rate(128, torch.bfloat16, conv1d=True)}
    # the share of its threads' CPUs this process got: 1.0 on a quiet machine, less when others run
    share = min(1.0, (time.process_time() - cpu) / (time.perf_counter() - wall) / torch.get_num_threads())
    data = torch.empty(2**25, dtype=torch.bfloat16)
    start = time.perf_counter()
    data.normal_()
    fill = data.numel() / (time.perf_counter() - start)
    with tempfile.NamedTemporaryFile(dir=spec.get("scratch")) as handle:
        start = time.perf_counter()
        handle.write(data.view(torch.uint8).numpy().tobytes())
        handle.flush()
        write = data.nbytes / (time.perf_counter() - start)
    return {"import_s": imported, **rates, "fill_per_s": fill, "write_bytes_per_s": write, "cpu_share": share}


KINDS = {"make": make, "convert": convert, "serve": serve, "remote": remote, "train": train, "calibrate": calibrate}


def main(spec: dict) -> dict:
    # imported in the step it serves (module docstring)
    import torch

    torch.manual_seed(0)
    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    if spec["kind"] not in KINDS:
        raise ValueError(f"unknown measurement {spec['kind']!r}; known: {', '.join(KINDS)}")
    return KINDS[spec["kind"]](spec)


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
