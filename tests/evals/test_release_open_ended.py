"""Open-ended random generation against the authors' release itself.

tests/fixtures/release_open_ended/release_open_ended.json holds what the release's own functions
(normalize_open_random_output, count_unique_outputs, top_p_support_sizes, _aggregate_summary) compute on shared raw
texts and first-token distributions; make_fixture.py beside it records it again. Under the `release` preset the
project must give the same normalized strings, supports and unique fractions exactly; the one float the release
computes in float32 (its mean unique fraction over prompts, a torch float32 mean) is compared within 1e-6.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from calibft.core.protocol import resolve
from calibft.evals.open_ended.metrics import first_token_support, normalize, score, unique_fraction

FIXTURE = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "release_open_ended" / "release_open_ended.json").read_text()
)
RELEASE = resolve({"preset": "release"})
RULE = RELEASE["open_ended_normalization"]
NUMERICS = RELEASE["numerics"]
PROMPTS = FIXTURE["prompts"]
THRESHOLDS = FIXTURE["thresholds"]
# The release's mean unique fraction is torch.tensor(fractions, dtype=float32).mean(): float32 rounding of values
# in [0, 1] (relative error ~6e-8); the project's mean is float64.
FLOAT32_MEAN_TOLERANCE = 1e-6


def _probs(prompt: dict) -> torch.Tensor:
    return torch.tensor(prompt["probs"]["values"], dtype=getattr(torch, prompt["probs"]["dtype"]))


def _project_supports() -> list[list[int]]:
    return [first_token_support(_probs(p), THRESHOLDS, numerics=NUMERICS).tolist() for p in PROMPTS]


def _project_score() -> dict:
    records = [{"prompt_index": i, "text": text} for i, p in enumerate(PROMPTS) for text in p["texts"]]
    supports = [{"prompt_index": i, "support": s} for i, s in enumerate(_project_supports())]
    return score(
        [p["prompt"] for p in PROMPTS],
        records,
        supports,
        THRESHOLDS,
        FIXTURE["headline_threshold"],
        normalization=RULE,
    )


def test_release_preset_is_the_release_normalization_and_numerics():
    assert RULE == "release" and NUMERICS == "logits_dtype"


@pytest.mark.parametrize("index", range(len(PROMPTS)), ids=[p["prompt"].split(".")[0] for p in PROMPTS])
def test_normalization_is_the_releases_text_for_text(index):
    prompt = PROMPTS[index]
    assert [normalize(text, RULE) for text in prompt["texts"]] == prompt["normalized"]


@pytest.mark.parametrize("index", range(len(PROMPTS)), ids=[p["prompt"].split(".")[0] for p in PROMPTS])
def test_unique_fraction_is_the_releases_exactly(index):
    prompt = PROMPTS[index]
    row = prompt["row"]
    got = unique_fraction(prompt["texts"], RULE)
    if not prompt["texts"]:  # the release leaves the prompt out of its means: no unique fraction in its row
        assert got is None and "unique_fraction" not in row
        return
    assert got == row["unique_fraction"] == prompt["count_unique_outputs"]["unique_fraction"]
    assert row["num_unique_outputs"] == len({normalize(t, RULE) for t in prompt["texts"]} - {""})


def test_support_is_the_releases_at_every_threshold():
    assert _project_supports() == [p["support"] for p in PROMPTS]


def test_scored_run_is_the_releases_summary():
    metrics = _project_score()
    summary = FIXTURE["summary"]
    headline = THRESHOLDS.index(FIXTURE["headline_threshold"])
    assert [row["support"] for row in metrics["prompts"]] == [p["row"]["top_p_support_size"] for p in PROMPTS]
    assert [row["support"] for row in metrics["prompts"]] == [p["support"][headline] for p in PROMPTS]
    assert [row["unique_fraction"] for row in metrics["prompts"]] == [p["row"].get("unique_fraction") for p in PROMPTS]
    aggregate = metrics["aggregate"]
    assert aggregate["num_prompts"] == summary["num_prompts"]
    assert aggregate["support"] == summary["avg_top_p_support_size"]  # a sum of integers over a count: exact
    by_threshold = sorted(summary["top_p_support_size_by_threshold"].values(), key=lambda entry: entry["threshold"])
    assert [entry["threshold"] for entry in by_threshold] == THRESHOLDS
    assert aggregate["support_by_threshold"] == [entry["avg"] for entry in by_threshold]
    assert aggregate["unique_fraction"] == pytest.approx(summary["avg_unique_fraction"], abs=FLOAT32_MEAN_TOLERANCE)
