"""PALOMA perplexity and bits per byte (docs/metrics.md, PALOMA): does calibration fine-tuning cost language
modelling?

    python -m calibft.evals.paloma JOB     # JOB: a PalomaJob as JSON text or file

The model reads the documents of the PALOMA test slices (`allenai/paloma`, split `test`: `SLICES`) as plain
text, without chat template. Each document is tokenized on its own, without special tokens, and scored in
windows of `window` tokens (2048) that start every `stride` tokens (1024): every token but the document's
first is scored exactly once, the first window scoring all its tokens after the first and every later window
only the tokens the previous one did not reach, each with the context of its window (`windows`).

The score of a set of documents is the sum of their token NLLs (float32 log-softmax of the logits, summed in
float64; or in the logits' dtype, as the authors' release: `documents_nll`), the number of scored tokens and
the number of UTF-8 bytes of their texts (all of them, the unscored first token's included):

    perplexity    = exp(sum NLL / scored tokens)
    bits per byte = sum NLL / (ln 2 * sum bytes)

per slice for the slice table, and pooled over the slices (the sums of the slice totals) for the model
summary. A document whose text is empty or only whitespace is left out of every total under `skip` (the
authors' release skips such rows: no document, no bytes) and counted like any other under `count` (a
document, its bytes, the NLL of whatever tokens it has): the `paloma_empty_documents` switch of
`calibft.core.protocol`. A document of one token is counted under both, with its bytes and no scored token.
A row whose `text` is not a string (missing, null, a number, a list) is no document under either value: it is
skipped, counted per slice (`non_string_documents`) and reported in the log (`load_documents`), as the
release skips it (its `num_skipped_rows` counts such rows with the empty ones).

Inputs: one JSON-lines file per slice (gzip-compressed when named `.gz`) with a `text` field per document, as
the workflow downloads PALOMA and as the offline demo ships a few documents per slice. Outputs in `out_dir`:
`documents.jsonl.gz` (one object per document: slice, index, nll, tokens, bytes, empty; `index` is the
document's place among the slice's documents, `tokens` counts the scored tokens, `empty` marks an empty or
whitespace-only text) and `summary.json`, which `score` computes from those records and the per-slice counts
of rows without a string text (`documents`, `skipped_documents` and `non_string_documents` per slice and
pooled, `empty_documents` the rule), with the bootstrap interval of each perplexity and bits per byte over
resamples of the documents of each slice (`intervals`, `paloma_draws`; each slice's replicates kept for the
tables' means over models).
"""

from __future__ import annotations

import functools
import logging
import math
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from calibft.core.checkpoints import checkpoint_folder, finish_checkpoints, per_prompt
from calibft.core.io import read_job, read_jsonl, write_json, write_jsonl
from calibft.core.seeds import seed_for
from calibft.evals.bootstrap import REPLICATES, interval_block, ratio, resampled_sums
from calibft.evals.paloma_job import PALOMA_BATCH_SIZE, PALOMA_STRIDE, PALOMA_WINDOW, PalomaJob, check_window
from calibft.lm.generation import inference, input_device

SLICES: tuple[str, ...] = ("wikitext_103", "c4_en", "dolma-v1_5", "mc4", "ptb", "redpajama", "falcon-refinedweb")
# Documents tokenized and scored together (their windows batched across documents, longest first): bounds the
# token ids held at once and sets the step of the progress bar.
DOCUMENTS_PER_CHUNK = 256
# Any id the model knows: padding is masked and never scored, and causal attention keeps it out of the
# positions before it, so its value cannot change a result.
PAD_ID = 0
NUMERICS = ("logits_dtype", "fp32")  # the `numerics` switch of calibft.core.protocol
EMPTY_DOCUMENTS = ("skip", "count")  # the `paloma_empty_documents` switch

logger = logging.getLogger(__name__)


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


def documents_nll(
    model,
    documents: Sequence[Sequence[int]],
    window: int = PALOMA_WINDOW,
    stride: int = PALOMA_STRIDE,
    batch_size: int = PALOMA_BATCH_SIZE,
    numerics: str = "fp32",
) -> list[tuple[float, int]]:
    """(summed NLL, scored tokens) of each document (token ids), its windows scored as `windows` cuts them.

    The windows of all the documents are batched together, longest first, right-padded with an attention mask.
    Each window's NLL is summed on its own and a document's windows are added in their order (as Python floats),
    so the batch size changes no sum beyond the arithmetic of the forward pass. The model is in eval mode (no
    dropout) meanwhile.

    `numerics` (the `numerics` switch of `calibft.core.protocol`): `fp32` takes float32 log-softmax of the logits
    and sums a window's token NLLs in float64. `logits_dtype` computes as the authors' release does, in the
    logits' dtype (bf16 on GPUs): the token NLLs by `F.cross_entropy` on those logits, a window's sum taken in
    that dtype (its release sums a batch of windows of one document, and its PALOMA batch holds one window).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if numerics not in NUMERICS:
        raise ValueError(f"numerics must be one of {NUMERICS}, got {numerics!r}")
    ids = [torch.as_tensor(list(doc), dtype=torch.long) for doc in documents]
    spans = [(d, span) for d, doc in enumerate(ids) for span in windows(len(doc), window, stride)]
    order = sorted(range(len(spans)), key=lambda i: spans[i][1][0] - spans[i][1][1])  # longest first, stable
    window_nll = [0.0] * len(spans)
    with inference(model):
        for begin in range(0, len(order), batch_size):
            batch = order[begin : begin + batch_size]
            input_ids, logits = window_logits(model, [ids[spans[i][0]][spans[i][1][0] : spans[i][1][1]] for i in batch])
            for r, i in enumerate(batch):
                start, end, first = spans[i][1]
                # the logits at position p predict the token at p + 1
                scoring = logits[r, first - 1 - start : end - 1 - start]
                targets = input_ids[r, first - start : end - start].to(scoring.device)
                if numerics == "logits_dtype":
                    window_nll[i] = F.cross_entropy(scoring, targets, reduction="none").sum().item()
                    continue
                log_probs = token_log_probs(scoring)
                nll = -log_probs.gather(-1, targets[:, None]).squeeze(-1)
                window_nll[i] = nll.double().sum().item()
    totals = [(0.0, 0)] * len(ids)
    for (d, (_, end, first)), nll in zip(spans, window_nll, strict=True):
        totals[d] = (totals[d][0] + nll, totals[d][1] + end - first)
    return totals


def window_logits(model, rows: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch of windows (token ids), right-padded with `PAD_ID` to the longest under an attention mask: the
    batch's token ids and every position's logits, on the model's device. No cache is kept: each window is scored
    once."""
    device = input_device(model)
    width = max(len(row) for row in rows)
    input_ids = torch.full((len(rows), width), PAD_ID, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for r, row in enumerate(rows):
        input_ids[r, : len(row)], mask[r, : len(row)] = row, 1
    input_ids = input_ids.to(device)
    return input_ids, model(input_ids=input_ids, attention_mask=mask.to(device), use_cache=False).logits


def token_log_probs(scoring: torch.Tensor) -> torch.Tensor:
    """float32 log-softmax of one window's logits at its scored tokens (the `fp32` numerics)."""
    return torch.log_softmax(scoring.float(), dim=-1)


def largest_window_batch(model, batch_size: int = PALOMA_BATCH_SIZE, window: int = PALOMA_WINDOW) -> None:
    """The largest batch `documents_nll` runs, on token ids of zeros (the meta device for the memory estimate):
    `batch_size` windows of `window` tokens, every position's logits, and a first window's log-probabilities of
    its scored tokens (one window's at a time)."""
    _, logits = window_logits(model, [torch.zeros(window, dtype=torch.long)] * batch_size)
    token_log_probs(logits[0, : window - 1])


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
    without a string text (`non_string_documents`, from `load_documents`; 0 for a slice it does not name);
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


class SliceDocuments(NamedTuple):
    """The documents of one slice file: the string texts in file order, and how many rows were skipped for
    having no string `text` (missing, null, a number, a list...)."""

    texts: list[str]
    non_string: int


def load_documents(path: str | Path, max_documents: int | None = None) -> SliceDocuments:
    """The documents of one slice file (JSON lines with a `text` field), the first `max_documents` when given.

    A row whose `text` is not a string cannot be scored, so it is skipped under both values of the
    `paloma_empty_documents` switch and counted, with a warning naming the file; it does not count toward
    `max_documents`, which, as in the release, counts the documents taken (the rows after the
    `max_documents`-th document are not counted). An empty or blank string is a document here, under both
    values: `score` applies the switch to it.
    """
    texts: list[str] = []
    non_string = 0
    for record in read_jsonl(path):
        if max_documents is not None and len(texts) >= max_documents:
            break
        text = record.get("text")
        if isinstance(text, str):
            texts.append(text)
        else:
            non_string += 1
    if non_string:
        logger.warning(
            "%s: skipped %d row(s) whose 'text' is missing or not a string; %d document(s) kept",
            path,
            non_string,
            len(texts),
        )
    return SliceDocuments(texts, non_string)


def slice_records(model, tokenizer, name: str, texts: Sequence[str], job: PalomaJob) -> list[dict]:
    """One record per document of a slice: its summed NLL (`documents_nll` with the job's `numerics`), scored
    tokens, UTF-8 bytes and whether its text is empty or only whitespace (every document is scored; `score`
    decides what enters the totals)."""
    records = []
    with tqdm(total=len(texts), desc=f"paloma {job.model_key}/{job.condition} {name}") as progress:
        for begin in range(0, len(texts), DOCUMENTS_PER_CHUNK):
            chunk = texts[begin : begin + DOCUMENTS_PER_CHUNK]
            ids = tokenizer(list(chunk), add_special_tokens=False, verbose=False)["input_ids"]
            scores = documents_nll(model, ids, job.window, job.stride, job.batch_size, job.protocol["numerics"])
            for i, (text, (nll, tokens)) in enumerate(zip(chunk, scores, strict=True)):
                record = {"slice": name, "index": begin + i, "nll": nll, "tokens": tokens, "bytes": len(text.encode())}
                records.append({**record, "empty": not text.strip()})
            progress.update(len(chunk))
    return records


def run(job: PalomaJob) -> None:
    started = time.time()
    tokenizer, model = job.load()
    longest = getattr(model.config, "max_position_embeddings", None)
    if longest is not None and job.window > longest:
        raise ValueError(f"window {job.window} is longer than the model's {longest} positions")
    folder = checkpoint_folder(job)
    records, non_string = [], {}
    for name, path in job.slices.items():
        # read again on a resumed run too: the checkpoints keep the records, not the count of skipped rows
        documents = load_documents(path, job.max_documents)
        non_string[name] = documents.non_string
        produce = functools.partial(slice_records, model, tokenizer, name, documents.texts, job)
        records.extend(per_prompt(folder, f"slice_{name}", produce))
    out = Path(job.out_dir)
    write_jsonl(out / "documents.jsonl.gz", records)
    header = job.header("paloma", wall_time_s=time.time() - started)
    empty_documents = job.protocol["paloma_empty_documents"]
    bootstrap = {"replicates": REPLICATES, "bootstrap_seed": job.seed}
    summary = score(
        records,
        list(job.slices),
        empty_documents=empty_documents,
        non_string_documents=non_string,
        **bootstrap,
        **header,
    )
    write_json(out / "summary.json", summary)
    job.write_provenance(model, tokenizer, None, **job.slices)
    finish_checkpoints(folder)


def main(argv: list[str] | None = None) -> None:
    run(read_job(PalomaJob, "calibft.evals.paloma", sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
