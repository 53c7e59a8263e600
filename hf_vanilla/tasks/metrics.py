"""Evaluation maths: exact token-weighted perplexity, macro-F1 and the unigram baseline."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from datasets import Dataset
    from transformers import EvalPrediction


def token_stats(logits: torch.Tensor | tuple[torch.Tensor, ...], labels: torch.Tensor, shift: bool) -> torch.Tensor:
    """Per-example ``[sum of target NLL, number of targets, correct argmax predictions]``.

    Used as ``preprocess_logits_for_metrics`` so the evaluation keeps 3 numbers per example instead of
    the (batch, length, vocab) logits, and the perplexity is exact (token-weighted) over the split.
    """
    # torch only where metrics are computed (start-up time: a task is named without it)
    import torch

    if isinstance(logits, (tuple, list)):
        logits = logits[0]
    if shift:
        logits, labels = logits[:, :-1], labels[:, 1:]
    mask = labels.ne(-100)
    safe = labels.clamp(min=0)
    logp = torch.log_softmax(logits.float(), dim=-1)
    nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    nll = (nll * mask).sum(-1)
    correct = ((logits.argmax(-1) == labels) & mask).sum(-1)
    return torch.stack([nll, mask.sum(-1).to(nll.dtype), correct.to(nll.dtype)], dim=-1)


def lm_metrics(eval_pred: EvalPrediction) -> dict[str, float]:
    """Perplexity and token accuracy from :func:`token_stats` rows."""
    # numpy only where metrics are computed (start-up time: a task is named without it)
    import numpy as np

    stats = np.asarray(eval_pred.predictions, dtype=np.float64).reshape(-1, 3)
    nll, count, correct = stats.sum(0)
    count = max(count, 1.0)
    return {"perplexity": float(math.exp(nll / count)), "accuracy": float(correct / count),
            "nll": float(nll / count), "tokens": int(count)}


def classification_metrics(eval_pred: EvalPrediction) -> dict[str, float]:
    """Accuracy and macro-F1 (mean F1 over the classes present in the gold labels or predictions)."""
    # numpy only where metrics are computed (start-up time: a task is named without it)
    import numpy as np

    preds = np.asarray(eval_pred.predictions).reshape(-1)
    gold = np.asarray(eval_pred.label_ids).reshape(-1)
    return {"accuracy": float((preds == gold).mean()), "macro_f1": macro_f1(gold.tolist(), preds.tolist())}


def macro_f1(gold: Sequence[int], pred: Sequence[int]) -> float:
    """Macro-averaged F1 as scikit-learn computes it (labels = union of gold and predicted).

    Hand-written because no dependency computes it (scikit-learn and evaluate are not dependencies)."""
    scores = []
    for c in sorted(set(gold) | set(pred)):
        tp = sum(1 for g, p in zip(gold, pred, strict=True) if g == c and p == c)
        fp = sum(1 for g, p in zip(gold, pred, strict=True) if g != c and p == c)
        fn = sum(1 for g, p in zip(gold, pred, strict=True) if g == c and p != c)
        scores.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
    return float(sum(scores) / len(scores)) if scores else 0.0


def unigram_counts(ds: Dataset, vocab_size: int) -> list[int]:
    """Token counts over a tokenised split's ``input_ids`` (the unigram model's training data)."""
    # numpy only where metrics are computed (start-up time: a task is named without it)
    import numpy as np

    counts = np.zeros(vocab_size, dtype=np.int64)
    for start in range(0, len(ds), 1000):  # a thousand rows at a time: the split need not fit in memory as lists
        rows = ds[start : start + 1000]["input_ids"]
        counts += np.bincount(np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64), minlength=vocab_size)
    return counts.tolist()


def unigram_perplexity(counts: Sequence[int], targets: Sequence[Sequence[int]], shift: bool) -> float:
    """Held-out perplexity of an add-one-smoothed unigram model, ``p(t) = (c(t) + 1) / (N + V)``.

    ``targets`` are label rows; ``-100`` is ignored and with ``shift`` the first token of each row is
    skipped, so the unigram is scored on exactly the tokens the model predicts.
    """
    total = sum(counts) + len(counts)
    log_total = math.log(total)
    nll = 0.0
    n = 0
    for row in targets:
        for t in row[1:] if shift else row:
            if t == -100:
                continue
            nll += log_total - math.log(counts[t] + 1)
            n += 1
    return math.exp(nll / max(n, 1))
