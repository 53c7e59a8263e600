"""Training options that used to pass and then train NaN, a whole epoch, a single silent step, or crash late
(after training): each is refused where it enters, naming the option and its allowed range."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from transformers import TrainerControl, TrainerState

from hf_vanilla.tasks import get_task
from hf_vanilla.training import options as O
from hf_vanilla.training import sources, train
from hf_vanilla.training.callbacks import NonFiniteLossGuard
from hf_vanilla.training.cli import parse

OUT_OF_RANGE = [  # (task, option, value, the allowed range the message names)
    ("mlm", "mlm_probability", 0.0, "in (0, 1]"),
    ("mlm", "mlm_probability", 1.5, "in (0, 1]"),
    ("clm", "max_steps", 0, "-1"),
    ("clm", "max_steps", -2, "-1"),
    ("clm", "num_train_epochs", 0.0, "above 0"),
    ("clm", "num_train_epochs", -3.0, "above 0"),
    ("clm", "num_train_epochs", math.inf, "finite"),
    ("clm", "time_limit_minutes", -1.0, "above 0"),
    ("clm", "time_limit_minutes", 0.0, "above 0"),
    ("clm", "gradient_accumulation_steps", 0, "at least 1"),
    ("clm", "block_size", 0, "at least 2"),
    ("clm", "batch_size", 0, "at least 1"),
    ("translation", "num_beams", 0, "at least 1"),
    ("clm", "learning_rate", math.nan, "above 0"),
]


@pytest.mark.parametrize(("task", "name", "value", "allowed"), OUT_OF_RANGE)
def test_out_of_range_values_are_refused_naming_the_option(task: str, name: str, value, allowed: str) -> None:
    flag = "--" + name.replace("_", "-")
    with pytest.raises(ValueError, match=f"{flag} \\({name}\\) must be .*{re.escape(allowed)}.*got"):
        O.TrainOptions(**{name: value}).resolved(get_task(task))


def test_the_edges_of_each_range_are_accepted() -> None:
    edges = dict(mlm_probability=1.0, max_steps=1, num_train_epochs=0.01, time_limit_minutes=0.01,
                 gradient_accumulation_steps=1, block_size=2, num_beams=1, num_samples=0)
    assert O.TrainOptions(**edges).resolved(get_task("mlm")).max_steps == 1
    assert O.TrainOptions(max_steps=-1).resolved(get_task("clm")).max_steps == -1


def test_a_blank_prompt_is_refused_before_training() -> None:
    with pytest.raises(ValueError, match=r"--prompts \(prompts\): prompt 2 is blank"):
        O.TrainOptions(prompts=["To be", " "]).resolved(get_task("clm"))


def test_the_command_line_refuses_a_value_as_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        parse(["--task", "clm", "--output-dir", "x", "--gradient-accumulation-steps", "0"])
    assert stop.value.code == 2
    assert "--gradient-accumulation-steps (gradient_accumulation_steps) must be at least 1, got 0" in \
        capsys.readouterr().err


def test_a_nan_loss_with_finite_gradients_trips_the_divergence_guard() -> None:
    # mlm with nothing masked: the loss is 0/0 = NaN while every gradient is a finite zero.
    guard, state, control = NonFiniteLossGuard(), TrainerState(global_step=3), TrainerControl(should_save=True)
    control = guard.on_log(None, state, control, logs={"loss": math.nan, "grad_norm": 0.0})
    assert guard.tripped_at == 3
    assert (control.should_save, control.should_evaluate, control.should_training_stop) == (False, False, True)
    healthy = NonFiniteLossGuard()
    healthy.on_log(None, state, TrainerControl(), logs={"loss": 2.5, "eval_loss": math.inf})
    assert healthy.tripped_at is None


def test_flex_attention_is_refused_for_cpu_training_before_anything_loads(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="flex_attention trains only on an accelerator.*use sdpa or eager"):
        train("clm", tmp_path / "run", attn_implementation="flex_attention", use_cpu=True, max_steps=1)
    assert not (tmp_path / "run").exists()


def test_text_column_names_a_column_of_local_csv_and_json_files(tmp_path: Path) -> None:
    (tmp_path / "posts.csv").write_text("id,body\n1,first post\n2,second post\n3,third post\n", encoding="utf-8")
    (tmp_path / "held.csv").write_text("body,id\nheld out,4\n", encoding="utf-8")
    (tmp_path / "posts.jsonl").write_text('{"body": "a post", "id": 1}\n{"body": "another", "id": 2}\n',
                                          encoding="utf-8")
    for task, files in (("clm", [str(tmp_path / "posts.csv"), f"validation={tmp_path / 'held.csv'}"]),
                        ("mlm", [str(tmp_path / "posts.jsonl")])):
        opts = O.TrainOptions(text_column="body", data_files=files, validation_fraction=0.5).resolved(get_task(task))
        data, _ = sources.load_task_data(get_task(task), opts)
        texts = sorted([*data["train"]["text"], *data["validation"]["text"]])
        assert texts == (["first post", "held out", "second post", "third post"] if task == "clm" else
                         ["a post", "another"])
