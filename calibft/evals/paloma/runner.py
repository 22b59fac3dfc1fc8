"""What `python -m calibft.evals.paloma JOB` runs: one `PalomaJob`, each slice's documents read
(`load_documents`) and scored in windows (`documents_nll`, checkpointed per slice), then documents.jsonl.gz,
summary.json (`calibft.evals.paloma.metrics.score`) and provenance.json."""

from __future__ import annotations

import functools
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from tqdm import tqdm

from calibft.core.checkpoints import checkpoint_folder, finish_checkpoints, per_prompt
from calibft.core.io import read_job, read_jsonl, write_json, write_jsonl
from calibft.evals.bootstrap import REPLICATES
from calibft.evals.paloma.job import PALOMA_BATCH_SIZE, PALOMA_STRIDE, PALOMA_WINDOW, PalomaJob
from calibft.evals.paloma.metrics import score, windows
from calibft.lm.generation import inference, input_device

# Documents tokenized and scored together (their windows batched across documents, longest first): bounds the
# token ids held at once and sets the step of the progress bar.
DOCUMENTS_PER_CHUNK = 256
# Any id the model knows: padding is masked and never scored, and causal attention keeps it out of the
# positions before it, so its value cannot change a result.
PAD_ID = 0
NUMERICS = ("logits_dtype", "fp32")  # the `numerics` switch of calibft.core.protocol

logger = logging.getLogger(__name__)


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
