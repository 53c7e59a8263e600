"""What a run folder holds and which of it a push uploads, declared once.

docs/training.md ("What a run directory holds") and docs/hub.md (what goes up) show :func:`listing`, generated from
:func:`run_folder`: tests/test_docs.py keeps the pages equal to it, and tests/test_train.py keeps it equal to the
folder a real run leaves and to what :func:`hf_vanilla.publishing.hub.plan_upload` uploads from it. The code files
are the model's own (:func:`hf_vanilla.checkpoint.code_files`), the run files and the card push's
(:data:`hf_vanilla.publishing.hub.RUN_FILES`).

    python -m hf_vanilla.training.layout          # both listings, as the docs show them
"""

from __future__ import annotations

from dataclasses import dataclass

from ..checkpoint import code_files
from ..files.output_folder import RECORD
from ..publishing.hub import CARD_FILE, RUN_FILES


@dataclass(frozen=True)
class Entry:
    """Files (or ``checkpoint-N/``, every kept checkpoint) at the top of a run folder, what they are, whether a
    push uploads them."""

    names: tuple[str, ...]
    what: str
    pushed: bool


#: What each of push's run files (:data:`hf_vanilla.publishing.hub.RUN_FILES`) holds.
RUN_FILE_ROLES = {
    "metrics.json": "final metrics, baseline, timing, samples, steps run of planned",
    "run.json": "task, options, data, versions, status, the command that finishes it",
    "curves.png": "training and validation loss (and an LM's unigram baseline)",
}


def run_folder() -> list[Entry]:
    """Everything at the top of the folder of a finished ``hf-vanilla train`` run, in the order the docs list it."""
    return [
        Entry(("model.safetensors", "config.json", "generation_config.json"), "the model (auto_map names its code)",
              True),
        Entry(tuple(path.name for path in code_files()), "its code: loads with trust_remote_code=True", True),
        Entry(("tokenizer.json", "tokenizer_config.json"), "trained on the training split only", True),
        *(Entry((name,), RUN_FILE_ROLES[name], True) for name in RUN_FILES),
        Entry((CARD_FILE,), "the model card", True),
        Entry(("trainer_state.json", "training_args.bin"), "the Trainer's log history and arguments", False),
        Entry(("checkpoint-N/",), "the newest --save-total-limit checkpoints, for --resume", False),
        Entry((RECORD,), "the names above, all that --overwrite and --resume touch", False),
    ]


#: Names this wide or narrower share a line with their description.
NAMES_WIDTH = 40


def listing(folder: str, *, for_push: bool = False) -> str:
    """The run folder ``folder`` as a docs page shows it: every entry and what it is, or (``for_push``) what a push
    uploads, then what stays local."""
    entries = run_folder()
    if for_push:
        entries = [e for e in entries if e.pushed] + [Entry(e.names, f"local: {e.what}", False)
                                                        for e in entries if not e.pushed]
    lines = [folder]
    for entry in entries:
        names = " ".join(entry.names)
        if len(names) <= NAMES_WIDTH:
            lines.append(f"  {names:<{NAMES_WIDTH}} {entry.what}")
        else:
            lines += [f"  {names}", f"  {'':<{NAMES_WIDTH}} {entry.what}"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(listing("runs/clm/"), end="")
    print()
    print(listing("runs/shakespeare-clm/", for_push=True), end="")
