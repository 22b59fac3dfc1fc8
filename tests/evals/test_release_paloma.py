"""PALOMA's windows and totals against the authors' release itself (tests/fixtures/release_paloma/).

The fixture was recorded by make_fixture.py beside it with the release's own `_chunk_document`, `_score_windows`
and `run_perplexity_eval` (chandar-lab/calibration-finetuning at a09d46dc), a stand-in causal LM and a stand-in
tokenizer, which this test imports from that script so that both sides see the same model, tokenizer and rows.
The project runs under the `release` preset (`numerics: logits_dtype`, `paloma_empty_documents: skip`).
"""

import gzip
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from calibft.core.protocol import resolve
from calibft.evals.paloma.metrics import score, windows
from calibft.evals.paloma.runner import documents_nll, load_documents, slice_records
from tests.fixtures.release_recording import recorded

RELEASE, MAKE_FIXTURE = recorded("release_paloma")
PROTOCOL = resolve(None)  # the `release` preset
SETTINGS = RELEASE["inputs"]["totals_settings"]
SLICE_ROWS = RELEASE["inputs"]["slice_rows"]


def test_the_fixture_was_recorded_from_the_inputs_of_its_script():
    assert RELEASE["inputs"]["slice_rows"] == MAKE_FIXTURE.SLICE_ROWS
    assert RELEASE["inputs"]["vocab"] == MAKE_FIXTURE.VOCAB
    assert PROTOCOL["numerics"] == "logits_dtype" and PROTOCOL["paloma_empty_documents"] == "skip"
    paper = [case for case in RELEASE["windows"] if (case["context_length"], case["stride"]) == (2048, 1024)]
    assert paper and all(case["n_tokens"] in MAKE_FIXTURE.LONG_LENGTHS for case in paper)


@pytest.mark.parametrize(
    "case", RELEASE["windows"], ids=lambda c: f"{c['context_length']}/{c['stride']}/n{c['n_tokens']}"
)
def test_windows_are_the_releases_window_for_window(case):
    """Exact: each window's tokens [start, end) and its scored tokens [first_scored, end), as `_chunk_document`."""
    got = windows(case["n_tokens"], case["context_length"], case["stride"])
    assert [list(span) for span in got] == case["windows"]


class CharTokenizer:
    """The fixture's stand-in tokenizer, called as `slice_records` calls a Hugging Face tokenizer."""

    def __call__(self, texts, add_special_tokens=False, verbose=False):
        assert add_special_tokens is False
        return {"input_ids": [MAKE_FIXTURE.tokenize(text) for text in texts]}


@pytest.mark.parametrize("batch_size", [1, 8])
def test_document_nll_and_tokens_are_the_releases(batch_size):
    """Exact: the release sums a window's token NLLs in float32 (batch size 1) as `logits_dtype` does, and the
    stand-in's logits are exact and depend on no other position, so neither padding nor batching can move a bit."""
    documents = RELEASE["documents"]
    for document, text in zip(documents, _document_texts(), strict=True):
        assert document["token_ids"] == MAKE_FIXTURE.tokenize(text)
        assert document["bytes"] == len(text.encode())
    got = documents_nll(
        MAKE_FIXTURE.StandInLM(),
        [document["token_ids"] for document in documents],
        SETTINGS["context_length"],
        SETTINGS["stride"],
        batch_size,
        PROTOCOL["numerics"],
    )
    assert [tokens for _, tokens in got] == [document["scored_tokens"] for document in documents]
    assert [nll for nll, _ in got] == [document["nll"] for document in documents]


def _document_texts() -> list[str]:
    return [
        SLICE_ROWS[document["slice"]][document["row"]]["text"] for document in RELEASE["documents"]
    ]  # fmt: skip


def _project_summary(tmp_path: Path) -> dict:
    """The project's summary of the fixture's slices: rows read by `load_documents`, scored by `slice_records`,
    totalled by `score` under the release preset."""
    job = SimpleNamespace(
        model_key="stand_in",
        condition="release_fixture",
        window=SETTINGS["context_length"],
        stride=SETTINGS["stride"],
        batch_size=4,
        protocol=PROTOCOL,
    )
    model, records, non_string = MAKE_FIXTURE.StandInLM(), [], {}
    for name, rows in SLICE_ROWS.items():
        path = tmp_path / f"{name}.jsonl.gz"
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.writelines(json.dumps(row) + "\n" for row in rows)
        documents = load_documents(path)
        non_string[name] = documents.non_string
        records.extend(slice_records(model, CharTokenizer(), name, documents.texts, job))
    return score(
        records,
        list(SLICE_ROWS),
        empty_documents=PROTOCOL["paloma_empty_documents"],
        non_string_documents=non_string,
    )


def _check(figures: dict, release: dict) -> None:
    # counts exact; the summed NLL exact too (the same float32 window sums, added in the same order as Python
    # floats); perplexity and bits per byte within 1e-12 relative: one exp / division of the same operands
    assert figures["documents"] == release["num_documents"]
    assert figures["skipped_documents"] + figures["non_string_documents"] == release["num_skipped_rows"]
    assert figures["tokens"] == release["num_tokens"]
    assert figures["bytes"] == release["num_bytes"]
    assert figures["nll"] == release["total_nll"]
    assert figures["perplexity"] == pytest.approx(release["perplexity"], rel=1e-12)
    assert figures["bits_per_byte"] == pytest.approx(release["bits_per_byte"], rel=1e-12)
    assert math.log(figures["perplexity"]) == pytest.approx(release["avg_nll_per_token"], rel=1e-12)


def test_slice_and_pooled_totals_are_the_releases(tmp_path):
    summary = _project_summary(tmp_path)
    assert list(summary["slices"]) == list(RELEASE["slices"])
    for name, release in RELEASE["slices"].items():
        _check(summary["slices"][name], release)
    _check(summary["pooled"], RELEASE["pooled"])
