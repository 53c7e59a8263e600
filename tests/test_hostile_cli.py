"""Every ``hf-vanilla`` subcommand against the hostile inputs of issue 41: each ends in exit status 2 and one
sentence on stderr naming what is wrong, never a traceback, and nothing is allocated, trained or uploaded first.

The commands run in-process through :func:`hf_vanilla.cli.main` (what the console script calls); a subprocess only
where the input needs one (a folder locked by another process).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hf_vanilla import cli
from hf_vanilla.files.output_folder import OutputFolder
from tests.factories import tiny_model, tiny_tokenizer
from tests.hub_fixtures import copy_run


def refused(capsys: pytest.CaptureFixture[str], argv: list[str], *named: str) -> str:
    """Run ``hf-vanilla ARGV``: exit 2, one line on stderr that names each of ``named``, no traceback."""
    capsys.readouterr()
    status = cli.main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2, (status, err[-3000:])
    assert "Traceback" not in err and len(lines) == 1, err[-3000:]
    assert lines[0].startswith(f"hf-vanilla {argv[0]}: "), lines[0]
    assert all(word in lines[0] for word in named), (named, lines[0])
    return lines[0]


def saved_decoder(folder: Path, **overrides) -> Path:
    tiny_model(**overrides).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder


# ----------------------------------------------------------------------------------------------
# Busy folders and the run files of a card


def test_convert_into_a_folder_another_process_writes_is_refused_in_one_sentence(tmp_path, capsys):
    from transformers import GPT2Config, GPT2LMHeadModel

    source, out = tmp_path / "gpt2", tmp_path / "out"
    GPT2LMHeadModel(GPT2Config(vocab_size=97, n_positions=32, n_embd=16, n_layer=1, n_head=2, bos_token_id=1, eos_token_id=2)).save_pretrained(source)
    assert cli.main(["convert", str(source), str(out)]) == 0
    with OutputFolder(out, "conversion").locked():  # another writer holds it (a second lock, in this process too)
        refused(capsys, ["convert", str(source), str(out), "--overwrite"], "in progress", str(out))


def test_push_rebuild_card_with_metrics_json_a_link_out_of_the_run_is_refused(trained_run, tmp_path, capsys):
    run = copy_run(trained_run, tmp_path / "run")
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"unrelated": 1}))
    (run / "metrics.json").unlink()
    (run / "metrics.json").symlink_to(elsewhere)
    refused(capsys, ["push", str(run), "user/x", "--rebuild-card"], "metrics.json", "symbolic link now")


def test_push_rebuild_card_with_a_metrics_json_edited_out_of_shape_is_refused(trained_run, tmp_path, capsys):
    run = copy_run(trained_run, tmp_path / "run")
    (run / "metrics.json").write_text(json.dumps({"unrelated": 1}))
    refused(capsys, ["push", str(run), "user/x", "--rebuild-card"], "metrics.json changed since the run wrote it")
    refused(capsys, ["push", str(run), "user/x", "--rebuild-card", "--allow-changed"], "metrics.json", "--keep-card")


# ----------------------------------------------------------------------------------------------
# Secrets in what a push publishes (built here, so this file holds no credential-shaped string itself)

SECRETS = {
    "hub": "hf_" + "Ab3dEf6hIj9" * 3 + "Xy",
    "aws": "AKIA" + "QWERTYUIOP234567",
    "github": "ghp_" + "a1B2c3D4e5F6" * 3,
    "github_pat": "github_pat_" + "11ABCDEFG0123456789_abcdefghij",
    "openai": "sk-proj-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Jh1Gf0Ed",
    "google": "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6q",
    "slack": "xoxb-" + "123456789012-abcdefABCDEF",
    "private key": "-----BEGIN OPENSSH " + "PRIVATE KEY-----\nb3BlbnNzaC1rZXk=\n-----END OPENSSH PRIVATE KEY-----",
}


def with_secret(folder: Path, name: str, secret: str) -> int:
    """Put ``secret`` into ``folder/name`` where a user would paste it; the line it lands on."""
    path = folder / name
    if name.endswith(".json"):
        data = json.loads(path.read_text(encoding="utf-8"))
        if name == "tokenizer.json":  # the tokenizers library reads no field it does not know: a word of its vocab
            data["model"]["vocab"][secret] = len(data["model"]["vocab"])
        else:
            data["notes"] = f"pushed with {secret}"
        text = json.dumps(data, indent=2)
        path.write_text(text, encoding="utf-8")
        return next(i for i, line in enumerate(text.splitlines(), 1) if secret in line)
    text = "---\nlicense: mit\n---\n# tiny\n\nload it with token\n" if name == "README.md" else "{{ messages }}\n"
    path.write_text(text + secret + "\n", encoding="utf-8")
    return text.count("\n") + 1


@pytest.mark.parametrize(("name", "kind"), [
    ("README.md", "hub"), ("README.md", "private key"), ("config.json", "aws"), ("tokenizer_config.json", "github"),
    ("tokenizer.json", "github_pat"), ("chat_template.jinja", "openai"), ("README.md", "google"),
    ("generation_config.json", "slack"),
])  # fmt: skip
def test_push_refuses_a_credential_in_any_published_text_file_without_printing_it(tmp_path, capsys, name, kind):
    from hf_vanilla.publishing.hub import push_run
    from hf_vanilla.publishing.secrets import SecretInUploadError
    from tests.hub_fixtures import FakeHfApi

    folder = saved_decoder(tmp_path / "model")
    line = with_secret(folder, name, SECRETS[kind])
    said = refused(capsys, ["push", str(folder), "user/tiny"], f"{name} line {line}", "credential")
    assert SECRETS[kind].splitlines()[0] not in said and SECRETS[kind][4:20] not in said
    api = FakeHfApi()
    with pytest.raises(SecretInUploadError):
        push_run(folder, "user/tiny", api=api)
    assert api.repos == {}  # refused before the first request: no repo created, nothing uploaded


def test_a_token_pasted_into_a_runs_card_is_not_pushed(trained_run, tmp_path, capsys):
    from hf_vanilla.publishing.hub import push_run
    from tests.hub_fixtures import FakeHfApi

    run = copy_run(trained_run, tmp_path / "run")
    card = (run / "README.md").read_text(encoding="utf-8")
    (run / "README.md").write_text(card + f"\nDownload with HF_TOKEN={SECRETS['hub']}\n", encoding="utf-8")
    line = card.count("\n") + 2
    said = refused(capsys, ["push", str(run), "user/tiny"], f"README.md line {line}", "Hugging Face token")
    assert SECRETS["hub"] not in said
    api = FakeHfApi()
    with pytest.raises(ValueError, match="credential"):
        push_run(run, "user/tiny", api=api)
    assert api.repos == {}


def test_the_secret_patterns_leave_ordinary_text_and_our_own_files_alone():
    from hf_vanilla.checkpoint import code_files
    from hf_vanilla.publishing.secrets import find_secrets

    ordinary = "hf_vanilla_config sk-learn task-specific AKIA xoxo AIzaWord ghp_short -----BEGIN PUBLIC KEY-----"
    assert find_secrets(ordinary) == []
    for path in code_files():  # the travelling code goes up with every push
        assert find_secrets(path.read_text(encoding="utf-8")) == [], path
    assert [kind for _, kind in find_secrets("\n".join(SECRETS.values()))] == [
        "a Hugging Face token (hf_...)", "an AWS access key (AKIA...)", "a GitHub token (ghp_...)",
        "a GitHub token (github_pat_...)", "an OpenAI key (sk-...)", "a Google API key (AIza...)",
        "a Slack token (xox...)", "a private key (-----BEGIN ... PRIVATE KEY-----)",
    ]  # fmt: skip


# ----------------------------------------------------------------------------------------------
# Sizes that cannot fit: refused before anything is allocated, naming the estimate, the memory and the field


@pytest.mark.parametrize("override", ["hidden_size=1000000000", "num_hidden_layers=100000000"])
def test_train_refuses_a_config_that_cannot_fit_before_allocating(tmp_path, capsys, override):
    run = tmp_path / "run"
    refused(capsys, ["train", "--task", "clm", "--output-dir", str(run), "--config", override],
            "parameters", "memory available", override)
    assert not run.exists()  # refused before the folder was claimed


@pytest.mark.parametrize(("field", "value"), [("intermediate_size", 1e12), ("max_position_embeddings", 1e15)])
def test_train_init_from_a_config_that_cannot_fit_is_refused(tmp_path, capsys, field, value):
    source = saved_decoder(tmp_path / "init")
    config = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps({**config, field: value}))
    refused(capsys, ["train", "--task", "clm", "--output-dir", str(tmp_path / "run"), "--init-from", str(source)],
            "--init-from", f"{field}={value}", "memory available")


EDITED_CONFIGS = [("vocab_size", 2_000_000_000, "memory available"), ("hidden_size", 65536, "memory available"),
                  ("num_hidden_layers", 100000, "does not match the weights")]


def edit_config(folder: Path, field: str, value: float) -> None:
    config = json.loads((folder / "config.json").read_text())
    also = {"num_decoder_layers": value} if "num_decoder_layers" in config and field == "num_hidden_layers" else {}
    (folder / "config.json").write_text(json.dumps({**config, field: value, **also}))  # a decoder saves both


@pytest.mark.parametrize(("field", "value", "said"), EDITED_CONFIGS)
@pytest.mark.parametrize("command", ["generate", "attention", "positions"])
def test_a_config_edited_beside_small_weights_is_refused_before_the_model_is_built(
    tmp_path, capsys, monkeypatch, command, field, value, said
):
    import hf_vanilla.modeling_vanilla as modeling

    folder = saved_decoder(tmp_path / "model")
    edit_config(folder, field, value)
    monkeypatch.setattr(modeling.VanillaPreTrainedModel, "__init__", _never_built)
    argv = {"generate": ["generate", str(folder), "the king"],
            "attention": ["attention", str(folder), "the king", "--out", str(tmp_path / "a.png")],
            "positions": ["positions", "--out", str(tmp_path / "pictures"), "--model", str(folder)]}[command]
    refused(capsys, argv, "config.json", said, field)


def _never_built(*args, **kwargs):
    raise AssertionError("the model was built from a config that cannot be its weights'")


@pytest.mark.parametrize(("field", "value", "said"), EDITED_CONFIGS)
def test_evaluate_refuses_a_run_whose_config_does_not_fit_its_weights(trained_run, tmp_path, capsys, field, value, said):
    run = copy_run(trained_run, tmp_path / "run")
    edit_config(run, field, value)
    refused(capsys, ["evaluate", str(run)], "config.json", said, field)


# ----------------------------------------------------------------------------------------------
# A run.json edited out of what train records: checked as a schema, one sentence per error


def edit_options(run: Path, change) -> None:
    record = json.loads((run / "run.json").read_text())
    record["options"] = change(record["options"])
    (run / "run.json").write_text(json.dumps(record))


def fifo_as_test_file(run: Path, options: dict) -> dict:
    fifo = run.parent / "test.fifo"
    os.mkfifo(fifo)  # reading it would block for ever
    return {**options, "data_files": [*[f for f in options["data_files"] if not f.startswith("test=")], f"test={fifo}"]}


@pytest.mark.parametrize(("change", "named"), [
    (lambda options: list(options), ["options must be a JSON object", "got a list"]),
    (lambda options: {**options, "learning_rat": 0.1}, ["'learning_rat' is not an option"]),
    (lambda options: {**options, "eval_batch_size": 10**9}, ["eval_batch_size", "at most 65536"]),
    (lambda options: {**options, "block_size": "16"}, ["block_size='16' is not of the type int"]),
    (fifo_as_test_file, ["test.fifo", "not a regular file"]),
], ids=["a list", "an unknown key", "a huge batch", "a string for a number", "a FIFO"])  # fmt: skip
def test_evaluate_refuses_a_run_json_whose_options_are_not_what_train_records(trained_run, tmp_path, capsys, change,
                                                                              named):
    run = copy_run(trained_run, tmp_path / "run")
    edit_options(run, lambda options: change(run, options) if change is fifo_as_test_file else change(options))
    refused(capsys, ["evaluate", str(run)], "run.json" if "eval_batch_size" not in named else "eval", *named)


def test_evaluate_refuses_a_batch_size_past_any_memory(trained_run, tmp_path, capsys):
    refused(capsys, ["evaluate", str(trained_run), "--batch-size", str(10**9)], "eval_batch_size", "65536")


# ----------------------------------------------------------------------------------------------
# A tokenizer whose own regular expression backtracks catastrophically


def test_a_tokenizer_regex_that_backtracks_catastrophically_is_refused_not_run(tmp_path, capsys, monkeypatch):

    folder = saved_decoder(tmp_path / "model")
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    # Oniguruma (the tokenizers library's regex engine) gives up on it after its retry limit, with a Rust panic.
    tokenizer["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "(a|a)+b"}, "behavior": "Isolated",
                                  "invert": False}
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    refused(capsys, ["generate", str(folder), "the king"], "tokenizer.json", "regular expression", "retry-limit")


def test_a_tokenizer_regex_slower_than_the_time_limit_is_refused(tmp_path, capsys, monkeypatch):
    from hf_vanilla import checkpoint

    folder = saved_decoder(tmp_path / "model")
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    tokenizer["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Removed", "invert": False}
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    monkeypatch.setattr(checkpoint.check_tokenizer_regexes, "__defaults__", (0.001,))  # no process starts that fast
    refused(capsys, ["generate", str(folder), "the king"], "tokenizer.json", "regular expression", "in 0.001 s")


def test_a_sane_tokenizer_regex_passes_the_probe(tmp_path):
    from hf_vanilla.checkpoint import check_tokenizer_regexes

    folder = saved_decoder(tmp_path / "model")
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    tokenizer["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "\\\\s+"}, "behavior": "Removed", "invert": False}
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    check_tokenizer_regexes(folder)


# ----------------------------------------------------------------------------------------------
# A Hub that cannot take the push: asked first (whose is the token?), said in one sentence, nothing uploaded.
# Every address is on loopback: a closed port, a server that takes the connection and never answers, the local Hub.


@pytest.fixture
def pushable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A saved model to push, with the client online (the conftest's guard lifted: 127.0.0.1 only) and no saved login."""
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))
    return saved_decoder(tmp_path / "model")


def push_to(monkeypatch: pytest.MonkeyPatch, url: str, capsys, folder: Path, *argv: str, named: tuple[str, ...]) -> str:
    """``hf-vanilla push FOLDER tester/x ARGV`` against the Hub at ``url``, in a thread bounded to 60 s."""
    import threading

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", url)
    said: list[str | BaseException] = []

    def push() -> None:
        try:
            said.append(refused(capsys, ["push", str(folder), "tester/x", *argv], *named))
        except BaseException as error:  # noqa: BLE001 - a failed check is re-raised below, in the test's thread
            said.append(error)

    pushing = threading.Thread(target=push, daemon=True)
    pushing.start()
    pushing.join(60)
    assert not pushing.is_alive(), "the push still waits on the Hub"
    if isinstance(said[0], BaseException):
        raise said[0]
    assert "Nothing was" in said[0]
    return said[0]


def closed_port() -> int:
    import socket

    with socket.socket() as probe:  # bound, then closed: nothing listens there
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_push_to_an_address_nobody_listens_on_says_so_in_one_sentence(pushable, monkeypatch, capsys):
    """Issue 51: an 85-line chained traceback ending in httpx's ConnectError, after 49 s."""
    url = f"http://127.0.0.1:{closed_port()}"
    push_to(monkeypatch, url, capsys, pushable, "--token", "hf_any", named=(f"Cannot reach the Hub at {url}",
                                                                           "HF_ENDPOINT"))


def test_a_push_to_a_hub_that_takes_the_connection_and_never_answers_gives_up_in_bounded_time(pushable, monkeypatch,
                                                                                               capsys):
    import socket

    with socket.create_server(("127.0.0.1", 0)) as silent:  # the kernel takes the connection; nobody answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        push_to(monkeypatch, url, capsys, pushable, "--token", "hf_any", "--timeout", "0.5",
                named=(f"The Hub at {url} did not answer within 0.5 s", "--timeout"))


def test_a_push_whose_token_the_hub_refuses_or_that_has_none_uploads_nothing(pushable, monkeypatch, capsys):
    from tests.hub_server import LocalHub

    with LocalHub() as hub:
        push_to(monkeypatch, hub.url, capsys, pushable, "--token", "hf_wrong",
                named=(f"The Hub at {hub.url} refused the token (401", "hf auth login"))
        push_to(monkeypatch, hub.url, capsys, pushable, named=("No Hub token", "hf auth login", "HF_TOKEN"))
        assert not hub.repos and hub.unknown == []  # asked whose the token is, nothing else


def test_a_push_to_a_hub_that_answers_an_error_or_while_offline_is_refused(pushable, monkeypatch, capsys):
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import huggingface_hub

    class Unavailable(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - stdlib naming
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    with ThreadingHTTPServer(("127.0.0.1", 0), Unavailable) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}"
        push_to(monkeypatch, url, capsys, pushable, "--token", "hf_any",
                named=(f"The Hub at {url} answered 503", "try again later"))
        server.shutdown()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    push_to(monkeypatch, url, capsys, pushable, "--token", "hf_any", named=("HF_HUB_OFFLINE is set", "unset it"))


# ----------------------------------------------------------------------------------------------
# What our own runs expect prints nothing alarming; what they do not expect still does


@pytest.mark.parametrize(("tied", "missing", "reported"), [
    (True, ["lm_head.weight"], None),  # the tied head: its weight is the embedding's, saved once
    (True, ["lm_head.weight", "model.norm.weight"], ["model.norm.weight"]),
    (True, ["lm_head.weight", "model.embed_tokens.weight"], ["lm_head.weight", "model.embed_tokens.weight"]),
    (False, ["lm_head.weight"], ["lm_head.weight"]),  # an untied head of its own: truly missing
], ids=["tied head only", "tied head and a norm", "head and its embedding", "untied head"])  # fmt: skip
def test_resuming_says_nothing_of_a_tied_heads_key_and_everything_of_a_missing_one(tmp_path, monkeypatch, tied,
                                                                                  missing, reported):
    """Issue 51: every --resume of a tied-embedding run printed transformers' "There were missing keys in the
    checkpoint model loaded: ['lm_head.weight']"."""
    import transformers.trainer
    from torch.nn.modules.module import _IncompatibleKeys
    from transformers import TrainingArguments

    from hf_vanilla.training.trainer import trainer_classes

    warned: list[str] = []
    monkeypatch.setattr(transformers.trainer.logger, "warning", lambda message, *args: warned.append(message % args
                                                                                                     if args else message))
    trainer = trainer_classes()[0](model=tiny_model(tie_word_embeddings=tied),
                                   args=TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True))
    warned.clear()
    trainer._issue_warnings_after_load(_IncompatibleKeys(missing, []))
    if reported is None:
        assert warned == []
    else:
        assert warned == [f"There were missing keys in the checkpoint model loaded: {reported}."]


def test_a_time_limit_of_one_minute_is_said_in_the_singular_wherever_the_run_says_why_it_stopped():
    """Issue 51: "the time limit of 1 minutes"."""
    from hf_vanilla.publishing.card import _stop_reason
    from hf_vanilla.training.outputs import completion

    said = {minutes: completion(planned_steps=9, completed_steps=5, time_limit_minutes=minutes,
                                stopped_by_time_limit_at=5)["stop_reason"] for minutes in (1, 2, 0.5)}
    assert said == {1: "the time limit of 1 minute stopped training at step 5 of 9",
                    2: "the time limit of 2 minutes stopped training at step 5 of 9",
                    0.5: "the time limit of 0.5 minutes stopped training at step 5 of 9"}
    older_run = {"options": {"time_limit_minutes": 1}, "effective": {"max_steps": 9}}  # metrics.json without the words
    assert _stop_reason({"timing": {"stopped_by_time_limit_at": 5}}, older_run) == said[1]
