"""The open-ended evaluation's computations from texts and probabilities: the answer a text counts as
(`normalize`), the unique fraction and its bootstrap (`unique_fraction`, `resampled_distinct`,
`open_ended_draws`), the first token's top-t support (`first_token_support`) and metrics.json (`score`)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
import torch

from calibft.evals.bootstrap import interval_block, resample_indices
from calibft.evals.open_ended.job import OPEN_ENDED_HEADLINE_THRESHOLD, OPEN_ENDED_THRESHOLDS
from calibft.lm.chat import RELEASE_THINK_TAG, strip_reasoning, strip_think_tags

# Coverage within this of a threshold reaches it: sums of decimal probabilities (0.5 + 0.3) round either way.
COVERAGE_TOLERANCE = 1e-9
# The surrounding quotes `normalize` removes one pair of, as the authors' normalization does: straight quotes
# only, so that “Paris” and "Paris" stay two answers there and here.
QUOTES = ("'", '"')
NUMERICS = ("logits_dtype", "fp32")  # the `numerics` switch of calibft.core.protocol
NORMALIZATIONS = ("release", "strip_reasoning")  # the `open_ended_normalization` switch of calibft.core.protocol
_WHITESPACE = re.compile(r"\s+")


def normalize(text: str, rule: str = "release") -> str:
    """The answer an output counts as: its first non-empty line once reasoning is removed, whitespace collapsed,
    one pair of matching surrounding quotes removed (with the whitespace they enclosed). Case is kept.

    `rule` (the `open_ended_normalization` switch): `release` removes reasoning as the release's
    `normalize_open_random_output` does (`release_lines`, and think tags deleted from each line again);
    `strip_reasoning` as every evaluation of this pipeline does (`calibft.lm.chat.strip_reasoning`).
    """
    if rule == "release":
        lines = (_WHITESPACE.sub(" ", RELEASE_THINK_TAG.sub("", line).strip()) for line in release_lines(text))
    elif rule == "strip_reasoning":
        lines = (" ".join(line.split()) for line in strip_reasoning(text).splitlines())
    else:
        raise ValueError(f"rule must be one of {NORMALIZATIONS}, got {rule!r}")
    answer = next((line for line in lines if line), "")
    if len(answer) >= 2 and answer[0] == answer[-1] and answer[0] in QUOTES:
        answer = answer[1:-1].strip()
    return answer


def release_lines(text: str) -> list[str]:
    """The lines the release's `normalize_open_random_output` looks through: `<think>...</think>` blocks and
    everything from an unclosed `<think>` on removed, then every `<think>` or `</think>` tag left deleted where it
    stands (so "Rome</think>Milan" reads "RomeMilan"), all case-insensitively: `calibft.lm.chat.strip_think_tags`."""
    return strip_think_tags(text).splitlines()


def unique_fraction(texts: Sequence[str], rule: str = "release") -> float | None:
    """Distinct non-empty normalized answers per sample (None without samples)."""
    if not texts:
        return None
    answers = {normalize(text, rule) for text in texts}
    answers.discard("")
    return len(answers) / len(texts)


def resampled_distinct(answers: Sequence[str], rng: np.random.Generator, replicates: int) -> np.ndarray:
    """[replicates]: the number of distinct non-empty answers among each replicate's resample of `answers` (as
    many as there are, drawn with replacement)."""
    labels, codes = np.unique(np.asarray(answers, dtype=object), return_inverse=True)
    codes = np.where(labels[codes] == "", -1, codes)  # the empty answer counts for nothing
    drawn = np.sort(codes[resample_indices(rng, len(codes), replicates)], axis=1)
    first = np.ones(drawn.shape, dtype=bool)  # the first of each run of equal codes in a sorted row
    first[:, 1:] = drawn[:, 1:] != drawn[:, :-1]
    return (first & (drawn >= 0)).sum(axis=1)


def open_ended_draws(
    answers: Sequence[Sequence[str]], support: np.ndarray, estimate: float | None, rng, replicates: int
) -> dict:
    """[replicates] of each aggregate of `score` over resamples of the samples within each prompt (the prompts
    fixed, drawn in order); `estimate` is `score`'s mean unique fraction.

    The mean unique fraction over the prompts with samples: a resample holds only answers the run saw, and
    repeats some, so its fraction falls below the estimate by a shift that is the resampling's own (several
    standard errors: the plain percentile interval would almost never hold the estimate). The replicates are
    therefore re-centred on the estimate (shifted by the estimate minus their mean, then clipped to [0, 1]),
    keeping the bootstrap's spread (docs/metrics.md, Intervals). The mean support comes from one forward pass
    per prompt and is the same in every replicate."""
    support_draws = np.full(replicates, float(np.mean(support)))
    sampled = [a for a in answers if len(a)]
    if not sampled:
        return {"support": support_draws, "unique_fraction": np.full(replicates, math.nan)}
    unique = np.mean([resampled_distinct(a, rng, replicates) / len(a) for a in sampled], axis=0)
    centred = np.clip(unique - unique.mean() + estimate, 0.0, 1.0)
    return {"support": support_draws, "unique_fraction": centred}


def first_token_support(
    probs: np.ndarray | torch.Tensor, thresholds: Sequence[float] = OPEN_ENDED_THRESHOLDS, numerics: str = "fp32"
) -> np.ndarray:
    """For each threshold t, the smallest k whose k most probable tokens hold at least t of the mass.

    `probs` [..., vocab] gives [..., len(thresholds)]. Ties between equal probabilities do not change k.

    `numerics` (the `numerics` switch of `calibft.core.protocol`): `fp32` computes in float64; a coverage within
    `COVERAGE_TOLERANCE` below t counts as reaching it, so [0.5, 0.3, 0.2] covers 0.8 with 2 tokens although
    0.5 + 0.3 may round below 0.8, and coverage is relative to the row's total, so rows need not sum to exactly 1.
    `logits_dtype` follows the authors' release in the dtype of `probs` (a tensor; bf16 on GPUs) and on its
    device: each row sorted, its running sum taken by `torch.cumsum` in that dtype, compared with t in that dtype
    (0.9 is 0.8984375 in bf16), k the first position that reaches t, the vocabulary size if none does; neither
    tolerance nor renormalization.
    """
    if numerics == "logits_dtype":
        return _release_support(torch.as_tensor(probs), thresholds)
    if numerics != "fp32":
        raise ValueError(f"numerics must be one of {NUMERICS}, got {numerics!r}")
    if isinstance(probs, torch.Tensor):
        probs = probs.double().cpu().numpy()
    probs = np.asarray(probs, dtype=np.float64)
    t = np.asarray(thresholds, dtype=np.float64)
    _check_support_inputs(probs.shape, bool(np.any(probs < 0)), t)
    rows = probs.reshape(-1, probs.shape[-1])
    coverage = np.cumsum(-np.sort(-rows, axis=-1), axis=-1)
    coverage /= coverage[:, -1:]
    # k = 1 + the number of prefixes below t (coverage is non-decreasing, so a binary search finds them)
    k = np.stack([np.searchsorted(row, t - COVERAGE_TOLERANCE, side="left") for row in coverage]) + 1
    return np.minimum(k, probs.shape[-1]).reshape(*probs.shape[:-1], len(t))


def _check_support_inputs(shape: Sequence[int], negative: bool, t: np.ndarray) -> None:
    if len(shape) == 0 or shape[-1] == 0 or negative:
        raise ValueError("probs must be non-negative with at least one token")
    if np.any((t <= 0) | (t > 1)):
        raise ValueError(f"thresholds must be in (0, 1], got {t.tolist()}")


def _release_support(probs: torch.Tensor, thresholds: Sequence[float]) -> np.ndarray:
    """`first_token_support` with `numerics="logits_dtype"`: the release's `top_p_support_sizes`, row by row
    (a 1-D sort and cumsum per row, as it calls them)."""
    _check_support_inputs(probs.shape, bool((probs < 0).any()), np.asarray(thresholds, dtype=np.float64))
    rows = probs.reshape(-1, probs.shape[-1])
    found = []
    for row in rows:
        coverage = torch.cumsum(torch.sort(row, descending=True).values, dim=0)
        reached = torch.stack([coverage >= float(t) for t in thresholds])  # [thresholds, vocab]
        first = reached.to(torch.uint8).argmax(dim=-1) + 1  # argmax gives the first maximum
        found.append(torch.where(reached.any(dim=-1), first, len(row)))
    support = torch.stack(found).cpu().numpy()
    return support.reshape(*probs.shape[:-1], len(thresholds))


def sample_records(
    prompt_index: int, prompt: str, texts: Sequence[str], finished: np.ndarray, rule: str = "release"
) -> list[dict]:
    """One record per answer, with the normalized form it counts as under `rule`."""
    return [
        {
            "prompt_index": prompt_index,
            "prompt": prompt,
            "index": i,
            "text": text,
            "normalized": normalize(text, rule),
            "finished": bool(done),
        }
        for i, (text, done) in enumerate(zip(texts, finished, strict=True))
    ]


def score(
    prompts: Sequence[str],
    records: Sequence[dict],
    supports: Sequence[dict],
    thresholds: Sequence[float],
    headline_threshold: float = OPEN_ENDED_HEADLINE_THRESHOLD,
    replicates: int = 0,
    bootstrap_seed: int = 0,
    normalization: str = "release",
    **header,
) -> dict:
    """metrics.json: per prompt the support at the headline threshold and the unique fraction (from the stored
    texts, normalized again by the rule `normalization`), and their means over prompts, with the mean support at
    every threshold; with `replicates`, the percentile bootstrap interval of each mean over resamples of the
    samples within each prompt (`intervals`, `open_ended_draws`, seeded by `bootstrap_seed`)."""
    thresholds = [float(t) for t in thresholds]
    column = thresholds.index(headline_threshold)
    texts: list[list[str]] = [[] for _ in prompts]
    for record in records:
        texts[record["prompt_index"]].append(record["text"])
    support = {row["prompt_index"]: row["support"] for row in supports}
    rows = [
        {
            "prompt_index": i,
            "prompt": prompt,
            "samples": len(texts[i]),
            "support": support[i][column],
            "unique_fraction": unique_fraction(texts[i], normalization),
        }
        for i, prompt in enumerate(prompts)
    ]
    fractions = [row["unique_fraction"] for row in rows if row["unique_fraction"] is not None]
    table = np.array([support[i] for i in range(len(prompts))], dtype=np.float64)
    metrics = {
        **header,
        "thresholds": thresholds,
        "headline_threshold": headline_threshold,
        "aggregate": {
            "support": float(np.mean([row["support"] for row in rows])),
            "unique_fraction": float(np.mean(fractions)) if fractions else None,
            "support_by_threshold": table.mean(axis=0).tolist(),
            "num_prompts": len(rows),
        },
        "prompts": rows,
    }
    if replicates:
        answers = [[normalize(text, normalization) for text in prompt_texts] for prompt_texts in texts]
        headline = np.array([row["support"] for row in rows], dtype=np.float64)
        estimate = metrics["aggregate"]["unique_fraction"]
        draws = open_ended_draws(answers, headline, estimate, np.random.default_rng(bootstrap_seed), replicates)
        metrics["intervals"] = interval_block(draws, bootstrap_seed, "samples within prompts")
    return metrics
