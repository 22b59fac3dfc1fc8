"""tinyGSM8k answer extraction and scoring against the authors' release itself (tests/fixtures/release_gsm8k/).

The fixture was recorded by make_fixture.py beside it with the release's own `extract_strict_gsm8k_answer`,
`extract_last_numeric_answer`, `_normalize_numeric_text`, `_extract_gsm8k_target` and `run_gsm8k_tasks`
(chandar-lab/calibration-finetuning at a09d46dc). The project runs under the `release` preset
(`gsm8k_extraction: release`). Everything here is strings and 0/1 scores: exact.
"""

import json
from pathlib import Path

import pytest

from calibft.core.protocol import resolve
from calibft.evals.tinybench.gsm8k import (
    gsm8k_answers,
    gsm8k_release_flexible,
    gsm8k_release_strict,
    gsm8k_release_target,
)
from calibft.lm.chat import strip_reasoning

RELEASE = json.loads((Path(__file__).parent.parent / "fixtures" / "release_gsm8k" / "release_gsm8k.json").read_text())
EXTRACTION = resolve(None)["gsm8k_extraction"]  # the `release` preset
RESPONSES = RELEASE["inputs"]["responses"]
ANSWERS = RELEASE["inputs"]["answers"]
# Texts the release strips (for Qwen3, `strip_thinking_trace`) otherwise than the project's `strip_reasoning`, the
# rule docs/fidelity.md names for every evaluation but open-ended's (`open_ended_normalization`): an upper-case
# `<THINK>` block (removed only by the release) and a `</think>` without its opening (what precedes it removed only
# by `strip_reasoning`). Their extracted answers still agree (checked below); only the stripped text differs.
STRIPPED_OTHERWISE = {"<THINK>maybe 20</THINK> 18", "</think> 18"}


def test_the_release_preset_extracts_as_the_release():
    assert EXTRACTION == "release"


@pytest.mark.parametrize("case", RELEASE["extractions"], ids=lambda c: repr(c["text"])[:40])
def test_strict_and_flexible_answers_are_the_releases(case):
    assert gsm8k_release_strict(case["text"]) == case["strict"]
    assert gsm8k_release_flexible(case["text"]) == case["flexible"]


@pytest.mark.parametrize("case", RELEASE["targets"], ids=lambda c: repr(c["answer"])[-30:])
def test_references_are_the_releases(case):
    if "error" in case:  # the release refuses a solution without "####" or with nothing after it
        with pytest.raises(ValueError):
            gsm8k_release_target(case["answer"])
    else:
        assert gsm8k_release_target(case["answer"]) == case["gold"]


def test_scores_are_the_releases_pair_for_pair():
    """Each (generation, solution) pair as the project's tinyGSM8k runner scores it (`strip_reasoning`, then
    `gsm8k_answers`) against the release's `run_gsm8k_tasks`, and the two accuracies over all pairs."""
    strict, flexible, stripped_otherwise = [], [], set()
    for pair in RELEASE["scored"]:
        raw = RESPONSES[pair["text"]]
        text = strip_reasoning(raw)
        if text != pair["stripped"]:
            stripped_otherwise.add(raw)
        fields = gsm8k_answers(text, ANSWERS[pair["answer"]], EXTRACTION)
        assert (fields["strict_answer"], fields["flexible_answer"], fields["target"]) == (
            pair["strict_prediction"],
            pair["flexible_prediction"],
            pair["gold"],
        ), pair
        assert (fields["strict"], fields["flexible"]) == (pair["strict_correct"], pair["flexible_correct"]), pair
        strict.append(fields["strict"])
        flexible.append(fields["flexible"])
    assert stripped_otherwise == STRIPPED_OTHERWISE
    assert sum(strict) / len(strict) == RELEASE["accuracy"]["strict"]
    assert sum(flexible) / len(flexible) == RELEASE["accuracy"]["flexible"]
    assert 0 < sum(strict) < sum(flexible) < len(flexible)  # the pairs hold hits and misses of both kinds
