"""Sharing on the Hub, against the local Hub server (tests/hub_server.py) and the real huggingface_hub client.

``push_run`` / ``hf-vanilla push`` upload a training run in one commit; ``push_to_hub`` (transformers' own,
through our atomic ``save_pretrained``) shares a model alone. What was pushed loads in a fresh process where
hf_vanilla cannot be imported, through ``trust_remote_code``, with bitwise-identical outputs. A refused token,
an upload cut off mid-way and a push killed mid-way leave the repo exactly as it was.
"""

from __future__ import annotations

import functools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import huggingface_hub.lfs
import pytest
import torch
from huggingface_hub import HfApi, ModelCard
from huggingface_hub.errors import HfHubHTTPError
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_vanilla as hv
from hf_vanilla import cli
from hf_vanilla.hub import model_card_text, push_run
from tests.factories import tiny_model, tiny_tokenizer
from tests.hub_fixtures import HubFixture

REPO_ROOT = Path(__file__).resolve().parents[1]
TEXTS = ["the king", "thou queen of the night speak"]

# Files of a training run that are shared: the model and its code, tokenizer, run record, curves and card.
SHARED_RUN_FILES = [
    ".gitattributes", "README.md", "config.json", "configuration_vanilla.py", "curves.png",
    "generation_config.json", "metrics.json", "model.safetensors", "modeling_vanilla.py",
    "positional.py", "run.json", "tokenizer.json", "tokenizer_config.json", "trainer_state.json",
]  # fmt: skip


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real (tiny, 2-step) causal LM training run: model, tokenizer, run.json, metrics, curves, card and
    the things that must stay local (checkpoint-N/, training_args.bin)."""
    from hf_vanilla import train

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
    train.train(
        "clm",
        run_dir,
        data_files=data,
        preset="tiny",
        config={"hidden_size": 32, "intermediate_size": 64},
        vocab_size=300,
        block_size=16,
        batch_size=4,
        max_steps=2,
        save_steps=1,
        save_total_limit=None,
        disable_tqdm=True,
        num_samples=1,
        max_new_tokens=4,
    )
    assert (run_dir / "checkpoint-1").is_dir() and (run_dir / "training_args.bin").is_file()
    return run_dir


def copy_run(run_dir: Path, destination: Path, seed: int | None = None) -> Path:
    """A copy of ``run_dir``; with ``seed``, its weights are perturbed (another checkpoint, same everything else)."""
    shutil.copytree(run_dir, destination, ignore=shutil.ignore_patterns("checkpoint-*"))
    if seed is not None:
        model = hv.VanillaForCausalLM.from_pretrained(destination)
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
        model.save_pretrained(destination)
    return destination


def expected_outputs(model, tokenizer, path: Path, generate: bool = True) -> str:
    """Save what a model computes here (inputs, logits, greedy tokens) for the fresh process to compare with."""
    model.eval()
    encoded = dict(tokenizer(TEXTS, return_tensors="pt", padding=True))
    inputs = dict(encoded)
    if model.config.is_encoder_decoder:
        inputs["decoder_input_ids"] = encoded["input_ids"][:, :3]
    with torch.no_grad():
        expected = {"encoded": encoded, "inputs": inputs, "logits": model(**inputs).logits}
        if generate:
            expected["generated"] = model.generate(**encoded, max_new_tokens=5, do_sample=False)
    torch.save(expected, path)
    return str(path)


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return list(sa) == list(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)


def fixture_env(hub: HubFixture) -> dict[str, str]:
    """The environment the hub_server fixture set up (endpoint, token, HF_HOME and caches), for subprocesses."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    assert (env["HF_ENDPOINT"], env["HF_TOKEN"], env["HF_HOME"]) == (hub.url, hub.token, str(hub.hf_home))
    assert env["HF_HUB_OFFLINE"] == "0" and env["HF_HUB_DISABLE_XET"] == "1"
    return env


LOAD_ELSEWHERE = textwrap.dedent(
    """
    import sys

    sys.modules["hf_vanilla"] = None  # not installed here: config, code and weights must all come from the Hub
    import json

    import torch
    import transformers
    from transformers import AutoTokenizer

    try:
        import hf_vanilla  # noqa: F401
    except ImportError:
        pass
    else:
        raise AssertionError("hf_vanilla is importable")
    for case in json.loads(sys.argv[1]):
        auto = getattr(transformers, case["auto"])
        model = auto.from_pretrained(case["repo"], revision=case["revision"], trust_remote_code=True).eval()
        tokenizer = AutoTokenizer.from_pretrained(case["repo"], revision=case["revision"])
        assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
        expected = torch.load(case["expected"])
        encoded = tokenizer(case["texts"], return_tensors="pt", padding=True)
        for key, value in expected["encoded"].items():
            assert torch.equal(encoded[key], value), key
        with torch.no_grad():
            torch.testing.assert_close(model(**expected["inputs"]).logits, expected["logits"], rtol=0, atol=0)
            if "generated" in expected:
                generated = model.generate(**encoded, max_new_tokens=5, do_sample=False)
                assert torch.equal(generated, expected["generated"]), (generated, expected["generated"])
        print("LOADED", case["repo"], case["revision"], type(model).__name__, type(model).__module__)
    assert not [name for name, module in sys.modules.items() if name.startswith("hf_vanilla") and module]
    print("REMOTE-OK")
    """
)


def load_elsewhere(hub: HubFixture, cases: list[dict], tmp_path: Path) -> str:
    """Load each case in a fresh Python process without hf_vanilla; it asserts exact outputs."""
    result = subprocess.run(
        [sys.executable, "-c", LOAD_ELSEWHERE, json.dumps(cases)],
        capture_output=True,
        text=True,
        env=fixture_env(hub),
        cwd=tmp_path,
        timeout=180,
    )
    assert result.returncode == 0 and "REMOTE-OK" in result.stdout, result.stdout + result.stderr[-4000:]
    return result.stdout


def case(repo: str, revision: str, expected: str, auto: str = "AutoModelForCausalLM") -> dict:
    return {"repo": repo, "revision": revision, "expected": expected, "auto": auto, "texts": TEXTS}


def repo_state(hub: HubFixture, repo_id: str) -> tuple:
    """Everything a failed push must leave unchanged: heads of every branch and the files at each."""
    refs = HfApi().list_repo_refs(repo_id)
    return tuple(
        (branch.name, branch.target_commit, hub.server.files_at(repo_id, branch.name))
        for branch in refs.branches
    )


# --------------------------------------------------------------------------------------------------
# Pushing and loading elsewhere
# --------------------------------------------------------------------------------------------------


def test_push_run_shares_a_training_run_in_one_commit_and_it_loads_without_hf_vanilla(
    hub_server: HubFixture, trained_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api = HfApi()
    repo_id = hub_server.repo_id("tiny-clm")
    assert not api.repo_exists(repo_id)

    commit = push_run(trained_run, repo_id)

    # One commit on top of the repo's initial one, holding the run and none of what stays local.
    assert hub_server.server.commit_count(repo_id) == 2 and hub_server.server.head(repo_id) == commit.oid
    files = hub_server.server.files_at(repo_id)
    assert sorted(files) == SHARED_RUN_FILES
    for name in SHARED_RUN_FILES[2:]:
        assert files[name] == (trained_run / name).read_bytes(), name
    assert (
        json.loads(files["config.json"])["auto_map"]["AutoModelForCausalLM"]
        == "modeling_vanilla.VanillaForCausalLM"
    )
    tree = {entry.path: entry for entry in api.list_repo_tree(repo_id)}
    assert tree["model.safetensors"].lfs is not None  # weights go through LFS, like on the Hub

    # The run's own card, rebuilt to name the repo (title, loading snippet); it parses, metadata complete.
    card = ModelCard(files["README.md"].decode())
    assert card.content != (trained_run / "README.md").read_text()
    assert (
        f"# {repo_id}" in card.text and f'from_pretrained("{repo_id}", trust_remote_code=True)' in card.text
    )
    data = card.data.to_dict()
    assert data["library_name"] == "transformers" and data["pipeline_tag"] == "text-generation"
    assert {"hf_vanilla", "custom_code"} <= set(data["tags"]) and data["license"] == "apache-2.0"
    assert data["model-index"][0]["name"] == repo_id
    assert [m["type"] for m in data["model-index"][0]["results"][0]["metrics"]] == ["perplexity", "accuracy"]
    assert "![Training and validation loss](curves.png)" in card.text

    # Another checkpoint to a new branch through the CLI, saved without its code or auto_map (as through a
    # wrapper that bypasses save_pretrained): the push restores both. main does not move.
    second = copy_run(trained_run, tmp_path / "second", seed=1)
    config = json.loads((second / "config.json").read_text())
    del config["auto_map"]
    (second / "config.json").write_text(json.dumps(config))
    for code in second.glob("*.py"):
        code.unlink()
    argv = ["push", str(second), repo_id, "--revision", "v2", "--commit-message", "Second checkpoint"]
    assert cli.main(argv) == 0
    assert f"{repo_id}@v2" in capsys.readouterr().out
    assert hub_server.server.head(repo_id) == commit.oid
    v2 = hub_server.server.files_at(repo_id, "v2")
    assert sorted(v2) == SHARED_RUN_FILES and v2["model.safetensors"] != files["model.safetensors"]
    assert json.loads(v2["config.json"])["auto_map"] == json.loads(files["config.json"])["auto_map"]
    assert [c.title for c in api.list_repo_commits(repo_id, revision="v2")][:1] == ["Second checkpoint"]

    tokenizer = AutoTokenizer.from_pretrained(trained_run)
    first_out = expected_outputs(
        hv.VanillaForCausalLM.from_pretrained(trained_run), tokenizer, tmp_path / "1.pt"
    )
    second_out = expected_outputs(hv.VanillaForCausalLM.from_pretrained(second), tokenizer, tmp_path / "2.pt")
    out = load_elsewhere(
        hub_server,
        [
            case(repo_id, "main", first_out),
            case(repo_id, commit.oid, first_out),
            case(repo_id, "v2", second_out),
        ],
        tmp_path,
    )
    assert out.count("VanillaForCausalLM transformers_modules.") == 3


def test_push_to_hub_on_models_and_tokenizers_goes_through_the_atomic_save(
    hub_server: HubFixture, tmp_path: Path
) -> None:
    api = HfApi()
    repo_id = hub_server.repo_id("tiny-seq2seq")
    first, second = (
        tiny_model("encoder-decoder", "relative", seed=0),
        tiny_model("encoder-decoder", "relative", seed=1),
    )
    tokenizer = tiny_tokenizer("encoder-decoder")

    first.push_to_hub(repo_id)
    tokenizer.push_to_hub(repo_id)
    second.push_to_hub(repo_id, revision="dev", commit_message="dev weights")  # creates the branch
    tokenizer.push_to_hub(repo_id, revision="dev")
    files = api.list_repo_files(repo_id, revision="dev")
    for name in (
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "modeling_vanilla.py",
        "configuration_vanilla.py",
        "positional.py",
        "tokenizer.json",
        "tokenizer_config.json",
        "README.md",
    ):
        assert name in files, name
    assert json.loads(hub_server.server.files_at(repo_id)["config.json"])["auto_map"]["AutoModelForSeq2SeqLM"]

    # save_pretrained(push_to_hub=True) names the repo after the folder (not the staging folder it writes
    # into), keeps the folder's other files, and uploads exactly what this save wrote.
    local = tmp_path / "tiny-decoder"
    local.mkdir()
    (local / "notes.txt").write_text("stays local\n")
    decoder = tiny_model("decoder", "rope", seed=2)
    decoder.save_pretrained(local, push_to_hub=True)
    decoder_repo = hub_server.repo_id("tiny-decoder")
    assert (local / "notes.txt").is_file() and not list(tmp_path.glob(".tiny-decoder.saving-*"))
    uploaded = set(api.list_repo_files(decoder_repo)) - {".gitattributes"}
    assert uploaded == {p.name for p in local.iterdir()} - {"notes.txt"}
    decoder_tokenizer = tiny_tokenizer("decoder")
    decoder_tokenizer.push_to_hub(decoder_repo)

    out = load_elsewhere(
        hub_server,
        [
            case(
                repo_id,
                "main",
                expected_outputs(first, tokenizer, tmp_path / "1.pt"),
                "AutoModelForSeq2SeqLM",
            ),
            case(
                repo_id,
                "dev",
                expected_outputs(second, tokenizer, tmp_path / "2.pt"),
                "AutoModelForSeq2SeqLM",
            ),
            case(decoder_repo, "main", expected_outputs(decoder, decoder_tokenizer, tmp_path / "3.pt")),
        ],
        tmp_path,
    )
    assert out.count("transformers_modules.") == 3


# --------------------------------------------------------------------------------------------------
# Failures change nothing
# --------------------------------------------------------------------------------------------------


def test_a_refused_token_is_a_clear_error_and_creates_nothing(
    hub_server: HubFixture, trained_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api = HfApi()
    repo_id = hub_server.repo_id("never-created")
    with pytest.raises(
        PermissionError, match=r"refused the push to .*401: the token is invalid or expired.*HF_TOKEN"
    ):
        push_run(trained_run, repo_id, token=hub_server.bad_token)
    assert cli.main(["push", str(trained_run), repo_id, "--token", hub_server.bad_token]) == 1
    err = capsys.readouterr().err
    assert err.startswith("hf-vanilla push: The Hub at") and "401" in err and "Traceback" not in err
    assert not api.repo_exists(repo_id)

    # A read-only token on an existing repo: refused at the commit, which never happens.
    existing = api.create_repo("read-only").repo_id
    before = repo_state(hub_server, existing)
    with pytest.raises(PermissionError, match="403: the token cannot write there"):
        push_run(trained_run, existing, token=hub_server.read_token)
    assert repo_state(hub_server, existing) == before

    # transformers' push creates the repo before writing anything: a bad token leaves no repo, no folder.
    model = tiny_model("decoder")
    with pytest.raises(HfHubHTTPError) as refused:
        model.push_to_hub(repo_id, token=hub_server.bad_token)
    assert refused.value.response.status_code == 401
    with pytest.raises(HfHubHTTPError):
        model.save_pretrained(tmp_path / "never-created", push_to_hub=True, token=hub_server.bad_token)
    assert not api.repo_exists(repo_id) and not (tmp_path / "never-created").exists()


def test_loading_a_missing_repo_or_revision_fails_clearly(hub_server: HubFixture) -> None:
    missing = hub_server.repo_id("does-not-exist")
    with pytest.raises(OSError, match=f"{missing} is not a local folder and is not a valid model identifier"):
        AutoModelForCausalLM.from_pretrained(missing, trust_remote_code=True)
    with pytest.raises(OSError, match=missing):
        AutoTokenizer.from_pretrained(missing)
    tiny_model("decoder").push_to_hub(hub_server.repo_id("present"))
    with pytest.raises(OSError, match="no-such-branch"):
        AutoModelForCausalLM.from_pretrained(
            hub_server.repo_id("present"), revision="no-such-branch", trust_remote_code=True
        )


def test_an_upload_cut_off_midway_commits_nothing_and_keeps_the_local_save(
    hub_server: HubFixture,
    trained_run: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    repo_id = hub_server.repo_id("cut-off")
    push_run(trained_run, repo_id)
    push_run(copy_run(trained_run, tmp_path / "dev"), repo_id, revision="dev")
    before = repo_state(hub_server, repo_id)
    update = copy_run(trained_run, tmp_path / "update", seed=3)

    # Every LFS upload is cut off halfway; the client gives up at once instead of retrying for 20 s.
    hub_server.server.cut_off_next_lfs_uploads(100)
    retrying = huggingface_hub.lfs.http_backoff
    monkeypatch.setattr(huggingface_hub.lfs, "http_backoff", functools.partial(retrying, max_retries=0))
    with pytest.raises(RuntimeError, match="Error while uploading"):
        push_run(update, repo_id, revision="dev")
    assert cli.main(["push", str(update), repo_id, "--revision", "dev"]) == 1
    err = capsys.readouterr().err
    assert (
        "hf-vanilla push: Error while uploading" in err
        and "Nothing was committed; run the push again." in err
    )
    assert repo_state(hub_server, repo_id) == before

    # transformers' push through our atomic save: the upload fails after the swap, so the new checkpoint is
    # on disk (complete and loadable) while the repo has not moved.
    model = tiny_model("decoder", seed=4)
    local = tmp_path / "local-save"
    with pytest.raises(RuntimeError, match="Error while uploading"):
        model.save_pretrained(local, push_to_hub=True, repo_id=repo_id)
    reloaded = hv.VanillaForCausalLM.from_pretrained(local)
    assert same_weights(reloaded, model)
    assert repo_state(hub_server, repo_id) == before

    # Once the Hub answers again, the same push goes through, whole.
    hub_server.server.cut_off_next_lfs_uploads(0)
    monkeypatch.setattr(huggingface_hub.lfs, "http_backoff", retrying)
    push_run(update, repo_id, revision="dev")
    assert (
        hub_server.server.files_at(repo_id, "dev")["model.safetensors"]
        == (update / "model.safetensors").read_bytes()
    )


def test_a_push_killed_midway_leaves_nothing_half_committed(
    hub_server: HubFixture, trained_run: Path, tmp_path: Path
) -> None:
    repo_id = hub_server.repo_id("killed")
    push_run(trained_run, repo_id)
    before = repo_state(hub_server, repo_id)
    update = copy_run(trained_run, tmp_path / "update", seed=5)
    requests_before = len(hub_server.server.requests)

    # The storage origin drops every LFS upload halfway; the client backs off and retries, and is killed
    # while it waits, as by Ctrl-C, a lost SSH session or the OOM killer.
    hub_server.server.cut_off_next_lfs_uploads(100)
    log = (tmp_path / "push.log").open("w")
    push = subprocess.Popen(
        [sys.executable, "-m", "hf_vanilla.cli", "push", str(update), repo_id],
        env=fixture_env(hub_server),
        cwd=REPO_ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while not any(
            r.origin == "storage" and r.status == "aborted"
            for r in hub_server.server.requests[requests_before:]
        ):
            assert push.poll() is None, (tmp_path / "push.log").read_text()
            assert time.monotonic() < deadline, "the push never reached the LFS upload"
            time.sleep(0.02)
    finally:
        push.send_signal(signal.SIGKILL)
        push.wait()
        log.close()
    hub_server.server.cut_off_next_lfs_uploads(0)

    assert repo_state(hub_server, repo_id) == before
    assert not hub_server.server.pending_upload_files()
    assert not any(
        r.method == "POST" and "/commit/" in r.path for r in hub_server.server.requests[requests_before:]
    )
    push_run(update, repo_id)  # the rerun finishes the job
    assert (
        hub_server.server.files_at(repo_id)["model.safetensors"]
        == (update / "model.safetensors").read_bytes()
    )


# --------------------------------------------------------------------------------------------------
# What a push uploads
# --------------------------------------------------------------------------------------------------


def test_a_new_push_replaces_the_whole_checkpoint(hub_server: HubFixture, tmp_path: Path) -> None:
    repo_id = hub_server.repo_id("reshard")
    sharded, single = tmp_path / "sharded", tmp_path / "single"
    tiny_model("decoder", seed=0).save_pretrained(sharded, max_shard_size="40KB")
    assert len(list(sharded.glob("model-*.safetensors"))) > 1
    push_run(sharded, repo_id)
    model = tiny_model("decoder", seed=1)
    model.save_pretrained(single)
    push_run(single, repo_id)
    # The old shards and their index went in the same commit: nothing can load the old weights by mistake.
    assert [f for f in HfApi().list_repo_files(repo_id) if "safetensors" in f] == ["model.safetensors"]
    assert hub_server.server.commit_count(repo_id) == 3
    reloaded = AutoModelForCausalLM.from_pretrained(repo_id)
    assert type(reloaded) is hv.VanillaForCausalLM  # hf_vanilla imported: its classes, no remote code needed
    assert same_weights(reloaded, model)


def test_model_cards_edited_kept_rebuilt_or_minimal(
    hub_server: HubFixture, trained_run: Path, tmp_path: Path
) -> None:
    run = copy_run(trained_run, tmp_path / "edited")
    edited = (run / "README.md").read_text() + "\nHand-written notes.\n"
    (run / "README.md").write_text(edited)
    assert model_card_text(run, "someone/edited") == edited  # an edited card is never replaced silently
    rebuilt = model_card_text(run, "someone/edited", rebuild_card=True)
    assert "Hand-written notes" not in rebuilt and 'from_pretrained("someone/edited"' in rebuilt

    # A bare save_pretrained folder: no run files, no card. A minimal valid card names the repo; a bare
    # repo name lands in the token's namespace, and the card says so.
    bare = tmp_path / "bare"
    tiny_model("encoder").save_pretrained(bare)
    tiny_tokenizer("encoder").save_pretrained(bare)
    push_run(bare, "bare-encoder", private=True)
    repo_id = hub_server.repo_id("bare-encoder")
    assert HfApi().repo_info(repo_id).private is True
    card = ModelCard(hub_server.server.files_at(repo_id)["README.md"].decode())
    assert card.data.library_name == "transformers" and "custom_code" in card.data.tags
    assert f'AutoModelForMaskedLM.from_pretrained("{repo_id}", trust_remote_code=True)' in card.text

    # Refused before anything is created: a card whose metadata does not parse, a folder without weights,
    # a private push to a public repo.
    broken = copy_run(trained_run, tmp_path / "broken")
    (broken / "README.md").write_text("---\nlicense: [unclosed\n---\n# card\n")
    with pytest.raises(ValueError, match="model card"):
        push_run(broken, hub_server.repo_id("broken"))
    (broken / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="no safetensors weights"):
        push_run(broken, hub_server.repo_id("broken"))
    assert not HfApi().repo_exists(hub_server.repo_id("broken"))
    public = HfApi().create_repo("public").repo_id
    with pytest.raises(PermissionError, match="public"):
        push_run(bare, public, private=True)
    assert hub_server.server.commit_count(public) == 1
