"""Attacks on what a push publishes: files named like a checkpoint's that are not part of it, links out of the
folder, local paths and private text in the run files and card, markdown that breaks out of the card's blocks,
unfinished runs, and a Hub that never answers."""

from __future__ import annotations

import json
import socket
import struct
import threading
import zlib
from pathlib import Path

import huggingface_hub
import pytest
import torch
from huggingface_hub import HfApi, ModelCard
from huggingface_hub.utils import get_session
from safetensors.torch import save_file

from hf_vanilla import cli
from hf_vanilla.checkpoint import code_files
from hf_vanilla.files.output_folder import ChangedFileError, OutputFolder
from hf_vanilla.publishing.card import build_model_card
from hf_vanilla.publishing.hub import model_card_text, plan_upload, push_run
from hf_vanilla.publishing.secrets import SecretInUploadError
from hf_vanilla.tasks import get_task
from tests.factories import tiny_model, tiny_tokenizer
from tests.hub_fixtures import FakeHfApi, copy_run
from tests.hub_server import TOKEN, LocalHub

SAVED = sorted(["config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                *(path.name for path in code_files())])


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model and its tokenizer as ``save_pretrained`` writes them (the tokenizer is tokenizer.json alone)."""
    folder = tmp_path_factory.mktemp("saved") / "model"
    tiny_model("decoder").save_pretrained(folder)
    tiny_tokenizer("decoder").save_pretrained(folder)
    assert sorted(p.name for p in folder.iterdir()) == SAVED
    return folder


def copy_of(saved: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    for path in saved.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    return folder


def secret_weights(path: Path) -> None:
    save_file({"secret": torch.arange(4.0)}, path)


def test_files_named_like_checkpoint_files_that_it_is_not_made_of_stay_local(saved: Path, tmp_path: Path) -> None:
    folder = copy_of(saved, tmp_path)
    for name in ("vocab.txt", "merges.txt", "tokenizer.model", "vocab.json"):
        (folder / name).write_text("SECRET\n")
    (folder / "added_tokens.json").write_text('{"SECRET": 0}')
    (folder / "special_tokens_map.json").write_text('{"note": "SECRET"}')
    secret_weights(folder / "model-secret.safetensors")
    secret_weights(folder / "model.backup.safetensors")
    api = FakeHfApi()

    result = push_run(folder, "tester/planted", api=api)

    assert sorted(api.files("tester/planted")) == sorted([".gitattributes", "README.md", *SAVED])
    assert set(result.skipped) == {"vocab.txt", "merges.txt", "tokenizer.model", "vocab.json", "added_tokens.json",
                                   "special_tokens_map.json", "model-secret.safetensors", "model.backup.safetensors"}

    (folder / "added_tokens.json").write_text("SECRET, not JSON")  # read by the tokenizer: it no longer loads
    with pytest.raises(ValueError, match=r"tokenizer files in .* do not load as a tokenizer"):
        plan_upload(folder)


def test_run_files_go_up_only_where_hf_vanilla_wrote_them(saved: Path, tmp_path: Path) -> None:
    """metrics.json, run.json and curves.png are published as the run's only where the folder's record lists
    them: in a folder of the user's, files by those names are theirs."""
    folder = copy_of(saved, tmp_path)
    (folder / "metrics.json").write_text('{"private": "my own notes"}')
    (folder / "run.json").write_text('{"task": "clm", "status": "completed", "notes": "mine"}')
    assert {"metrics.json", "run.json"} <= set(plan_upload(folder).skipped)
    OutputFolder(folder).add(["metrics.json", "run.json"])
    assert {"metrics.json", "run.json"} <= set(plan_upload(folder).files)


def test_a_chat_template_placed_in_a_run_folder_stays_local(trained_run: Path, saved: Path, tmp_path: Path) -> None:
    """transformers loads any chat_template.jinja beside a tokenizer as its chat template; in a run folder the
    record says hf_vanilla's tokenizer has none, so one placed there is the user's: listed as skipped, not sent."""
    run = copy_run(trained_run, tmp_path / "run")
    (run / "chat_template.jinja").write_text("SECRET {{ messages }}")
    api = FakeHfApi()
    result = push_run(run, "tester/templated", api=api)
    assert "chat_template.jinja" in result.skipped and "chat_template.jinja" not in api.files("tester/templated")
    assert b"SECRET" not in b"".join(api.files("tester/templated").values())

    folder = copy_of(saved, tmp_path)  # a folder without a record: today's rule, the tokenizer's own files
    (folder / "chat_template.jinja").write_text("{{ messages }}")
    assert "chat_template.jinja" in plan_upload(folder).files

    # A record that lists nothing yet (a run that has not saved) is still a record: nothing of the user's goes up.
    (folder / ".hf_vanilla.json").write_text(json.dumps({"written_by": "hf_vanilla", "kind": "run", "files": []}))
    assert plan_upload(folder).files == {}


def test_a_sharded_checkpoint_is_its_index_and_exactly_the_shards_it_names(tmp_path: Path) -> None:
    folder = tmp_path / "sharded"
    tiny_model("decoder").save_pretrained(folder, max_shard_size="40KB")
    shards = sorted(p.name for p in folder.glob("model-*.safetensors"))
    assert len(shards) > 1
    secret_weights(folder / "model-99999-of-99999.safetensors")  # named like a shard; no index names it
    files = plan_upload(folder).files
    assert sorted(name for name in files if "safetensors" in name) == sorted(["model.safetensors.index.json", *shards])

    index = json.loads((folder / "model.safetensors.index.json").read_text())
    first = next(iter(index["weight_map"]))
    for shard, error in (("../outside.safetensors", "not files beside it"), ("gone.safetensors", "missing")):
        broken = {**index, "weight_map": {**index["weight_map"], first: shard}}
        (folder / "model.safetensors.index.json").write_text(json.dumps(broken))
        with pytest.raises((ValueError, FileNotFoundError), match=error):
            plan_upload(folder)
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / shards[0]).write_text("SECRET, not safetensors")
    with pytest.raises(OSError, match=f"Cannot read the weights in .*{shards[0]}"):
        plan_upload(folder)


@pytest.mark.parametrize("link", ["model.safetensors", "tokenizer.json", "run.json", "README.md", "extra/notes.txt"])
def test_a_link_out_of_the_folder_is_never_followed(saved: Path, tmp_path: Path, link: str) -> None:
    folder = copy_of(saved, tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    target = home / "secret"
    if link in ("model.safetensors", "tokenizer.json"):  # the real file moved out: loading through the link works
        (folder / link).rename(target)
    else:
        target.write_text('{"netrc": "SECRET"}')
    (folder / link).parent.mkdir(exist_ok=True)
    (folder / link).symlink_to(target)
    api = FakeHfApi()
    if link == "run.json":  # a link is never one of the run's own files (own_files): left local, not followed
        result = push_run(folder, "tester/linked", api=api)
        assert "run.json" in result.skipped and "run.json" not in api.files("tester/linked")
        return
    with pytest.raises(ValueError, match=rf"{link} -> {target} leaves the folder"):
        push_run(folder, "tester/linked", include=["extra"] if link.startswith("extra") else (), api=api)
    assert not api.repos  # refused before anything was created


def test_links_that_stay_inside_the_folder_and_a_linked_folder_are_fine(saved: Path, tmp_path: Path) -> None:
    folder = copy_of(saved, tmp_path)
    (folder / "notes").mkdir()
    (folder / "notes" / "a.txt").write_text("mine\n")
    (folder / "notes" / "b.txt").symlink_to(folder / "notes" / "a.txt")
    (folder / "vocab.txt").symlink_to(Path.home() / ".ssh" / "id_rsa")  # not part of the checkpoint: left local
    (tmp_path / "latest").symlink_to(folder)
    plan = plan_upload(tmp_path / "latest", include=["notes"])
    assert sorted(plan.files) == sorted([*SAVED, "notes/a.txt", "notes/b.txt"]) and "vocab.txt" in plan.skipped


@pytest.mark.parametrize(
    ("record", "said"),
    [({"status": "running"}, "is still running"), ({"status": "diverged", "diverged_at_step": 7}, "diverged at step 7"),
     ({"status": "interrupted", "interrupted_at_step": 3}, "was interrupted at step 3 before it finished")],
)  # fmt: skip
def test_an_unfinished_run_is_not_pushed_without_a_word(
    saved: Path, tmp_path: Path, record: dict, said: str
) -> None:
    folder = copy_of(saved, tmp_path)
    (folder / "run.json").write_text(json.dumps({"task": "clm", **record}))
    OutputFolder(folder).add([*SAVED, "run.json"])  # the run's record, as training writes it
    api = FakeHfApi()
    with pytest.raises(ValueError, match=f"run.json says the run {said}.*--allow-incomplete"):
        push_run(folder, "tester/unfinished", api=api)
    assert not api.repos
    push_run(folder, "tester/unfinished", allow_incomplete=True, api=api)
    assert json.loads(api.files("tester/unfinished")["run.json"])["status"] == record["status"]


def test_a_hub_that_never_answers_times_out_clearly_and_the_push_run_again_starts_clean(
    saved: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = copy_of(saved, tmp_path)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # the conftest's guard; 127.0.0.1 only
    before = get_session().timeout
    exit_codes = []
    with socket.create_server(("127.0.0.1", 0)) as silent:  # the kernel takes the connection; nobody answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        monkeypatch.setattr("hf_vanilla.publishing.hub.HfApi", lambda token=None: HfApi(endpoint=url, token=TOKEN))
        push = ["push", str(folder), "tester/silent", "--timeout", "0.5"]
        pushing = threading.Thread(target=lambda: exit_codes.append(cli.main(push)), daemon=True)
        pushing.start()
        pushing.join(60)
    assert not pushing.is_alive() and exit_codes == [2], "the push still waits on a Hub that never answers"
    err = capsys.readouterr().err
    assert f"The Hub at {url} did not answer within 0.5 s" in err and "Nothing was committed" in err, err
    assert get_session().timeout == before  # the client's own setting is back for everything else

    for bad in ("0", "-1", "nan", "inf"):
        assert cli.main([*push[:-1], bad]) == 2 and f"must be a positive number of seconds, got {float(bad)}" in (
            capsys.readouterr().err
        )

    with LocalHub() as hub:  # the same push again, to a Hub that answers: done in one commit
        result = push_run(folder, "tester/silent", api=HfApi(endpoint=hub.url, token=TOKEN))
        assert sorted(hub.files_at("tester/silent")) == sorted([".gitattributes", *result.uploaded])
        assert len(hub.repos["tester/silent"].commits) == 2 and hub.unknown == []


HOSTILE = "```\n</pre><script>alert(1)</script>\n# Heading\n[link](https://x.invalid) `tick` ````"


def rendered(markdown: str) -> list:
    """The CommonMark tokens of ``markdown``, flattened (markdown-it-py is what rich, a dependency, renders with)."""
    markdown_it = pytest.importorskip("markdown_it")
    tokens = markdown_it.MarkdownIt("commonmark").parse(markdown)
    return [*tokens, *(child for token in tokens for child in token.children or [])]


def test_a_prompt_holding_a_code_fence_stays_inside_the_cards_block(trained_run: Path, tmp_path: Path) -> None:
    run = copy_run(trained_run, tmp_path / "run")
    metrics = json.loads((run / "metrics.json").read_text())
    metrics["samples"] = [{"prompt": HOSTILE, "seed": 0, "sampled": " and ``` more"}]
    (run / "metrics.json").write_text(json.dumps(metrics))
    card = model_card_text(run, "tester/fenced", rebuild_card=True, publish_samples=True)
    samples = card.split("### Sample outputs")[1].split("## Intended use")[0]
    tokens = rendered(samples)
    assert [t.content for t in tokens if t.type == "fence"] == [HOSTILE + " and ``` more\n"]
    assert [t.content for t in tokens if t.type == "code_inline"] == [repr(HOSTILE).replace("\n", " ")]
    assert not [t for t in tokens if t.type.startswith(("html", "heading", "link"))]


@pytest.mark.parametrize(
    ("task", "sample", "items"),
    [("mlm", {"fills": [{"answer": HOSTILE, "top5": ["`", HOSTILE]}]}, 1),
     ("classification", {"text": HOSTILE, "label": "<b>x</b>", "predicted": "# y", "confidence": 0.5}, 1),
     ("translation", {"source": HOSTILE, "reference": HOSTILE, "translation": "- [a](b)"}, 3)],
)  # fmt: skip
def test_data_quoted_in_a_card_sample_never_becomes_markup(task: str, sample: dict, items: int) -> None:
    tokens = rendered(get_task(task).sample_markdown(sample))
    assert not [t for t in tokens if t.type.startswith(("html", "heading", "link", "fence"))]
    assert sum(t.type == "list_item_open" for t in tokens) == items  # the sample's own list, nothing added
    text = "".join(t.content for t in tokens if t.type in ("text", "code_inline"))
    assert "</pre><script>alert(1)</script>" in text and "[link](https://x.invalid)" in text


def test_a_push_publishes_no_local_path_and_no_text_of_private_data_unless_asked(
    trained_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = copy_run(trained_run, tmp_path / "run")
    record = json.loads((run / "run.json").read_text())
    record["command"] = ["/home/alice/.venv/bin/hf-vanilla", "train", "--data-files", "train=/home/alice/diary.txt"]
    record["resumed_from"] = "/home/alice/runs/tiny/checkpoint-1"
    record["options"]["init_from"] = "/home/alice/models/base"
    folder = OutputFolder(run)  # written as the run writes them (declared and sealed): a run that recorded these
    folder.write_json("run.json", record)
    folder.write_text("README.md", build_model_card(run).content)  # the run's own card: names the local folder
    local = str(trained_run.parent)  # where the run's data files are
    assert local in (run / "run.json").read_text()
    prompt = json.loads((run / "metrics.json").read_text())["samples"][0]["prompt"]  # the test file's first words
    api = FakeHfApi()
    monkeypatch.setattr("hf_vanilla.publishing.hub.HfApi", lambda token=None: api)

    assert cli.main(["push", str(run), "tester/private-data"]) == 0
    said = capsys.readouterr().out
    assert "left out of the card and metrics.json: 1 sample(s) quoting texts of the local files train.txt" in said
    files = api.files("tester/private-data")
    texts = {name: files[name].decode() for name in ("run.json", "metrics.json", "README.md")}
    assert not [name for name, text in texts.items() if local in text or "/home/alice" in text or prompt in text]
    published = json.loads(texts["run.json"])
    assert published["command"] == ["hf-vanilla", "train", "--data-files", "train=diary.txt"]
    assert published["dataset"]["files"] == ["train.txt", "validation.txt", "test.txt"]
    assert "_Not published: 1 sample(s) quoting texts of the local files" in texts["README.md"]
    card = ModelCard(texts["README.md"])
    assert card.data.base_model is None and "Initialised from `base`" in card.text  # a local folder is no repo id
    assert "/home/alice" in (run / "run.json").read_text()  # the local record keeps them: evaluate reads the data

    assert cli.main(["push", str(run), "tester/private-data", "--publish-samples"]) == 0
    files = api.files("tester/private-data")
    assert prompt in files["README.md"].decode() and prompt in files["metrics.json"].decode()
    assert "/home/alice" not in files["README.md"].decode() + files["run.json"].decode()


def test_samples_of_public_corpora_and_of_the_users_own_prompts_are_published() -> None:
    from hf_vanilla.publishing.public import public_run_files

    metrics = {"samples": [{"prompt": "MACBETH.", "sampled": " hail"}]}
    for record in ({"task": "clm", "dataset": {"source": "hf_vanilla.corpora", "name": "shakespeare"}},
                   {"task": "clm", "dataset": {"source": "local files", "files": ["/x/a.txt"]},
                    "options": {"prompts": ["MACBETH."]}}):  # fmt: skip
        assert public_run_files(record, metrics)[1] == metrics
    for record in ({"task": "clm", "dataset": {"source": "datasets", "name": "me/private"}, "options": {}},
                   {"task": "mlm", "dataset": {"source": "local files", "files": ["/x/a.txt"]},
                    "options": {"prompts": ["x"]}}):  # fmt: skip
        assert public_run_files(record, metrics)[1]["samples"] == []


def test_a_card_edited_by_hand_that_names_local_paths_or_quotes_private_data_is_refused(
    trained_run: Path, tmp_path: Path
) -> None:
    run = copy_run(trained_run, tmp_path / "run")
    (run / "README.md").write_text((run / "README.md").read_text() + "\nMy notes.\n")  # local snippet, samples
    prompt = json.loads((run / "metrics.json").read_text())["samples"][0]["prompt"]
    api = FakeHfApi()
    with pytest.raises(ChangedFileError, match=r"README.md changed since the run wrote it.*--allow-changed"):
        push_run(run, "tester/edited", api=api)
    with pytest.raises(ValueError, match=rf"edited by hand.*local paths \({trained_run.resolve()}\).*{prompt}.*--rebuild-card"):
        push_run(run, "tester/edited", api=api, allow_changed=True)
    assert not api.repos
    push_run(run, "tester/edited", rebuild_card=True, api=api)
    assert str(trained_run.parent) not in api.files("tester/edited")["README.md"].decode()


def edit_after_the_run(path: Path, how: str) -> None:
    """A change to a file the run wrote: hand edits, or bytes swapped in place (the same size)."""
    if how == "card":  # the public card (the run's own names its local folder, which a kept card may not)
        path.write_text(str(build_model_card(path.parent, model_id="tester/edited", public=True)) + "\nMy notes.\n")
    elif how == "field":
        path.write_text(json.dumps({**json.loads(path.read_text()), "edited": True}))
    else:  # the last byte of the tensors flipped: the header still opens, only the sha256 tells
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF
        path.write_bytes(bytes(data))


@pytest.mark.parametrize(("name", "how"), [("README.md", "card"), ("config.json", "field"),
                                           ("model.safetensors", "swap")])
def test_a_file_changed_after_the_run_is_pushed_only_when_asked_and_the_card_names_it(
    trained_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    name: str, how: str,
) -> None:
    """Issue 41.2: a recorded file edited after the run wrote it was published silently. The push compares each
    with the size and sha256 its record holds: refused, naming it, before the first request; with --allow-changed
    it goes up as edited and the card says which files were edited after training."""
    run = copy_run(trained_run, tmp_path / "run")
    edit_after_the_run(run / name, how)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # the conftest's guard; 127.0.0.1 only
    with LocalHub() as hub:
        monkeypatch.setattr("hf_vanilla.publishing.hub.HfApi", lambda token=None: HfApi(endpoint=hub.url, token=TOKEN))
        capsys.readouterr()
        assert cli.main(["push", str(run), "tester/edited"]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert f"{name} changed since the run wrote it" in err and "--allow-changed" in err, err
        assert not hub.repos  # refused before the first request

        assert cli.main(["push", str(run), "tester/edited", "--allow-changed"]) == 0, capsys.readouterr().err
        files = hub.files_at("tester/edited")
        card = files["README.md"].decode()
        assert "## Files edited after training" in card and f"`{name}`" in card.split("## Files edited")[1]
        if name == "config.json":
            assert json.loads(files["config.json"])["edited"] is True  # published as edited, as asked
        if name == "model.safetensors":
            assert files[name] == (run / name).read_bytes()
    assert OutputFolder(run).changed() == [name]  # nothing rewritten locally: the record still tells


def test_an_unchanged_run_is_pushed_without_a_note(trained_run: Path, tmp_path: Path) -> None:
    api = FakeHfApi()
    push_run(copy_run(trained_run, tmp_path / "run"), "tester/clean", api=api)
    assert "Files edited after training" not in api.files("tester/clean")["README.md"].decode()


# ----------------------------------------------------------------------------------------------
# Secrets hidden in binary files (issue 50.4): every file a push would publish is scanned, with or without
# --allow-changed

FAKE_TOKEN = "hf_" + "Zq7xWv3TnB" * 3 + "k9"  # the shape of a Hugging Face token, not one


def png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def hide_in_png(path: Path, kind: str) -> None:
    """A text chunk holding the token, put before the PNG's closing IEND chunk, as an image editor would."""
    text = f"uploaded with {FAKE_TOKEN}".encode()
    body = {"tEXt": b"Comment\0" + text,
            "iTXt": b"Comment\0\0\0en\0\0" + text,
            "iTXt compressed": b"Comment\0\1\0en\0\0" + zlib.compress(text),
            "zTXt": b"Comment\0\0" + zlib.compress(text)}[kind]
    data = path.read_bytes()
    path.write_bytes(data[:-12] + png_chunk(kind[:4].encode(), body) + data[-12:])


def hide_in_weights(path: Path, where: str) -> None:
    from safetensors import safe_open

    if where == "the safetensors metadata header":
        with safe_open(str(path), "pt") as weights:
            tensors = {name: weights.get_tensor(name) for name in weights.keys()}  # noqa: SIM118
            metadata = weights.metadata()
        save_file(tensors, path, metadata={**metadata, "note": FAKE_TOKEN})
    else:  # a byte run in the tensor data (same size: the file still loads)
        data = bytearray(path.read_bytes())
        middle = len(data) // 2
        data[middle:middle + len(FAKE_TOKEN) + 2] = b" " + FAKE_TOKEN.encode() + b" "
        path.write_bytes(bytes(data))


@pytest.mark.parametrize("where", ["tEXt", "iTXt", "iTXt compressed", "zTXt", "the safetensors metadata header",
                                   "the tensor bytes"])
def test_a_token_hidden_in_a_binary_file_is_refused_with_or_without_allow_changed(
    trained_run: Path, tmp_path: Path, where: str
) -> None:
    run = copy_run(trained_run, tmp_path / "run")
    name = "curves.png" if where.endswith("TXt") or "TXt " in where else "model.safetensors"
    if name == "curves.png":
        hide_in_png(run / name, where)
    else:
        hide_in_weights(run / name, where)
    assert FAKE_TOKEN.encode() not in (run / name).read_bytes() or "compressed" not in where
    api = FakeHfApi()
    for allow_changed in (False, True):
        with pytest.raises(SecretInUploadError, match=rf"refusing to push: {name} .*\(a Hugging Face token"):
            push_run(run, "tester/hidden", api=api, allow_changed=allow_changed)
    assert "tester/hidden" not in api.repos  # nothing was sent


def test_a_png_text_chunk_that_does_not_inflate_is_not_published_unread(trained_run: Path, tmp_path: Path) -> None:
    run = copy_run(trained_run, tmp_path / "run")
    data = (run / "curves.png").read_bytes()
    bomb = zlib.compress(b"\0" * (64 * 2**20))  # 64 MiB of zeros in about 64 KiB
    (run / "curves.png").write_bytes(data[:-12] + png_chunk(b"zTXt", b"Comment\0\0" + bomb) + data[-12:])
    with pytest.raises(SecretInUploadError, match=r"curves.png PNG zTXt chunk 'Comment' \(it does not inflate"):
        push_run(run, "tester/bomb", api=FakeHfApi(), allow_changed=True)


@pytest.mark.parametrize(("field", "value", "said"), [
    ("auto_map", ["x"], "auto_map must be a JSON object or null, got a list"),
    ("architectures", [["VanillaForCausalLM"]], r"architectures\[0\] must be a string, got a list"),
    ("architectures", {"a": 1}, "architectures must be a list or null, got a JSON object"),
    ("auto_map", {"AutoModel": 3}, "auto_map.AutoModel must be a string or a list, got an integer"),
])
def test_a_config_json_field_of_the_wrong_type_is_one_sentence_naming_it_before_anything_is_sent(
    saved: Path, tmp_path: Path, field: str, value: object, said: str
) -> None:
    """Issue 50.5: ``auto_map`` or ``architectures`` of the wrong type ended a push in a traceback (or went up)."""
    from hf_vanilla.errors import HfVanillaError

    folder = copy_of(saved, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, field: value}))
    api = FakeHfApi()
    with pytest.raises(HfVanillaError, match=rf"config.json: {said}; set that field as transformers writes it"):
        push_run(folder, "tester/typed", api=api)
    assert "tester/typed" not in api.repos
