"""Sharing on the Hub.

``push_run`` is checked against a small fake ``HfApi`` (what one push commits, what stays local, what a failure
leaves), and once end to end: ``hf-vanilla push`` and loading through the real huggingface_hub client and
transformers against a local Hub (tests/hub_server.py), in processes where hf_vanilla cannot be imported and
stdin is closed, with bit-identical outputs and no "run the custom code? [y/N]" prompt.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from transformers import AutoTokenizer

import hf_vanilla as hv
from hf_vanilla import cli
from hf_vanilla.checkpoint import code_files
from hf_vanilla.files.output_folder import ChangedFileError
from hf_vanilla.publishing.card import build_model_card
from hf_vanilla.publishing.hub import model_card_text, plan_upload, push_run
from tests.factories import tiny_model, tiny_tokenizer
from tests.hub_fixtures import FakeHfApi, copy_run
from tests.hub_server import TOKEN, USER, LocalHub

REPO_ROOT = Path(__file__).resolve().parents[1]
TEXTS = ["the king", "thou queen of the night speak"]
CODE = [path.name for path in code_files()]  # the travelling files, as the package declares them
# What a push of a training run uploads: the model, its code and tokenizer, the run files and the card.
SHARED_RUN_FILES = sorted([
    "README.md", "config.json", "curves.png", "generation_config.json", "metrics.json", "model.safetensors",
    "run.json", "tokenizer.json", "tokenizer_config.json", *CODE,
])  # fmt: skip
# Things people keep next to a run that must never reach a (public by default) repo.
SECRETS = {
    "token": "hf_aaaaSECRETtoken",
    "hf_token.txt": "hf_bbbbSECRETtoken",
    "credentials.json": '{"aws_secret_access_key": "SECRETkey"}',
    "id_rsa": "-----BEGIN OPENSSH PRIVATE KEY-----\nSECRET\n",
    ".env": "WANDB_API_KEY=SECRETwandb\n",
}


# --------------------------------------------------------------------------------------------------
# What a push uploads (fake HfApi)
# --------------------------------------------------------------------------------------------------


def test_a_push_uploads_only_what_loading_needs_and_names_what_it_left(
    trained_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = copy_run(trained_run, tmp_path / "run")
    for name, secret in SECRETS.items():
        (run / name).write_text(secret)
    (run / "notes.txt").write_text("how this run went\n")
    (run / "extra").mkdir()
    (run / "extra" / "eval.jsonl").write_text('{"ok": 1}\n')
    api = FakeHfApi()

    result = push_run(run, "tester/tiny-clm", api=api)

    files = api.files("tester/tiny-clm")
    assert sorted(files) == [".gitattributes", *SHARED_RUN_FILES] == [".gitattributes", *result.uploaded]
    assert files["model.safetensors"] == (run / "model.safetensors").read_bytes()
    assert not [name for name, content in files.items() if b"SECRET" in content]
    assert result.skipped == sorted([
        *SECRETS, ".hf_vanilla.json", "checkpoint-1/", "checkpoint-2/", "extra/", "notes.txt", "trainer_state.json",
        "training_args.bin",
    ])  # fmt: skip
    assert len(api.repos["tester/tiny-clm"].commits) == 2  # the repo's initial commit and ONE push

    # Anything else goes up only when named: a file or a folder; never a pickle, nothing outside the folder.
    monkeypatch.setattr("hf_vanilla.publishing.hub.HfApi", lambda token=None: api)
    assert cli.main(["push", str(run), "tester/tiny-clm", "--include", "notes.txt", "--include", "extra"]) == 0
    out = capsys.readouterr().out
    assert "left local" in out and "id_rsa" in out and "notes.txt" not in out.split("left local")[1]
    files = api.files("tester/tiny-clm")
    assert files["notes.txt"] == b"how this run went\n" and files["extra/eval.jsonl"] == b'{"ok": 1}\n'
    assert not [name for name, content in files.items() if b"SECRET" in content]
    with pytest.raises(ValueError, match=r"pickled files \(training_args.bin\)"):
        plan_upload(run, include=["training_args.bin"])
    with pytest.raises(ValueError, match="pickled files"):
        plan_upload(run, include=["checkpoint-1"])
    with pytest.raises(ValueError, match="not a file or folder inside"):
        plan_upload(run, include=["../run/../.."])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        plan_upload(run, include=["no-such-file"])


def test_a_push_restores_code_and_auto_map_and_replaces_the_whole_checkpoint(tmp_path: Path) -> None:
    api = FakeHfApi()
    sharded, single = tmp_path / "sharded", tmp_path / "single"
    tiny_model("decoder", seed=0).save_pretrained(sharded, max_shard_size="40KB")
    assert len(list(sharded.glob("model-*.safetensors"))) > 1
    push_run(sharded, "reshard", api=api)  # a bare name lands in the token's namespace

    # Another checkpoint saved without code or auto_map (through a wrapper), to a new branch: main stays.
    tiny_model("decoder", seed=1).save_pretrained(single)
    config = json.loads((single / "config.json").read_text())
    del config["auto_map"]
    (single / "config.json").write_text(json.dumps(config))
    for code in single.glob("*.py"):
        code.unlink()
    main_head = api.repos["tester/reshard"].branches["main"]
    push_run(single, "tester/reshard", revision="v2", api=api)
    assert api.repos["tester/reshard"].branches["main"] == main_head
    v2 = api.files("tester/reshard", "v2")
    assert json.loads(v2["config.json"])["auto_map"]["AutoModelForCausalLM"] == "modeling_vanilla.VanillaForCausalLM"
    assert all(v2[name] == (REPO_ROOT / "hf_vanilla" / name).read_bytes() for name in CODE)
    # The old shards and their index went in the same commit: nothing can load the old weights by mistake.
    assert [name for name in v2 if "safetensors" in name] == ["model.safetensors"]


def test_a_failed_upload_commits_nothing_and_says_so(
    trained_run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    api = FakeHfApi()
    push_run(trained_run, "tester/cut-off", api=api)
    before = dict(api.repos["tester/cut-off"].branches)
    api.fail_uploads = True
    monkeypatch.setattr("hf_vanilla.publishing.hub.HfApi", lambda token=None: api)
    assert cli.main(["push", str(trained_run), "tester/cut-off"]) == 2
    err = capsys.readouterr().err
    assert "hf-vanilla push: Error while uploading" in err and "Nothing was committed; run the push again." in err
    assert api.repos["tester/cut-off"].branches == before


def test_a_run_stopped_by_ctrl_c_is_refused_for_how_it_ended_not_for_its_missing_model(
    trained_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C during training leaves checkpoints, the tokenizer and run.json (interrupted) but no model yet: the
    push names the interruption and both ways on, as docs/hub.md documents, before any request."""
    run = copy_run(trained_run, tmp_path / "stopped")
    for name in ("config.json", "model.safetensors", "generation_config.json", "metrics.json", "README.md"):
        (run / name).unlink()
    record = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**record, "status": "interrupted", "interrupted_at_step": 1}))
    assert cli.main(["push", str(run), "tester/stopped"]) == 2
    err = capsys.readouterr().err
    assert "run.json says the run was interrupted at step 1 before it finished" in err
    assert "--resume" in err and "--allow-incomplete" in err and "no config.json" not in err
    assert cli.main(["push", str(run), "tester/stopped", "--allow-incomplete"]) == 2
    err = capsys.readouterr().err
    assert "without its final model yet" in err and "to train on and finish it, run the same command with --resume" in err


def test_model_cards_edited_kept_rebuilt_or_from_the_one_template(trained_run: Path, tmp_path: Path) -> None:
    run = copy_run(trained_run, tmp_path / "edited")
    edited = str(build_model_card(run, model_id="someone/edited", public=True)) + "\nHand-written notes: `/api/x`.\n"
    (run / "README.md").write_text(edited)
    assert model_card_text(run, "someone/edited") == edited  # an edited card is never replaced silently
    rebuilt = model_card_text(run, "someone/edited", rebuild_card=True)
    assert "Hand-written notes" not in rebuilt and 'from_pretrained("someone/edited", trust_remote_code=True)' in rebuilt

    # A bare save_pretrained folder: no run files, no card. The package's template without the training
    # sections; a bare repo name lands in the token's namespace, and the card says so.
    api = FakeHfApi()
    bare = tmp_path / "bare"
    tiny_model("encoder").save_pretrained(bare)
    tiny_tokenizer("encoder").save_pretrained(bare)
    push_run(bare, "bare-encoder", private=True, api=api)
    assert api.repos["tester/bare-encoder"].private
    card = ModelCard(api.files("tester/bare-encoder")["README.md"].decode())
    assert card.data.library_name == "transformers" and "custom_code" in card.data.tags
    assert 'AutoModelForMaskedLM.from_pretrained("tester/bare-encoder", trust_remote_code=True)' in card.text
    assert "## Architecture" in card.text and "## Training data" not in card.text and "## Citation" in card.text

    # Refused before anything is created: a card whose metadata does not parse, a folder without weights,
    # a private push to a public repo.
    broken = copy_run(trained_run, tmp_path / "broken")
    (broken / "README.md").write_text("---\nlicense: [unclosed\n---\n# card\n")
    with pytest.raises(ChangedFileError, match="README.md changed since the run wrote it"):
        push_run(broken, "tester/broken", api=api)  # edited by hand: refused unless told (issue 41.2)
    with pytest.raises(ValueError, match="model card"):
        push_run(broken, "tester/broken", api=api, allow_changed=True)
    (broken / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="no safetensors weights"):
        push_run(broken, "tester/broken", api=api, allow_changed=True)
    assert "tester/broken" not in api.repos
    api.create_repo("tester/public", exist_ok=True)
    with pytest.raises(PermissionError, match="public"):
        push_run(bare, "tester/public", private=True, api=api)
    assert len(api.repos["tester/public"].commits) == 1


def test_the_one_card_template_ships_in_the_wheel(tmp_path: Path) -> None:
    """An installed wheel renders the same card as the repository: the template is package data."""
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path),
         str(REPO_ROOT)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = tmp_path.glob("hf_vanilla-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read("hf_vanilla/publishing/model_card.md") == (
            REPO_ROOT / "hf_vanilla" / "publishing" / "model_card.md").read_bytes()
        archive.extractall(site)
    render = textwrap.dedent(
        """
        import sys
        from hf_vanilla.publishing import card
        assert card.__file__.startswith(sys.argv[1]), card.__file__
        text = str(card.build_saved_model_card({"architecture": "decoder", "hidden_size": 8,
                   "auto_map": {"AutoModelForCausalLM": "modeling_vanilla.VanillaForCausalLM"}}, "me/m"))
        print(text)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    result = subprocess.run([sys.executable, "-c", render, str(site)], capture_output=True, text=True, env=env,
                            cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "## Architecture" in result.stdout and "@inproceedings{vaswani2017attention" in result.stdout


# --------------------------------------------------------------------------------------------------
# End to end: the real client against a local Hub, loading where hf_vanilla is absent
# --------------------------------------------------------------------------------------------------

LOAD_ELSEWHERE = textwrap.dedent(
    """
    import json, sys

    sys.modules["hf_vanilla"] = None  # not installed here: config, code and weights must all come from the repo
    import torch
    import transformers
    from transformers import AutoTokenizer

    for case in json.loads(sys.argv[1]):
        auto = getattr(transformers, case["auto"])
        model = auto.from_pretrained(case["path"], trust_remote_code=True).eval()
        tokenizer = AutoTokenizer.from_pretrained(case["path"], trust_remote_code=True)
        assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
        expected = torch.load(case["expected"])
        encoded = tokenizer(case["texts"], return_tensors="pt", padding=True)
        for key, value in expected["encoded"].items():
            assert torch.equal(encoded[key], value), key
        with torch.no_grad():
            torch.testing.assert_close(model(**encoded).logits, expected["logits"], rtol=0, atol=0)
            generated = model.generate(**encoded, max_new_tokens=5, do_sample=False)
        assert torch.equal(generated, expected["generated"]), (generated, expected["generated"])
        print("LOADED", case["path"])
    exec(sys.argv[2])  # the pushed card's own loading snippet
    assert not [name for name, module in sys.modules.items() if name.startswith("hf_vanilla") and module]
    print("REMOTE-OK")
    """
)


def hub_env(hub: LocalHub, home: Path, token: str = TOKEN) -> dict[str, str]:
    """A client process pointed at the local Hub: set before huggingface_hub is imported, so nothing is patched."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "HUGGING"))}
    return {**env, "HF_ENDPOINT": hub.url, "HF_TOKEN": token, "HF_HOME": str(home), "HF_HUB_DISABLE_XET": "1",
            "HF_HUB_OFFLINE": "0", "HF_HUB_DISABLE_TELEMETRY": "1"}  # fmt: skip


def expected_outputs(folder: Path, path: Path) -> str:
    """What the saved model computes here (tokens, logits, greedy continuation), for the fresh process."""
    model = hv.VanillaForCausalLM.from_pretrained(folder).eval()
    encoded = dict(AutoTokenizer.from_pretrained(folder)(TEXTS, return_tensors="pt", padding=True))
    with torch.no_grad():
        logits = model(**encoded).logits
        generated = model.generate(**encoded, max_new_tokens=5, do_sample=False)
    torch.save({"encoded": encoded, "logits": logits, "generated": generated}, path)
    return str(path)


def test_push_and_load_elsewhere_through_the_real_client_without_a_prompt(
    trained_run: Path, tmp_path: Path
) -> None:
    run = copy_run(trained_run, tmp_path / "tiny-clm")
    (run / "token").write_text(SECRETS["token"])
    push = [sys.executable, "-m", "hf_vanilla.cli", "push", str(run), f"{USER}/tiny-clm"]
    with LocalHub() as hub:
        refused = subprocess.run(push, capture_output=True, text=True, env=hub_env(hub, tmp_path / "h", "hf_bad"),
                                 cwd=REPO_ROOT, timeout=300)  # fmt: skip
        assert refused.returncode == 2 and "401" in refused.stderr and "Traceback" not in refused.stderr
        assert not hub.repos  # a refused token creates nothing

        pushed = subprocess.run(push, capture_output=True, text=True, env=hub_env(hub, tmp_path / "h"),
                                cwd=REPO_ROOT, timeout=300)  # fmt: skip
        assert pushed.returncode == 0, pushed.stderr[-3000:]
        assert "left local" in pushed.stdout and "token" in pushed.stdout
        said = (pushed.stdout + pushed.stderr).splitlines()
        assert sum("not needed to load" in line for line in said) == 1, said  # the skip list once, not twice
        files = hub.files_at(f"{USER}/tiny-clm")
        assert sorted(files) == [".gitattributes", *SHARED_RUN_FILES] and len(hub.repos[f"{USER}/tiny-clm"].commits) == 2
        assert files["model.safetensors"] == (run / "model.safetensors").read_bytes()

        # The same folder again, to a new branch with a message: no file changed, so the client made no commit
        # (and dropped the message); the push says so instead of "pushed N files".
        head = hub.heads(f"{USER}/tiny-clm")["main"]
        again = subprocess.run([*push, "--revision", "v2", "--commit-message", "longer run"], capture_output=True,
                               text=True, env=hub_env(hub, tmp_path / "h"), cwd=REPO_ROOT, timeout=300)  # fmt: skip
        assert again.returncode == 0, again.stderr[-3000:]
        said = (f"nothing changed: {USER}/tiny-clm@v2 already holds these {len(SHARED_RUN_FILES)} files of {run} "
                f'since commit {head}; no new commit made (the commit message "longer run" was not used)\n')
        assert again.stdout.startswith(said), again.stdout
        assert hub.heads(f"{USER}/tiny-clm") == {"main": head, "v2": head}

        card = ModelCard(files["README.md"].decode())
        (snippet,) = re.findall(r"```python\n(.*?)```", card.text, flags=re.DOTALL)
        expected = expected_outputs(run, tmp_path / "expected.pt")
        cases = [
            {"path": f"{USER}/tiny-clm", "auto": "AutoModelForCausalLM", "expected": expected, "texts": TEXTS},
            {"path": str(run), "auto": "AutoModelForCausalLM", "expected": expected, "texts": TEXTS},
        ]
        env = {key: value for key, value in hub_env(hub, tmp_path / "h").items() if key != "PYTHONPATH"}
        loaded = subprocess.run([sys.executable, "-c", LOAD_ELSEWHERE, json.dumps(cases), snippet], env=env,
                                stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd=tmp_path, timeout=300)  # fmt: skip
        assert hub.unknown == []  # every request the client made is one this Hub serves
    output = loaded.stdout + loaded.stderr
    assert loaded.returncode == 0 and "REMOTE-OK" in loaded.stdout, output[-4000:]
    assert loaded.stdout.count("LOADED") == 2
    assert "Do you wish to run the custom code" not in output and "custom code" not in output
