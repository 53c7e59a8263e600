"""Every Python example in README.md and docs/*.md runs as written.

Each document's examples run in order in one namespace (later examples use earlier ones' names), in a
fresh working directory holding the files they name (a tiny GPT-2 at ``path/to/gpt2``, ``my.txt``, ...),
built here offline. Examples that talk to the Hugging Face Hub are skipped (tests have no network; the
push code itself is tested against a local Hub server in test_hub.py); the list below says which and why.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
import torch

import hf_vanilla as hv

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]

#: (document, example index) -> why it does not run in the tests.
NEEDS_THE_HUB = {
    ("docs/hub.md", 0): "pushes a run to the Hub",
    ("docs/hub.md", 1): "pushes models to the Hub",
    ("docs/hub.md", 2): "downloads a model from the Hub",
}

WORDS = "the king queen crown sword castle night day love war peace speak hear see thou thee my lord good".split()


def examples(document: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / document).read_text(encoding="utf-8"), flags=re.DOTALL)


def _text_file(path: Path, lines: int) -> None:
    rng = random.Random(0)
    path.write_text("".join(" ".join(rng.choices(WORDS, k=rng.randint(5, 12))) + ".\n\n" for _ in range(lines)))


def _tiny_gpt2(folder: Path):
    """A tiny GPT-2 with a byte-level BPE tokenizer trained here (nothing comes from the Hub)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from hf_vanilla.corpora import train_tokenizer

    tokenizer = train_tokenizer([" ".join(WORDS)] * 20, kind="bpe", vocab_size=300, add_eos=False)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=len(tokenizer), n_positions=64,
                                       bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model


def _tiny_marian(folder: Path) -> None:
    from transformers import MarianConfig, MarianMTModel

    MarianMTModel(MarianConfig(vocab_size=64, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                               decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
                               max_position_embeddings=32, pad_token_id=1, decoder_start_token_id=1)).save_pretrained(folder)


def _tiny_run_model(folder: Path) -> None:
    """The model files a causal-LM run leaves (what the docs load from ``runs/clm``)."""
    from hf_vanilla.corpora import train_tokenizer

    tokenizer = train_tokenizer([" ".join(WORDS)] * 20, kind="bpe", vocab_size=300, add_eos=False)
    config = hv.VanillaConfig.from_preset("tiny-gpt2", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    hv.VanillaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def setup(document: str, folder: Path) -> dict:
    """The files and names ``document``'s examples expect, in ``folder`` (the working directory)."""
    namespace: dict = {}
    if document == "docs/converting.md":
        from hf_vanilla.convert import convert_checkpoint

        namespace["native_model"] = _tiny_gpt2(folder / "path/to/gpt2")
        convert_checkpoint(folder / "path/to/gpt2", folder / "out/gpt2-vanilla")
        _tiny_marian(folder / "path/to/opus-mt-en-de")
    elif document == "docs/hub.md":
        namespace["model"] = hv.VanillaForCausalLM(hv.VanillaConfig.from_preset("tiny-gpt2"))
    elif document == "docs/deploying.md":
        _tiny_run_model(folder / "runs/clm")
    elif document in ("docs/training.md", "docs/finetuning.md"):
        _text_file(folder / "my.txt", 600)
        _tiny_run_model(folder / "runs/clm")
    return namespace


@pytest.mark.parametrize("document", DOCUMENTS)
def test_document_examples_run(document, tmp_path, monkeypatch, capsys):
    blocks = examples(document)
    monkeypatch.chdir(tmp_path)
    namespace = setup(document, tmp_path)
    ran = 0
    for index in range(len(blocks)):
        if (document, index) in NEEDS_THE_HUB:
            continue
        exec(compile(blocks[index], f"{document} example {index}", "exec"), namespace)
        if document == "README.md":  # each README example prints what it shows
            assert capsys.readouterr().out.strip(), index
        ran += 1
    assert ran == len(blocks) - sum(doc == document for doc, _ in NEEDS_THE_HUB)


def test_readme_has_an_example_per_family():
    text = "\n".join(examples("README.md"))
    for head in ("VanillaForMaskedLM", "VanillaForCausalLM", "VanillaForSeq2SeqLM"):
        assert head in text


def test_docs_name_no_path_outside_the_repository_and_no_placeholder():
    for document in DOCUMENTS:
        text = (ROOT / document).read_text(encoding="utf-8")
        assert "/work/" not in text and not re.search(r"about N\b", text), document


# --------------------------------------------------------------------------------------------------
# Multi-process commands: every `accelerate launch` line the help, README or docs show


#: The launch options (or config file) of a documented command that cannot run here -> why.
NEEDS_OTHER_HARDWARE = {
    "scripts/accelerate/ddp.yaml": "8 GPUs",
    "scripts/accelerate/multi_node.yaml": "2 machines with 8 GPUs each",
    "scripts/accelerate/fsdp.yaml": "GPUs (accelerate 1.15 drops FSDP on CPU)",
    "scripts/accelerate/deepspeed_zero2.yaml": "GPUs and DeepSpeed",
    "scripts/accelerate/deepspeed_zero3.yaml": "GPUs and DeepSpeed",
}


def launch_commands() -> dict[str, list[str]]:
    """Each distinct documented `accelerate launch ... -m hf_vanilla.cli train [--task T]` (its environment,
    launch options and the first task shown with them; the rest of the train options, often `...`, varies)
    -> where it is shown."""
    from hf_vanilla.training.cli import EPILOG

    sources = {"hf-vanilla train --help": EPILOG}
    sources.update({doc: "\n".join(re.findall(r"```bash\n(.*?)```", (ROOT / doc).read_text(encoding="utf-8"),
                                              flags=re.DOTALL)) for doc in DOCUMENTS})
    found: dict[str, list[str]] = {}
    for where, text in sources.items():
        for line in text.splitlines():
            match = re.match(r"\s*((?:\w+=\S+ )*accelerate launch .*?-m hf_vanilla\.cli train)( --task \w+)?", line)
            if match:
                launch = next((c for c in found if c.startswith(match.group(1) + " --task")), None)
                found.setdefault(launch or match.group(1) + (match.group(2) or " --task clm"), []).append(where)
    return found


def test_the_documented_launch_commands_are_the_ones_tested():
    commands = launch_commands()
    assert any("hf-vanilla train --help" in where for where in commands.values())
    runnable = [c for c in commands if not any(config in c for config in NEEDS_OTHER_HARDWARE)]
    assert len(runnable) >= 2 and len(commands) > len(runnable)


@pytest.mark.parametrize("command", [c for c in launch_commands()
                                     if not any(config in c for config in NEEDS_OTHER_HARDWARE)])
def test_a_documented_launch_command_runs_two_processes(command, tmp_path):
    """Run as written (the venv's `accelerate`, a free port, a tiny model on a few local lines): the run
    records two processes, as the text says."""
    import json
    import os
    import shlex
    import socket
    import subprocess
    import sys

    words = shlex.split(command)
    assignments, words = words[:words.index("accelerate")], words[words.index("accelerate"):]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    launch = [str(Path(sys.executable).parent / "accelerate"), "launch", "--main_process_port", port, *words[2:]]
    _text_file(tmp_path / "train.txt", 120)
    _text_file(tmp_path / "held-out.txt", 20)
    run_dir = tmp_path / "run"
    launch += ["--output-dir", str(run_dir), "--preset", "tiny", "--config", "hidden_size=32", "--config",
               "intermediate_size=64", "--vocab-size", "300", "--block-size", "16", "--batch-size", "2",
               "--max-steps", "2", "--num-samples", "0", "--disable-tqdm",
               "--data-files", f"train={tmp_path / 'train.txt'}", f"validation={tmp_path / 'held-out.txt'}",
               f"test={tmp_path / 'held-out.txt'}"]
    env = dict(os.environ, **dict(a.split("=", 1) for a in assignments), HF_HOME=str(tmp_path / "hf-home"),
               PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="")  # HF_HOME: no default accelerate config here
    proc = subprocess.run(launch, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    effective = json.loads((run_dir / "run.json").read_text())["effective"]
    assert (effective["world_size"], effective["distributed_type"]) == (2, "MULTI_CPU"), command


# --------------------------------------------------------------------------------------------------
# Set-up: the README's TORCH_SPEC reaches pip as written


def _setup_calls(command: str, tmp_path: Path) -> list[str]:
    """Run ``command`` (a README line calling scripts/test.sh) against a stand-in environment whose python
    records its arguments, has no torch yet, and installs nothing: the calls the set-up makes, in order."""
    import os
    import subprocess

    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$*" >> "$CALLS"\n[ "$1" != "-c" ]\n')
    python.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "TORCH_SPEC"}
    env.update(HF_VANILLA_VENV=str(tmp_path / "venv"), CALLS=str(tmp_path / "calls"))
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return (tmp_path / "calls").read_text().splitlines()


def test_the_readmes_torch_spec_reaches_pip_as_written(tmp_path):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = re.search(r'^TORCH_SPEC="(.*?)" bash scripts/test\.sh$', readme, flags=re.MULTILINE)
    assert command, "README shows no TORCH_SPEC=... bash scripts/test.sh"
    spec = command.group(1)
    assert spec == "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
    assert f"pip install {spec}\n" in readme  # the Install section's torch line is the same build
    calls = _setup_calls(command.group(0), tmp_path)
    assert calls == ["-c import torch", f"-m pip install -q {spec}", f"-m pip install -q -e {ROOT}[dev]",
                     "-m pytest -p no:cacheprovider"]


def test_the_setup_default_installs_the_pinned_torch(tmp_path):
    assert _setup_calls("bash scripts/test.sh", tmp_path)[1] == "-m pip install -q torch==2.13.0"
