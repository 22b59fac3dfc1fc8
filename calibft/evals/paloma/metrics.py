"""PALOMA's computations from token counts and NLLs: the windows a document is scored in (`windows`), the totals
of a set of documents and their perplexity and bits per byte (`Totals`, `summarize`), their bootstrap over the
documents of each slice (`paloma_draws`) and summary.json (`score`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from calibft.core.seeds import seed_for
from calibft.evals.bootstrap import interval_block, ratio, resampled_sums
from calibft.evals.paloma.job import PALOMA_STRIDE, PALOMA_WINDOW, check_window

EMPTY_DOCUMENTS = ("skip", "count")  # the `paloma_empty_documents` switch


def windows(n_tokens: int, window: int = PALOMA_WINDOW, stride: int = PALOMA_STRIDE) -> list[tuple[int, int, int]]:
    """(start, end, first_scored) of each window over a document of `n_tokens` tokens.

    A window holds tokens [start, end) and scores tokens [first_scored, end), each predicted from the tokens of
    the window before it. Windows start at 0, stride, 2*stride, ... until one reaches the document's end; the
    first scores every token after the first, each later one the tokens past the previous window's end, with
    at least `window - stride` tokens of context. A document of at most `window` tokens is one window; one of
    0 or 1 tokens has nothing to score and no window.
    """
    check_window(window, stride)
    if n_tokens < 0:
        raise ValueError(f"n_tokens must be >= 0, got {n_tokens}")
    spans, start, scored_to = [], 0, 1
    while scored_to < n_tokens:
        end = min(start + window, n_tokens)
        spans.append((start, end, scored_to))
        start, scored_to = start + stride, end
    return spans


@dataclass(frozen=True)
class Totals:
    """Summed NLL (nats), scored tokens and UTF-8 bytes of a set of documents, how many documents, how many
    more were left out of these totals (`skipped`: empty documents under `skip`), and how many rows of the
    slice files had no string text (`non_string`: never documents, under either value of the switch)."""

    nll: float = 0.0
    tokens: int = 0
    bytes: int = 0
    documents: int = 0
    skipped: int = 0
    non_string: int = 0

    def __add__(self, other: Totals) -> Totals:
        if not isinstance(other, Totals):
            return NotImplemented
        return Totals(
            self.nll + other.nll,
            self.tokens + other.tokens,
            self.bytes + other.bytes,
            self.documents + other.documents,
            self.skipped + other.skipped,
            self.non_string + other.non_string,
        )

    @property
    def perplexity(self) -> float | None:
        """exp(NLL per scored token); None without scored tokens."""
        return math.exp(self.nll / self.tokens) if self.tokens else None

    @property
    def bits_per_byte(self) -> float | None:
        """NLL in bits per UTF-8 byte; None without bytes."""
        return self.nll / (math.log(2) * self.bytes) if self.bytes else None

    def figures(self) -> dict:
        return {
            "nll": self.nll,
            "tokens": self.tokens,
            "bytes": self.bytes,
            "documents": self.documents,
            "skipped_documents": self.skipped,
            "non_string_documents": self.non_string,
            "perplexity": self.perplexity,
            "bits_per_byte": self.bits_per_byte,
        }


def summarize(per_slice: Mapping[str, Totals]) -> dict:
    """The figures of each slice (in the mapping's order) and of their pooled totals: the sums of the slice
    totals, so that a slice weighs by its tokens and bytes."""
    pooled = sum(per_slice.values(), Totals())
    return {"slices": {name: totals.figures() for name, totals in per_slice.items()}, "pooled": pooled.figures()}


def document_totals(record: Mapping, empty_documents: str = "count") -> Totals:
    """One document record's totals: under `skip`, an empty one (its `empty` field) is only a skipped document."""
    if empty_documents not in EMPTY_DOCUMENTS:
        raise ValueError(f"empty_documents must be one of {EMPTY_DOCUMENTS}, got {empty_documents!r}")
    if empty_documents == "skip" and record["empty"]:
        return Totals(skipped=1)
    return Totals(float(record["nll"]), int(record["tokens"]), int(record["bytes"]), 1)


def metric_draws(sums: np.ndarray) -> dict[str, np.ndarray]:
    """Perplexity and bits per byte of [replicates, 3] resampled (NLL, scored tokens, bytes) totals, NaN where a
    replicate has no token (no byte)."""
    nll, tokens, n_bytes = sums.T
    with np.errstate(over="ignore"):
        perplexity = np.exp(ratio(nll, tokens))
    return {"perplexity": perplexity, "bits_per_byte": ratio(nll, math.log(2) * n_bytes)}


def slice_sums(records: Sequence[Mapping], empty_documents: str, seed: int, replicates: int) -> np.ndarray:
    """[replicates, 3]: the (NLL, scored tokens, bytes) totals of resamples of a slice's documents (every record,
    as many as there are, drawn with replacement; a skipped empty document adds nothing)."""
    totals = [document_totals(record, empty_documents) for record in records]
    values = np.array([[t.nll, t.tokens, t.bytes] for t in totals], dtype=np.float64).reshape(len(totals), 3)
    return resampled_sums(values, np.random.default_rng(seed), replicates)


def slice_seed(seed: int, name: str) -> int:
    """The seed of a slice's resamples: the run's seed and the slice alone, so that every model and condition
    resamples the slice's documents alike (their replicates pair up in a mean over models)."""
    return seed_for(seed, "bootstrap", "paloma", name)


def paloma_draws(by_slice: Mapping[str, Sequence[Mapping]], empty_documents: str, seed: int, replicates: int) -> dict:
    """[replicates] of each slice's perplexity and bits per byte (`slices/<slice>/<metric>`) and of the pooled
    ones (`pooled/<metric>`: from the sums of the slices' resampled totals, the slices fixed), over resamples of
    the documents within each slice (`slice_sums`, `slice_seed`)."""
    sums = {
        name: slice_sums(rows, empty_documents, slice_seed(seed, name), replicates) for name, rows in by_slice.items()
    }
    draws = {
        f"slices/{name}/{metric}": values for name, s in sums.items() for metric, values in metric_draws(s).items()
    }
    pooled = metric_draws(sum(sums.values(), np.zeros((replicates, 3))))
    return draws | {f"pooled/{metric}": values for metric, values in pooled.items()}


def score(
    records: Sequence[Mapping],
    slices: Sequence[str],
    *,
    empty_documents: str = "count",
    non_string_documents: Mapping[str, int] | None = None,
    replicates: int = 0,
    bootstrap_seed: int = 0,
    **header,
) -> dict:
    """summary.json from the per-document records: per slice (every one of `slices`, in that order, also one
    without documents) and pooled, empty documents skipped or counted as `empty_documents` says (the
    `paloma_empty_documents` switch; `skip` needs the records' `empty` field), with each slice's count of rows
    without a string text (`non_string_documents`, from `runner.load_documents`; 0 for a slice it does not name);
    with `replicates`, `intervals` of every perplexity and bits per byte (`paloma_draws`, seeded from
    `bootstrap_seed`), each slice's replicates kept (`draws`). Rows without a string text have no record, so
    they add nothing to the totals or the resamples."""
    by_slice: dict[str, list[Mapping]] = {name: [] for name in slices}
    for record in records:
        if record["slice"] not in by_slice:
            raise ValueError(f"a document of slice {record['slice']!r}, not one of {list(slices)}")
        by_slice[record["slice"]].append(record)
    non_string = dict(non_string_documents or {})
    if unknown := sorted(set(non_string) - set(by_slice)):
        raise ValueError(f"non-string counts of slices {unknown}, not among {list(slices)}")
    per_slice = {
        name: sum((document_totals(r, empty_documents) for r in rows), Totals(non_string=non_string.get(name, 0)))
        for name, rows in by_slice.items()
    }
    summary = {**header, "empty_documents": empty_documents, **summarize(per_slice)}
    if replicates:
        draws = paloma_draws(by_slice, empty_documents, bootstrap_seed, replicates)
        kept = [key for key in draws if key.startswith("slices/")]
        units = {name: len(rows) for name, rows in by_slice.items()}
        summary["intervals"] = interval_block(
            draws, bootstrap_seed, "documents within each slice", kept=kept, units=units
        )
    return summary
