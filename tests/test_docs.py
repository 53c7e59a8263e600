"""Every Python example in README.md and docs/*.md runs as written.

Each document's examples run in order in one namespace (later examples use earlier ones' names), in a
fresh working directory holding the files they name (a tiny GPT-2 at ``path/to/gpt2``, ``my.txt``, ...),
built here offline. Examples that talk to the Hugging Face Hub are skipped (tests have no network; the
push code itself is tested against a local Hub server in test_hub.py); the list below says which and why.

docs/deploying.md takes a run through optional tools, one section each: a section runs on its own (after
the sections it continues), where its tool is installed, and its results are checked (parity, losses).
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import hf_vanilla as hv

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
BY_SECTION = "docs/deploying.md"  # its examples run section by section (below), each where its tool is installed

#: (document, example index) -> why it does not run in the tests.
NEEDS_THE_HUB = {
    ("docs/hub.md", 0): "pushes a run to the Hub",
    ("docs/hub.md", 1): "pushes models to the Hub",
    ("docs/hub.md", 2): "downloads a model from the Hub",
}

WORDS = "the king queen crown sword castle night day love war peace speak hear see thou thee my lord good".split()


def examples(document: str) -> list[str]:
    return _python_blocks((ROOT / document).read_text(encoding="utf-8"))


def sections(document: str) -> dict[str, list[str]]:
    """Each ``## `` heading's Python examples, in order (the text before the first heading is left out)."""
    parts = re.split(r"^## (.+)$", (ROOT / document).read_text(encoding="utf-8"), flags=re.MULTILINE)
    return {heading.strip(): _python_blocks(body) for heading, body in zip(parts[1::2], parts[2::2], strict=True)}


def _python_blocks(markdown: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown, flags=re.DOTALL)


def run_example(block: str, namespace: dict, label: str) -> None:
    exec(compile(block, label, "exec"), namespace)


def _text_file(path: Path, lines: int) -> None:
    rng = random.Random(0)
    path.write_text("".join(" ".join(rng.choices(WORDS, k=rng.randint(5, 12))) + ".\n\n" for _ in range(lines)))


def _tiny_gpt2(folder: Path) -> None:
    """A tiny GPT-2 with a byte-level BPE tokenizer trained here (nothing comes from the Hub)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from hf_vanilla.corpora import train_tokenizer

    tokenizer = train_tokenizer([" ".join(WORDS)] * 20, kind="bpe", vocab_size=300, add_eos=False)
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=len(tokenizer), n_positions=64,
                               bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
                    ).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def _tiny_marian(folder: Path) -> None:
    from transformers import MarianConfig, MarianMTModel

    MarianMTModel(MarianConfig(vocab_size=64, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                               decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
                               max_position_embeddings=32, pad_token_id=1, decoder_start_token_id=1)).save_pretrained(folder)


def _tiny_run_model(folder: Path, preset: str = "tiny-gpt2", head: type = hv.VanillaForCausalLM, add_eos: bool = False,
                    **overrides) -> None:
    """The model files a run leaves (what the docs load from ``runs/clm``, ``runs/main-shakespeare``, ...)."""
    from hf_vanilla.corpora import train_tokenizer

    tokenizer = train_tokenizer([" ".join(WORDS)] * 20, kind="bpe", vocab_size=300, add_eos=add_eos)
    torch.manual_seed(0)
    config = hv.VanillaConfig.from_preset(preset, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                                          bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                                          **overrides)
    head(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def setup(document: str, folder: Path) -> dict:
    """The files and names ``document``'s examples expect, in ``folder`` (the working directory)."""
    namespace: dict = {}
    if document == "docs/converting.md":
        from hf_vanilla.convert import convert_checkpoint

        _tiny_gpt2(folder / "path/to/gpt2")  # the examples load it themselves, as a reader's copy would
        convert_checkpoint(folder / "path/to/gpt2", folder / "out/gpt2-vanilla")
        _tiny_marian(folder / "path/to/opus-mt-en-de")
    elif document == "docs/hub.md":
        namespace["model"] = hv.VanillaForCausalLM(hv.VanillaConfig.from_preset("tiny-gpt2"))
    elif document in ("docs/training.md", "docs/finetuning.md"):
        _text_file(folder / "my.txt", 600)
        _tiny_run_model(folder / "runs/clm")
    return namespace


@pytest.mark.parametrize("document", [document for document in DOCUMENTS if document != BY_SECTION])
def test_document_examples_run(document, tmp_path, monkeypatch, capsys):
    blocks = examples(document)
    monkeypatch.chdir(tmp_path)
    namespace = setup(document, tmp_path)
    ran = 0
    for index in range(len(blocks)):
        if (document, index) in NEEDS_THE_HUB:
            continue
        run_example(blocks[index], namespace, f"{document} example {index}")
        if document == "README.md":  # each README example prints what it shows
            assert capsys.readouterr().out.strip(), index
        ran += 1
    assert ran == len(blocks) - sum(doc == document for doc, _ in NEEDS_THE_HUB)


def test_readme_has_an_example_per_family():
    text = "\n".join(examples("README.md"))
    for head in ("VanillaForMaskedLM", "VanillaForCausalLM", "VanillaForSeq2SeqLM"):
        assert head in text


def test_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 150, f"README.md has {len(lines)} lines: move details to docs/ and link them"


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", markdown, flags=re.DOTALL), flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        if seen[slug]:
            seen[f"{slug}-{seen[slug]}"] = 0
    return set(seen)


def test_every_link_between_documents_resolves():
    """A moved file or renamed section leaves no dangling link in README.md or docs/ (files and #anchors)."""
    broken = []
    for document in DOCUMENTS:
        source = ROOT / document
        text = re.sub(r"```.*?```", "", source.read_text(encoding="utf-8"), flags=re.DOTALL)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            path, _, anchor = target.partition("#")
            linked = (source.parent / path).resolve() if path else source
            if not linked.exists():
                broken.append(f"{document}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked.read_text(encoding="utf-8")):
                broken.append(f"{document}: {target} (no such section)")
    assert not broken, "\n".join(broken)


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
    "scripts/accelerate/fsdp.yaml": "GPUs (accelerate 1.16 drops FSDP on CPU)",
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

    for venv in ("venv", "venv-oldest"):  # the main environment and the oldest transformers' (test.sh's 2nd stage)
        python = tmp_path / venv / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$*" >> "$CALLS"\n[ "$1" != "-c" ]\n')
        python.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "TORCH_SPEC"}
    env.update(HF_VANILLA_VENV=str(tmp_path / "venv"), HF_VANILLA_OLDEST_VENV=str(tmp_path / "venv-oldest"),
               CALLS=str(tmp_path / "calls"))
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
    from hf_vanilla.transformers_releases import MINIMUM_TRANSFORMERS

    # setup.sh looks torch up without importing it (issue 51: the import alone took 88 s on a busy machine)
    find_torch = "-c import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"
    assert calls == [find_torch, f"-m pip install -q {spec}", f"-m pip install -q -e {ROOT}[dev]",
                     "-m pytest -p no:cacheprovider",
                     # then the model files on the oldest transformers, in an environment with the same torch build
                     "-c import torch", f"-m pip install -q {spec}",
                     f"-m pip install -q transformers=={MINIMUM_TRANSFORMERS} safetensors>=0.4 pytest>=8",
                     "-c import transformers; print(transformers.__version__)",
                     "-m pytest -p no:cacheprovider --noconftest tests/test_model_files_portable.py"]


def test_the_setup_default_installs_the_pinned_torch(tmp_path):
    assert _setup_calls("bash scripts/test.sh", tmp_path)[1] == "-m pip install -q torch==2.13.0"


# --------------------------------------------------------------------------------------------------
# docs/deploying.md: one section per tool
# --------------------------------------------------------------------------------------------------

#: Verses in the default held-out books (and one to train on), for the Bible fixture the translation task reads.
VERSES = {("Gen", 1, 1): ("In the beginning.", "En el principio."), ("Ruth", 1, 1): ("Now it came to pass.", "Y aconteció."),
          ("John", 1, 1): ("In the beginning was the Word.", "En el principio era el Verbo."),
          ("John", 1, 2): ("The same was in the beginning.", "Este era en el principio.")}


def _deploying_runs(folder: Path) -> None:
    """The run folders docs/deploying.md starts from, tiny, shaped like the jobs that write them."""
    # the main job: the paper's block, pre-norm, an output layer of its own; its tokenizer appends EOS
    _tiny_run_model(folder / "runs/main-shakespeare", "tiny-transformer", architecture="decoder", norm_position="pre",
                    tie_word_embeddings=False, add_eos=True)
    _tiny_run_model(folder / "runs/translation", "tiny-transformer", hv.VanillaForSeq2SeqLM, add_eos=True,
                    norm_position="pre", decoder_start_token_id=2)
    _tiny_run_model(folder / "runs/llama-shakespeare", "tiny-llama", add_eos=True)


def _held_out_corpora(request: pytest.FixtureRequest, folder: Path) -> None:
    """The Shakespeare and Bible loaders read fixture archives (the corpus tests' own) from a private cache."""
    from hf_vanilla import corpora
    from tests.corpus_fixtures import make_bible_debs, pin

    request.getfixturevalue("corpus_cache")
    corpora.fetch_corpus("shakespeare", source=request.getfixturevalue("shakespeare_src"))
    en = {verse: pair[0] for verse, pair in VERSES.items()}
    es = {verse: pair[1] for verse, pair in VERSES.items()}
    debs = make_bible_debs(folder / "bible", en=en, es=es, books=corpora.KJV_VERSIFICATION)
    pin(request.getfixturevalue("monkeypatch"), "bible-en-es", debs)
    corpora.fetch_corpus("bible-en-es", source=folder / "bible")


def _sft_trained(ns: dict) -> None:
    losses = ns["losses"]
    assert len(losses) == 5 and all(math.isfinite(loss) for loss in losses) and losses[-1] < losses[0], losses
    from transformers import AutoModelForCausalLM

    before = AutoModelForCausalLM.from_pretrained("runs/main-shakespeare").state_dict()
    after = AutoModelForCausalLM.from_pretrained("runs/sonnet-sft").state_dict()
    assert before.keys() == after.keys()
    assert not all(torch.equal(before[name], after[name]) for name in before)  # the saved folder is the trained one


def _lm_eval_scored(ns: dict) -> None:
    from lm_eval.models.huggingface import HFLM

    scores, translation = ns["scores"], ns["translation"]
    assert scores["sample_len"] == 2  # Macbeth and Much Ado, whole
    assert 1 < scores["byte_perplexity,none"] < math.inf and scores["bits_per_byte,none"] > 0
    assert translation["sample_len"] == 2 and 0 <= translation["bleu,none"] <= 100  # John 1:1-2
    with pytest.raises(ValueError, match="does not fit architecture='encoder-decoder'"):
        HFLM(pretrained="runs/translation", device="cpu")  # what the page says happens without backend="seq2seq"


def _exported(ns: dict) -> None:
    assert ns["stepped"].shape == ns["eager"].shape and ns["export_diff"] < 1e-5


def _lowered(ns: dict) -> None:
    assert ns["on_device"].shape == ns["eager"].shape and ns["executorch_diff"] < 1e-4


def _onnx_matches(ns: dict) -> None:
    assert len(ns["onnx_diffs"]) == 2 and max(ns["onnx_diffs"].values()) < 1e-4, ns["onnx_diffs"]


def _quantized(ns: dict) -> None:
    # Quantized for real (the logits moved), and close: int8 weights on the tiny model move logits by ~1e-3.
    assert all(0 < diff < 0.05 for diff in ns["int8_diffs"].values()) and len(ns["int8_diffs"]) == 2, ns["int8_diffs"]


def _gguf_matches(ns: dict) -> None:
    assert ns["gguf_diffs"]["f32"] == 0.0  # to_hf and the f32 GGUF are exact
    assert 0 < ns["gguf_diffs"]["q8_0"] < 0.05, ns["gguf_diffs"]


@dataclasses.dataclass(frozen=True)
class ToolSection:
    needs: tuple[str, ...]  # the modules its examples import beyond the package's own dependencies
    check: Callable[[dict], None]  # what must hold in the namespace the examples leave
    after: str | None = None  # the section it continues from
    corpora: bool = False  # reads the held-out splits through hf_vanilla.corpora
    slow: bool = False


def _generated_unsplit(ns: dict) -> None:
    # Run as plain python the example is one process, unsplit; tests/test_tensor_parallel.py runs it under torchrun.
    prompt = ns["tokenizer"](["the king"], return_tensors="pt").input_ids
    tokens = ns["tokens"]  # the prompt, then up to 8 new tokens (fewer when the model ends the text)
    assert prompt.shape[1] < tokens.shape[1] <= prompt.shape[1] + 8 and torch.equal(tokens[:, : prompt.shape[1]], prompt)


DEPLOYING = {
    "Fine-tuning further with TRL": ToolSection(("trl",), _sft_trained),
    "Evaluating with lm-evaluation-harness": ToolSection(("lm_eval",), _lm_eval_scored, corpora=True),
    "torch.export": ToolSection((), _exported),
    "ExecuTorch": ToolSection(("executorch",), _lowered, after="torch.export", slow=True),
    "ONNX and onnxruntime": ToolSection(("onnx", "onnxscript", "onnxruntime"), _onnx_matches),
    "int8 with torchao": ToolSection(("torchao",), _quantized),
    "GGUF for llama.cpp, through `to_hf`": ToolSection(("convert_hf_to_gguf", "gguf"), _gguf_matches),
    "Tensor parallelism": ToolSection((), _generated_unsplit),
}


def test_every_deploying_example_has_a_check():
    assert {heading for heading, blocks in sections(BY_SECTION).items() if blocks} == set(DEPLOYING)


@pytest.mark.parametrize("heading", [pytest.param(heading, marks=[pytest.mark.slow] if tool.slow else [])
                                     for heading, tool in DEPLOYING.items()])
def test_deploying_section_runs(heading, tmp_path, monkeypatch, request):
    tool = DEPLOYING[heading]
    for module in tool.needs:
        pytest.importorskip(module, reason=f"{BY_SECTION} '{heading}' needs {module} (pip install -e '.[deploy]')")
    monkeypatch.chdir(tmp_path)
    _deploying_runs(tmp_path)
    if tool.corpora:
        _held_out_corpora(request, tmp_path)
    every = sections(BY_SECTION)
    namespace: dict = {}
    for name in ([tool.after] if tool.after else []) + [heading]:
        for index, block in enumerate(every[name]):
            run_example(block, namespace, f"{BY_SECTION} '{name}' example {index}")
    tool.check(namespace)


#: The run-folder listings of the docs: (page, the line the listing follows, its folder, whether it shows a push).
LISTINGS = (("training.md", "## What a run directory holds", "runs/clm/", False),
            ("hub.md", "The run directory holds everything that gets shared", "runs/shakespeare-clm/", True))


@pytest.mark.parametrize(("page", "after", "folder", "for_push"), LISTINGS, ids=[row[0] for row in LISTINGS])
def test_the_run_folder_listings_are_generated_from_the_declared_layout(page, after, folder, for_push):
    """Issue 43: the hand-written listings left out transformers_releases.py and variants.py, which every run holds
    and every push uploads. tests/test_train.py keeps the layout equal to a real run's folder and upload."""
    from hf_vanilla.training.layout import listing

    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    start = text.index("```\n", text.index(after)) + 4
    assert text[start:text.index("```\n", start)] == listing(folder, for_push=for_push), \
        "regenerate: python -m hf_vanilla.training.layout"
