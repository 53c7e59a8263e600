"""Run inside a venv holding `pip install hf_vanilla` and no extras: the model core loads, converts and generates,
and the layers that need an extra say which one.

    python scripts/base_install_check.py      (scripts/base_install_check.sh builds the venv and runs it)
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tempfile

import torch
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

import hf_vanilla
from hf_vanilla.convert import convert_checkpoint
from hf_vanilla.extras import EXTRA_MODULES, MissingExtraError


def main() -> int:
    present = [name for name in sorted(set().union(*EXTRA_MODULES.values())) if _installed(name)]
    assert not present, f"extras' distributions installed in the base venv: {present}"
    torch.manual_seed(0)
    native = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=32, bos_token_id=0, eos_token_id=0)).eval()
    with tempfile.TemporaryDirectory() as scratch:
        native.save_pretrained(f"{scratch}/gpt2")
        report = convert_checkpoint(f"{scratch}/gpt2", f"{scratch}/vanilla")
        model = AutoModelForCausalLM.from_pretrained(f"{scratch}/vanilla").eval()
        assert type(model).__name__ == "VanillaForCausalLM", type(model)
        prompt = torch.tensor([[1, 2, 3, 4]])
        ours = model.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)
        theirs = native.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)
        assert torch.equal(ours, theirs), (ours, theirs)
    print(f"hf_vanilla {hf_vanilla.__version__}: {report.source_class} -> {report.target_class}, "
          f"8 greedy tokens equal to GPT-2's: {ours[0, 4:].tolist()}")
    for layer in ("hf_vanilla.training", "hf_vanilla.corpora", "hf_vanilla.tools.viz"):
        try:
            __import__(layer)
        except MissingExtraError as error:
            print(f"{layer}: {error}")
        else:
            raise AssertionError(f"{layer} imported without its extra")
    help_run = subprocess.run(["hf-vanilla", "train", "--help"], capture_output=True, text=True)
    print(f"hf-vanilla train --help: exit {help_run.returncode}, {help_run.stderr.strip()}")
    assert help_run.returncode == 1 and len(help_run.stderr.strip().splitlines()) == 1
    return 0


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
