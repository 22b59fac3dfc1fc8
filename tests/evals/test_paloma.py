import copy
import json
import math
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch

from calibft.core.io import read_jsonl, write_jsonl
from calibft.core.protocol import resolve
from calibft.core.seeds import seed_for
from calibft.evals import bootstrap
from calibft.evals.bootstrap import percentile_interval, resample_indices, resampled_sums
from calibft.evals.paloma.job import PALOMA_BATCH_SIZE, PALOMA_STRIDE, PALOMA_WINDOW, SLICES, PalomaJob
from calibft.evals.paloma.metrics import Totals, score, slice_seed, slice_sums, summarize, windows
from calibft.evals.paloma.runner import SliceDocuments, documents_nll, load_documents, main, run, slice_records
from calibft.lm.models import load_model, load_tokenizer

TEXTS = [
    "The quick brown fox jumps over the lazy dog. Then it ran into the forest and was never seen again.",
    "Paris is the capital of France.",
    "café ☕ naïve",
    "",
    "A",
    "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
]


def document_nll(
    model, token_ids, window=PALOMA_WINDOW, stride=PALOMA_STRIDE, batch_size=PALOMA_BATCH_SIZE, numerics="fp32"
):
    """(summed NLL, scored tokens) of one document: `documents_nll` of it alone."""
    return documents_nll(model, [token_ids], window, stride, batch_size, numerics)[0]


@pytest.fixture(scope="module")
def tiny(briefly_trained_model):
    tokenizer = load_tokenizer(briefly_trained_model)
    model = load_model(briefly_trained_model, "fp32", "cpu").eval()
    return tokenizer, model


@pytest.fixture(scope="module")
def ids(tiny) -> list[list[int]]:
    tokenizer, _ = tiny
    return tokenizer(TEXTS, add_special_tokens=False)["input_ids"]


def _token_nll(model, context: list[int], target: int) -> float:
    """By hand: the NLL of `target` after `context`, from one forward pass of the context alone."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([context])).logits[0, -1]
    return -torch.log_softmax(logits.double(), -1)[target].item()


# windows


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 8, 9, 11, 12, 13, 20, 37])
def test_windows_score_every_token_but_the_first_once_with_its_context(n):
    spans = windows(n, 8, 4)
    scored = Counter(t for _, end, first in spans for t in range(first, end))
    assert scored == Counter(range(1, n))
    for k, (start, end, first) in enumerate(spans):
        assert start == 4 * k and end - start <= 8 and start < first < end
        assert first == (1 if k == 0 else spans[k - 1][1])  # the tokens the previous window did not reach
        if k > 0:
            assert first - start >= 4  # at least window - stride tokens of context
            assert end == min(start + 8, n)
    if n <= 8:
        assert spans == ([(0, n, 1)] if n >= 2 else [])


def test_windows_of_the_reference_setting():
    assert windows(2048) == [(0, 2048, 1)]
    assert windows(2049) == [(0, 2048, 1), (1024, 2049, 2048)]
    assert windows(5000) == [(0, 2048, 1), (1024, 3072, 2048), (2048, 4096, 3072), (3072, 5000, 4096)]
    assert windows(20, 8, 4) == [(0, 8, 1), (4, 12, 8), (8, 16, 12), (12, 20, 16)]


@pytest.mark.parametrize(("window", "stride"), [(8, 8), (8, 9), (8, 0), (1, 1)])
def test_windows_reject_strides_that_leave_tokens_without_context(window, stride):
    with pytest.raises(ValueError, match="stride"):
        windows(20, window, stride)


# NLL


def test_a_document_within_one_window_is_one_full_context_pass(tiny, ids):
    _, model = tiny
    doc = ids[0]
    assert 10 < len(doc) <= 128
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([doc])).logits[0]
    expected = -torch.log_softmax(logits[:-1].float(), -1).gather(-1, torch.tensor(doc[1:])[:, None]).double().sum()
    nll, tokens = document_nll(model, doc, window=128, stride=64)
    assert tokens == len(doc) - 1
    assert nll == pytest.approx(expected.item(), rel=1e-6)
    assert document_nll(model, doc, window=len(doc), stride=1) == pytest.approx((nll, tokens), rel=1e-6)


def test_a_long_document_is_scored_token_by_token_with_its_window_context(tiny, ids):
    _, model = tiny
    doc = ids[0]
    assert len(doc) > 20
    by_hand = 0.0
    for t in range(1, len(doc)):
        # token t < 8 sees the document's start; later ones the window at the largest multiple of 4 that leaves
        # them at least 4 tokens of context
        start = 0 if t < 8 else (t - 4) // 4 * 4
        by_hand += _token_nll(model, doc[start:t], doc[t])
    nll, tokens = document_nll(model, doc, window=8, stride=4, batch_size=3)
    assert tokens == len(doc) - 1
    assert nll == pytest.approx(by_hand, rel=1e-5)
    full, _ = document_nll(model, doc, window=512, stride=256)
    assert abs(full - nll) > 1e-3  # the windows' shorter context shows


def test_batching_and_padding_change_no_result(tiny, ids):
    _, model = tiny
    alone = [document_nll(model, doc, window=8, stride=4, batch_size=1) for doc in ids]
    for batch_size in (2, 5, 100):
        together = documents_nll(model, ids, window=8, stride=4, batch_size=batch_size)
        assert [tokens for _, tokens in together] == [tokens for _, tokens in alone]
        for (a, _), (b, _) in zip(alone, together, strict=True):
            assert b == pytest.approx(a, rel=1e-6, abs=1e-9)
    # documents shorter than the window: rows of very different lengths in one batch
    short = documents_nll(model, ids, window=64, stride=32, batch_size=100)
    for doc, got in zip(ids, short, strict=True):
        assert got == pytest.approx(document_nll(model, doc, window=64, stride=32, batch_size=1), rel=1e-6)


def test_documents_of_zero_or_one_token_score_nothing(tiny):
    _, model = tiny
    assert documents_nll(model, [[], [5]], window=8, stride=4) == [(0.0, 0), (0.0, 0)]


# totals


def test_perplexity_and_bits_per_byte_by_hand():
    totals = Totals(nll=10 * math.log(2), tokens=5, bytes=4, documents=2)
    assert totals.perplexity == pytest.approx(4.0)  # exp(2 ln 2)
    assert totals.bits_per_byte == pytest.approx(2.5)  # 10 bits over 4 bytes
    assert Totals().perplexity is None and Totals().bits_per_byte is None
    assert Totals(1.0, 2, 3, 1) + Totals(0.5, 4, 6, 2) == Totals(1.5, 6, 9, 3)


def test_pooled_totals_are_the_sums_of_the_slice_totals():
    per_slice = {"ptb": Totals(30.0, 10, 40, 2), "c4_en": Totals(5.0, 2, 12, 1), "mc4": Totals()}
    summary = summarize(per_slice)
    assert list(summary["slices"]) == ["ptb", "c4_en", "mc4"]
    assert summary["pooled"] == Totals(35.0, 12, 52, 3).figures()
    assert summary["pooled"]["perplexity"] == pytest.approx(math.exp(35 / 12))
    assert summary["pooled"]["bits_per_byte"] == pytest.approx(35 / (52 * math.log(2)))
    assert summary["slices"]["ptb"]["perplexity"] == pytest.approx(math.exp(3.0))
    assert summary["slices"]["mc4"]["perplexity"] is None


# the job


def _job(root: Path, tiny_dir: Path, out: str, **changes) -> PalomaJob:
    fields = dict(
        model=str(tiny_dir), model_key="tiny", tokenizer=str(tiny_dir), chat={}, condition="base", seed=3,
        precision="fp32", out_dir=str(root / out), window=8, stride=4, batch_size=4,
        slices={"ptb": str(root / "ptb.jsonl"), "c4_en": str(root / "c4_en.jsonl.gz")},
    )  # fmt: skip
    return PalomaJob(**(fields | changes))


# ptb's file: TEXTS[:4] with rows whose text is not a string among them (null, missing, a number), which no
# document, index or total of the run may show
NON_STRING_ROWS = {1: {"text": None, "id": "null"}, 4: {"id": "missing"}, 6: {"text": 7, "id": "number"}}


def _ptb_rows() -> list[dict]:
    documents = iter({"text": t, "id": i} for i, t in enumerate(TEXTS[:4]))
    return [NON_STRING_ROWS[row] if row in NON_STRING_ROWS else next(documents) for row in range(7)]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, briefly_trained_model) -> Path:
    root = tmp_path_factory.mktemp("paloma")
    (root / "ptb.jsonl").write_text("".join(json.dumps(row) + "\n" for row in _ptb_rows()))
    write_jsonl(root / "c4_en.jsonl.gz", [{"text": t} for t in TEXTS[3:]])
    main([json.dumps(asdict(_job(root, briefly_trained_model, "base")))])
    return root


def test_a_run_writes_every_document_and_recomputable_metrics(workdir, tiny, ids):
    _, model = tiny
    records = read_jsonl(workdir / "base" / "documents.jsonl.gz")
    order = [("ptb", i) for i in range(4)] + [("c4_en", i) for i in range(3)]
    assert [(r["slice"], r["index"]) for r in records] == order
    assert set(records[0]) == {"slice", "index", "nll", "tokens", "bytes", "empty"}
    assert [r["empty"] for r in records] == [False, False, False, True, True, False, False]
    texts = TEXTS[:4] + TEXTS[3:]
    docs = ids[:4] + ids[3:]
    for record, text, doc in zip(records, texts, docs, strict=True):
        assert record["bytes"] == len(text.encode("utf-8"))
        assert (record["nll"], record["tokens"]) == pytest.approx(document_nll(model, doc, 8, 4), rel=1e-6)
    assert records[2]["bytes"] == len("café ☕ naïve") + 1 + 2 + 1  # é, ï two bytes, ☕ three

    metrics = json.loads((workdir / "base" / "summary.json").read_text())
    assert metrics["evaluation"] == "paloma" and metrics["job"]["window"] == 8
    assert metrics["empty_documents"] == "skip"  # the release's protocol, the job's default
    assert list(metrics["slices"]) == ["ptb", "c4_en"]
    for name in ("ptb", "c4_en"):
        mine = [r for r in records if r["slice"] == name]
        nll, tokens, size = (sum(r[k] for r in mine) for k in ("nll", "tokens", "bytes"))
        figures = metrics["slices"][name]
        assert (figures["nll"], figures["tokens"], figures["bytes"]) == pytest.approx((nll, tokens, size))
        assert figures["perplexity"] == pytest.approx(math.exp(nll / tokens))
        assert figures["bits_per_byte"] == pytest.approx(nll / (math.log(2) * size))
    pooled = metrics["pooled"]
    assert pooled["tokens"] == sum(r["tokens"] for r in records) == sum(len(d) - 1 for d in docs if d)
    assert pooled["nll"] == pytest.approx(sum(r["nll"] for r in records))
    assert (pooled["documents"], pooled["skipped_documents"]) == (5, 2)  # "" in both slices
    figures = [metrics["slices"]["ptb"], metrics["slices"]["c4_en"], pooled]
    assert [f["non_string_documents"] for f in figures] == [3, 0, 3]  # ptb's null, missing and numeric texts
    recomputed = score(records, ["ptb", "c4_en"], empty_documents="skip", non_string_documents={"ptb": 3})
    assert recomputed["slices"] == metrics["slices"] and recomputed["pooled"] == metrics["pooled"]


def test_max_documents_keeps_the_first_of_each_slice(workdir, briefly_trained_model, caplog):
    with caplog.at_level("WARNING", logger="calibft.evals.paloma.runner"):
        run(_job(workdir, briefly_trained_model, "two", max_documents=2, batch_size=1))
    records = read_jsonl(workdir / "two" / "documents.jsonl.gz")
    full = read_jsonl(workdir / "base" / "documents.jsonl.gz")
    assert [(r["slice"], r["index"]) for r in records] == [("ptb", 0), ("ptb", 1), ("c4_en", 0), ("c4_en", 1)]
    kept = [r for r in full if r["index"] < 2]
    for got, expected in zip(records, kept, strict=True):
        assert got["nll"] == pytest.approx(expected["nll"], rel=1e-6)
    pooled = json.loads((workdir / "two" / "summary.json").read_text())["pooled"]
    assert (pooled["documents"], pooled["skipped_documents"]) == (3, 1)  # c4_en's first document is empty
    # ptb's null row comes before its second document; its other two come after it and are not counted
    assert pooled["non_string_documents"] == 1
    assert [r.getMessage() for r in caplog.records] == [
        f"{workdir / 'ptb.jsonl'}: skipped 1 row(s) whose 'text' is missing or not a string; 2 document(s) kept"
    ]


class WithBos:
    """A tokenizer that opens every document with a BOS token unless asked for no special tokens (as Llama's)."""

    def __init__(self, tokenizer, bos: int):
        self.tokenizer, self.bos = tokenizer, bos

    def __call__(self, texts, add_special_tokens=True, **kwargs):
        ids = self.tokenizer(texts, add_special_tokens=False, **kwargs)["input_ids"]
        return {"input_ids": [([self.bos] if add_special_tokens else []) + doc for doc in ids]}


def test_documents_are_scored_without_special_tokens(tiny, ids, workdir, briefly_trained_model):
    tokenizer, model = tiny
    job = _job(workdir, briefly_trained_model, "unused")
    records = slice_records(model, WithBos(tokenizer, tokenizer.eos_token_id), "ptb", TEXTS, job)
    assert [r["tokens"] for r in records] == [max(len(doc) - 1, 0) for doc in ids]
    for record, doc in zip(records, ids, strict=True):
        assert record["nll"] == pytest.approx(document_nll(model, doc, 8, 4)[0], rel=1e-6)


def test_an_interrupted_run_resumes_from_its_finished_slices(workdir, briefly_trained_model, monkeypatch):
    import calibft.evals.paloma.runner as paloma

    job = _job(workdir, briefly_trained_model, "resumed", checkpoint_dir=str(workdir / "checkpoints"))
    real = paloma.slice_records

    def fail_on(name):
        def records(model, tokenizer, slice_name, texts, job):
            if slice_name == name:
                raise RuntimeError(f"preempted in {name}")
            return real(model, tokenizer, slice_name, texts, job)

        return records

    monkeypatch.setattr(paloma, "slice_records", fail_on("c4_en"))
    with pytest.raises(RuntimeError, match="preempted"):
        run(job)
    assert (workdir / "checkpoints" / "slice_ptb.jsonl.gz").exists()
    monkeypatch.setattr(paloma, "slice_records", fail_on("ptb"))  # ptb must come from its checkpoint
    run(job)
    assert not (workdir / "checkpoints").exists()
    resumed = json.loads((workdir / "resumed" / "summary.json").read_text())
    complete = json.loads((workdir / "base" / "summary.json").read_text())
    assert resumed["pooled"] == pytest.approx(complete["pooled"], rel=1e-6)


MIXED_ROWS = [
    {"text": "a"},
    {"text": None},
    {"text": ""},
    {"text": 3.5},
    {"body": "b"},
    {"text": " \n"},
    {"text": ["c"]},
    {"text": "d"},
    {"text": {"e": 1}},
]


def test_load_documents_skips_and_counts_rows_without_a_string_text(tmp_path, caplog):
    write_jsonl(tmp_path / "s.jsonl.gz", MIXED_ROWS)
    with caplog.at_level("WARNING", logger="calibft.evals.paloma.runner"):
        documents = load_documents(tmp_path / "s.jsonl.gz")
    assert documents == SliceDocuments(["a", "", " \n", "d"], 5)  # empty and blank strings are documents
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert caplog.records[0].getMessage() == (
        f"{tmp_path / 's.jsonl.gz'}: skipped 5 row(s) whose 'text' is missing or not a string; 4 document(s) kept"
    )


@pytest.mark.parametrize(
    ("max_documents", "texts", "non_string"),
    [(0, [], 0), (1, ["a"], 0), (2, ["a", ""], 1), (3, ["a", "", " \n"], 3), (4, ["a", "", " \n", "d"], 4)],
)
def test_max_documents_counts_documents_not_rows(tmp_path, max_documents, texts, non_string):
    write_jsonl(tmp_path / "s.jsonl", MIXED_ROWS)
    assert load_documents(tmp_path / "s.jsonl", max_documents) == SliceDocuments(texts, non_string)


def test_a_file_of_string_texts_logs_nothing(tmp_path, caplog):
    write_jsonl(tmp_path / "s.jsonl", [{"text": "a"}, {"text": ""}])
    with caplog.at_level("WARNING", logger="calibft.evals.paloma.runner"):
        assert load_documents(tmp_path / "s.jsonl") == SliceDocuments(["a", ""], 0)
    assert caplog.records == []


@pytest.mark.parametrize("empty_documents", ["skip", "count"])
def test_rows_without_a_string_text_are_counted_apart_from_every_total(empty_documents):
    plain = score(RECORDS, ["ptb", "c4_en"], empty_documents=empty_documents, replicates=50, bootstrap_seed=2)
    counted = score(
        RECORDS,
        ["ptb", "c4_en"],
        empty_documents=empty_documents,
        non_string_documents={"ptb": 2, "c4_en": 1},
        replicates=50,
        bootstrap_seed=2,
    )
    assert (plain["pooled"]["non_string_documents"], counted["pooled"]["non_string_documents"]) == (0, 3)
    assert [counted["slices"][name]["non_string_documents"] for name in ("ptb", "c4_en")] == [2, 1]
    for figures, before in [(counted["pooled"], plain["pooled"])] + [
        (counted["slices"][name], plain["slices"][name]) for name in ("ptb", "c4_en")
    ]:
        assert figures == before | {"non_string_documents": figures["non_string_documents"]}
    assert counted["intervals"] == plain["intervals"]  # no record, so no unit of the resamples
    only_ptb = score(RECORDS, ["ptb", "c4_en"], non_string_documents={"ptb": 1})
    assert only_ptb["slices"]["c4_en"]["non_string_documents"] == 0
    with pytest.raises(ValueError, match="wikitext_103"):
        score(RECORDS, ["ptb", "c4_en"], non_string_documents={"wikitext_103": 1})


def test_the_job_samples_nothing_and_checks_its_windows(tmp_path):
    base = dict(
        model="m", model_key="m", tokenizer="m", chat={}, condition="base", seed=0, precision="fp32",
        out_dir=str(tmp_path), slices={name: f"{name}.jsonl" for name in SLICES},
    )  # fmt: skip
    assert PalomaJob(**base).sampling == {} and (PalomaJob(**base).window, PalomaJob(**base).stride) == (2048, 1024)
    with pytest.raises(ValueError, match="sampling"):
        PalomaJob(**base, sampling={"samples_per_prompt": 1})
    with pytest.raises(ValueError, match="stride"):
        PalomaJob(**base, window=8, stride=8)
    with pytest.raises(ValueError, match="slices"):
        PalomaJob(**(base | {"slices": {}}))


# the `paloma_empty_documents` switch

RECORDS = [
    {"slice": "ptb", "index": 0, "nll": 3.0, "tokens": 2, "bytes": 10, "empty": False},
    {"slice": "ptb", "index": 1, "nll": 0.5, "tokens": 1, "bytes": 3, "empty": True},  # whitespace of 2 tokens
    {"slice": "ptb", "index": 2, "nll": 0.0, "tokens": 0, "bytes": 1, "empty": False},  # one token: counted
    {"slice": "c4_en", "index": 0, "nll": 0.0, "tokens": 0, "bytes": 0, "empty": True},
]


def test_empty_documents_are_skipped_or_counted():
    skip = score(RECORDS, ["ptb", "c4_en"], empty_documents="skip")
    count = score(RECORDS, ["ptb", "c4_en"], empty_documents="count")
    assert (skip["empty_documents"], count["empty_documents"]) == ("skip", "count")
    assert skip["slices"]["ptb"] == Totals(3.0, 2, 11, 2, skipped=1).figures()
    assert count["slices"]["ptb"] == Totals(3.5, 3, 14, 3).figures()
    assert skip["slices"]["c4_en"] == Totals(skipped=1).figures()
    assert count["slices"]["c4_en"] == Totals(documents=1).figures()
    assert (skip["pooled"]["documents"], skip["pooled"]["skipped_documents"]) == (2, 2)
    assert (count["pooled"]["documents"], count["pooled"]["skipped_documents"]) == (4, 0)
    assert skip["pooled"]["perplexity"] == pytest.approx(math.exp(3.0 / 2))
    assert count["pooled"]["perplexity"] == pytest.approx(math.exp(3.5 / 3))
    assert skip["pooled"]["bits_per_byte"] == pytest.approx(3.0 / (11 * math.log(2)))
    without_flag = [{k: v for k, v in r.items() if k != "empty"} for r in RECORDS]
    assert score(without_flag, ["ptb", "c4_en"])["pooled"] == count["pooled"]  # `count` needs no flag
    with pytest.raises(KeyError):
        score(without_flag, ["ptb", "c4_en"], empty_documents="skip")
    with pytest.raises(ValueError, match="empty_documents"):
        score(RECORDS, ["ptb", "c4_en"], empty_documents="drop")


def test_records_mark_empty_and_whitespace_texts(tiny, workdir, briefly_trained_model):
    tokenizer, model = tiny
    texts = ["A", "", " \n\t  \n", "two words"]
    records = slice_records(model, tokenizer, "ptb", texts, _job(workdir, briefly_trained_model, "unused"))
    assert [r["empty"] for r in records] == [False, True, True, False]
    assert records[2]["bytes"] == 6 and records[2]["tokens"] > 0  # whitespace has tokens, and is still empty


def test_the_job_passes_the_empty_documents_switch(workdir, briefly_trained_model):
    protocol = resolve({"switches": {"paloma_empty_documents": "count"}})
    run(_job(workdir, briefly_trained_model, "counted", protocol=protocol))
    counted = json.loads((workdir / "counted" / "summary.json").read_text())
    skipped = json.loads((workdir / "base" / "summary.json").read_text())
    assert counted["empty_documents"] == "count"
    assert (counted["pooled"]["documents"], counted["pooled"]["skipped_documents"]) == (7, 0)
    assert (skipped["pooled"]["documents"], skipped["pooled"]["skipped_documents"]) == (5, 2)
    assert counted["pooled"]["bytes"] == skipped["pooled"]["bytes"]  # "" has no bytes
    # ptb's rows without a string text are no documents under either value
    assert counted["pooled"]["non_string_documents"] == skipped["pooled"]["non_string_documents"] == 3


# the `numerics` switch


def _release_document_nll(model, token_ids: list[int], window: int, stride: int) -> float:
    """The authors' perplexity/evaluate.py with its PALOMA batch size of 1: each window alone through the model,
    labels -100 outside the tokens it scores, `F.cross_entropy` on the logits as they come, the scored tokens'
    values summed in their dtype, added as Python floats."""
    total, prev_end = 0.0, 0
    for begin in range(0, len(token_ids), stride):
        end = min(begin + window, len(token_ids))
        if end - begin < 2:
            break
        ids = torch.tensor([token_ids[begin:end]])
        score_from = max(prev_end, begin + 1)
        mask = torch.tensor([[p >= score_from for p in range(begin, end)]])
        labels = torch.where(mask, ids, torch.full_like(ids, -100))
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[:, :-1, :]
        labels = labels[:, 1:]
        nll = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none", ignore_index=-100
        ).view_as(labels)
        total += float(nll.masked_select(labels.ne(-100)).sum().item())
        prev_end = end
        if end >= len(token_ids):
            break
    return total


def test_document_nll_in_the_logits_dtype_is_the_release_computation(tiny, ids):
    _, model = tiny
    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    long_doc = [t for doc in ids for t in doc] * 3
    for doc in [*ids, long_doc]:
        expected = _release_document_nll(bf16, doc, 8, 4)
        nll, _ = document_nll(bf16, doc, window=8, stride=4, batch_size=1, numerics="logits_dtype")
        assert nll == expected
    # the windows' sums rounded to bf16 (steps of 0.25 to 1 at these sums) are far from the float64 sums
    fp32, _ = document_nll(bf16, long_doc, window=8, stride=4, batch_size=1, numerics="fp32")
    assert abs(fp32 - _release_document_nll(bf16, long_doc, 8, 4)) > 0.1
    # a float32 model: both give the same sums up to float32 summation
    for doc in ids:
        same = document_nll(model, doc, 8, 4, numerics="logits_dtype")
        assert same == pytest.approx(document_nll(model, doc, 8, 4, numerics="fp32"), rel=1e-6)
    with pytest.raises(ValueError, match="numerics"):
        documents_nll(model, ids, 8, 4, numerics="bf16")


def test_records_take_the_jobs_numerics(tiny, workdir, briefly_trained_model, monkeypatch):
    import calibft.evals.paloma.runner as paloma

    tokenizer, model = tiny
    seen = []
    real = paloma.documents_nll
    monkeypatch.setattr(paloma, "documents_nll", lambda *args: seen.append(args[-1]) or real(*args))
    for numerics in ("fp32", "logits_dtype"):
        job = _job(workdir, briefly_trained_model, "unused", protocol=resolve({"switches": {"numerics": numerics}}))
        slice_records(model, tokenizer, "ptb", TEXTS, job)
    assert seen == ["fp32", "logits_dtype"]


# bootstrap intervals

# ptb: nine documents (a whitespace one of two tokens, a one-token one); c4_en: five; mc4: none; wikitext_103: only
# empty ones, one of them whitespace with a token scored
BOOTSTRAP_SLICES = ["ptb", "c4_en", "mc4", "wikitext_103"]
PTB = [(3.7, 4, 19), (1.25, 2, 7), (0.5, 1, 3), (0.0, 0, 1), (9.0, 8, 30), (2.2, 3, 11), (5.5, 6, 21), (0.75, 1, 4)]
BOOTSTRAP_RECORDS = [
    *(
        {"slice": "ptb", "index": i, "nll": nll, "tokens": tokens, "bytes": n_bytes, "empty": i == 2}
        for i, (nll, tokens, n_bytes) in enumerate(PTB)
    ),
    {"slice": "ptb", "index": 8, "nll": 12.5, "tokens": 11, "bytes": 40, "empty": False},
    *(
        {"slice": "c4_en", "index": i, "nll": 1.5 * (i + 1), "tokens": i + 1, "bytes": 3 * i + 5, "empty": False}
        for i in range(5)
    ),
    {"slice": "wikitext_103", "index": 0, "nll": 0.0, "tokens": 0, "bytes": 0, "empty": True},
    {"slice": "wikitext_103", "index": 1, "nll": 0.4, "tokens": 1, "bytes": 2, "empty": True},
]


def _loop_totals(records, name: str, empty_documents: str, seed: int, replicates: int) -> list[tuple[float, int, int]]:
    """By hand: each replicate's (NLL, tokens, bytes) of the slice's documents at the indices that the slice's
    generator draws, document by document (a skipped empty document adds nothing)."""
    rows = [r for r in records if r["slice"] == name]
    if not rows:
        return [(0.0, 0, 0)] * replicates
    picks = resample_indices(np.random.default_rng(slice_seed(seed, name)), len(rows), replicates)
    totals = []
    for row in picks:
        nll, tokens, n_bytes = 0.0, 0, 0
        for j in row:
            if empty_documents == "skip" and rows[j]["empty"]:
                continue
            nll, tokens, n_bytes = nll + rows[j]["nll"], tokens + rows[j]["tokens"], n_bytes + rows[j]["bytes"]
        totals.append((nll, tokens, n_bytes))
    return totals


def _loop_metrics(totals) -> dict[str, list[float | None]]:
    return {
        "perplexity": [math.exp(nll / tokens) if tokens else None for nll, tokens, _ in totals],
        "bits_per_byte": [nll / (math.log(2) * n_bytes) if n_bytes else None for nll, _, n_bytes in totals],
    }


def _assert_replicates(got: list, want: list) -> None:
    assert [v is None for v in got] == [v is None for v in want]
    assert [v for v in got if v is not None] == pytest.approx([v for v in want if v is not None], rel=1e-9)


@pytest.mark.parametrize("empty_documents", ["skip", "count"])
def test_paloma_intervals_are_those_of_a_loop_over_the_same_resamples(empty_documents):
    replicates, seed = 200, 9
    summary = score(
        BOOTSTRAP_RECORDS, BOOTSTRAP_SLICES, empty_documents=empty_documents, replicates=replicates, bootstrap_seed=seed
    )
    intervals = summary["intervals"]
    totals = {
        name: _loop_totals(BOOTSTRAP_RECORDS, name, empty_documents, seed, replicates) for name in BOOTSTRAP_SLICES
    }
    pooled = []  # replicate i: the sums of the slices' totals of their replicates i
    for i in range(replicates):
        nll, tokens, n_bytes = 0.0, 0, 0
        for name in BOOTSTRAP_SLICES:
            nll, tokens, n_bytes = nll + totals[name][i][0], tokens + totals[name][i][1], n_bytes + totals[name][i][2]
        pooled.append((nll, tokens, n_bytes))
    wanted = {f"slices/{name}": _loop_metrics(t) for name, t in totals.items()} | {"pooled": _loop_metrics(pooled)}
    for prefix, metrics in wanted.items():
        for metric, want in metrics.items():
            key = f"{prefix}/{metric}"
            if prefix != "pooled":  # the kept replicates, one by one
                _assert_replicates(intervals["draws"][key], want)
            expected = percentile_interval(want)
            assert (intervals[key] is None) == (expected is None), key
            if expected is not None:
                assert intervals[key] == pytest.approx(expected, rel=1e-9), key
            assert intervals["undefined"][key] == sum(v is None for v in want), key
    # the resamples vary: the intervals are not those of one resample
    assert intervals["slices/ptb/perplexity"][0] < summary["slices"]["ptb"]["perplexity"]
    assert summary["slices"]["ptb"]["perplexity"] < intervals["slices/ptb/perplexity"][1]
    if empty_documents == "count":  # two documents, one of them without bytes: some resamples pick it twice
        assert 0 < intervals["undefined"]["slices/wikitext_103/bits_per_byte"] < replicates


def test_slices_without_counted_documents_have_undefined_replicates():
    replicates = 50
    intervals = score(
        BOOTSTRAP_RECORDS, BOOTSTRAP_SLICES, empty_documents="skip", replicates=replicates, bootstrap_seed=1
    )["intervals"]
    for name in ("mc4", "wikitext_103"):  # no document; only empty ones, skipped
        for metric in ("perplexity", "bits_per_byte"):
            key = f"slices/{name}/{metric}"
            assert intervals[key] is None and intervals["undefined"][key] == replicates
            assert intervals["draws"][key] == [None] * replicates
    assert intervals["undefined"]["pooled/perplexity"] == 0 and intervals["pooled/perplexity"] is not None
    # the units are every record of a slice, a skipped empty one too
    assert intervals["units"] == {"ptb": 9, "c4_en": 5, "mc4": 0, "wikitext_103": 2}


def test_paloma_intervals_keep_the_slice_draws_and_repeat_for_a_seed():
    def bootstrapped(seed: int, replicates: int = 80) -> dict:
        return score(BOOTSTRAP_RECORDS, BOOTSTRAP_SLICES, replicates=replicates, bootstrap_seed=seed, model="m")

    summary = bootstrapped(3)
    intervals = summary["intervals"]
    metrics = ("perplexity", "bits_per_byte")
    assert set(intervals["draws"]) == {f"slices/{name}/{m}" for name in BOOTSTRAP_SLICES for m in metrics}
    pooled = {"pooled/perplexity", "pooled/bits_per_byte"}
    assert {key for key in intervals if "/" in key} == {*intervals["draws"], *pooled}
    assert (intervals["seed"], intervals["replicates"], intervals["level"]) == (3, 80, 0.95)
    assert intervals["resampled"] == "documents within each slice"
    assert bootstrapped(3) == summary
    other = bootstrapped(4)["intervals"]
    assert other["slices/ptb/perplexity"] != intervals["slices/ptb/perplexity"]
    assert other["pooled/bits_per_byte"] != intervals["pooled/bits_per_byte"]
    # each slice draws from a seed of the run's seed and the slice alone
    assert slice_seed(3, "ptb") == seed_for(3, "bootstrap", "paloma", "ptb") != slice_seed(3, "c4_en")
    # without replicates: the same figures, no intervals
    plain = score(BOOTSTRAP_RECORDS, BOOTSTRAP_SLICES, model="m")
    assert "intervals" not in plain and plain == {k: v for k, v in summary.items() if k != "intervals"}


def test_resampled_sums_in_several_blocks_sum_n_rows_each(monkeypatch):
    monkeypatch.setattr(bootstrap, "BLOCK_CELLS", 10)  # 4 rows: 2 replicates a block, 5 blocks for 9 replicates
    sums = resampled_sums(np.ones((4, 2)), np.random.default_rng(0), 9)
    assert sums.shape == (9, 2) and np.array_equal(sums, np.full((9, 2), 4.0))
    # rows 1, 10, 100, 1000: a sum's decimal digits count the draws of each row, 4 in all
    values = np.array([[1.0], [10.0], [100.0], [1000.0]])
    sums = resampled_sums(values, np.random.default_rng(7), 9)[:, 0]
    counts = [[int(s) // 10**d % 10 for d in range(4)] for s in sums]
    assert all(sum(c) == 4 for c in counts) and all(s == int(s) for s in sums)
    rng = np.random.default_rng(7)  # the blocks: 2, 2, 2, 2 and 1 replicates, drawn one after the other
    blocks = [values[resample_indices(rng, 4, size)].sum(axis=1)[:, 0] for size in (2, 2, 2, 2, 1)]
    assert sums == pytest.approx(np.concatenate(blocks), rel=1e-12)
    assert len({tuple(c) for c in counts}) > 1
    # more rows than BLOCK_CELLS: one replicate at a time
    many = resampled_sums(np.ones((25, 1)), np.random.default_rng(1), 3)
    assert np.array_equal(many, np.full((3, 1), 25.0))
    # a slice's sums come in the same blocks: here one replicate at a time
    blocked = slice_sums(BOOTSTRAP_RECORDS[:9], "count", 5, 7)
    rng = np.random.default_rng(5)
    ptb = np.array([[r["nll"], r["tokens"], r["bytes"]] for r in BOOTSTRAP_RECORDS[:9]])
    assert blocked == pytest.approx(np.concatenate([ptb[resample_indices(rng, 9, 1)].sum(axis=1) for _ in range(7)]))
