"""What the push tests share: one real (tiny) training run for the session, copies of it, and a fake ``HfApi``
over in-memory repos (tests/test_hub.py, tests/attacks/test_publish.py)."""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from huggingface_hub import CommitOperationDelete

import hf_vanilla as hv
from tests.hub_server import USER, Repo


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real (tiny, 2-step) causal LM training run: model, tokenizer, run.json, metrics, curves, card and
    the things that must stay local (checkpoint-N/, training_args.bin, trainer_state.json)."""
    from hf_vanilla.training import train

    root = tmp_path_factory.mktemp("hub-run")
    words = "the king queen crown sword castle night day love war peace speak hear see thou thee".split()
    rng = random.Random(0)
    data = []
    for split, rows in (("train", 200), ("validation", 20), ("test", 20)):
        path = root / f"{split}.txt"
        path.write_text(
            "".join(" ".join(rng.choices(words, k=rng.randint(4, 12))) + ".\n\n" for _ in range(rows))
        )
        data.append(f"{split}={path}")
    run_dir = root / "tiny-clm"
    train(
        "clm", run_dir, data_files=data, preset="tiny", config={"hidden_size": 32, "intermediate_size": 64},
        vocab_size=300, block_size=16, batch_size=4, max_steps=2, save_steps=1, save_total_limit=None,
        disable_tqdm=True, num_samples=1, max_new_tokens=4,
    )  # fmt: skip
    assert (run_dir / "checkpoint-1").is_dir() and (run_dir / "training_args.bin").is_file()
    return run_dir


def copy_run(run_dir: Path, destination: Path, seed: int | None = None) -> Path:
    """A copy of ``run_dir``; with ``seed``, its weights are perturbed (another checkpoint, same everything else)."""
    shutil.copytree(run_dir, destination)
    if seed is not None:
        model = hv.VanillaForCausalLM.from_pretrained(destination)
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
        model.save_pretrained(destination)
    return destination


class FakeHfApi:
    """The HfApi calls push_run makes, over in-memory repos (branches of commits, as tests/hub_server.py keeps
    them): enough to check what a push commits; how the client speaks HTTP is the end-to-end test's job."""

    endpoint = "https://hub.invalid"

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.fail_uploads = False  # as the client does when an upload is cut off: raise before committing

    def create_repo(self, repo_id: str, *, private: bool | None = None, exist_ok: bool = False) -> SimpleNamespace:
        repo_id = repo_id if "/" in repo_id else f"{USER}/{repo_id}"
        if repo_id not in self.repos:
            self.repos[repo_id] = Repo(private=bool(private))
            self.repos[repo_id].commit("main", {".gitattributes": b"*.safetensors filter=lfs\n"}, "initial commit")
        assert exist_ok
        return SimpleNamespace(repo_id=repo_id)

    def repo_info(self, repo_id: str, revision: str | None = None) -> SimpleNamespace:
        repo = self.repos[repo_id]
        return SimpleNamespace(sha=repo.resolve(revision or "main"), private=repo.private)

    def create_branch(self, repo_id: str, *, branch: str, exist_ok: bool = False) -> None:
        self.repos[repo_id].branches.setdefault(branch, self.repos[repo_id].branches["main"])

    def list_repo_files(self, repo_id: str, revision: str | None = None) -> list[str]:
        repo = self.repos[repo_id]
        return sorted(repo.commits[repo.resolve(revision or "main")])

    def create_commit(self, repo_id: str, *, operations, commit_message, revision=None, parent_commit=None):
        repo, branch = self.repos[repo_id], revision or "main"
        assert parent_commit == repo.branches[branch], "a push must commit on top of the head it listed"
        files = dict(repo.commits[parent_commit])
        for operation in operations:
            if isinstance(operation, CommitOperationDelete):
                del files[operation.path_in_repo]
            else:
                with operation.as_file() as handle:
                    files[operation.path_in_repo] = handle.read()
        if self.fail_uploads:
            raise RuntimeError("Error while uploading 'model.safetensors' to the Hub.")
        oid = repo.commit(branch, files, commit_message)
        return SimpleNamespace(oid=oid, commit_url=f"{self.endpoint}/{repo_id}/commit/{oid}",
                               repo_url=SimpleNamespace(repo_id=repo_id))

    def files(self, repo_id: str, revision: str = "main") -> dict[str, bytes]:
        repo = self.repos[repo_id]
        return repo.commits[repo.resolve(revision)]
