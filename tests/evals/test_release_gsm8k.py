"""tinyGSM8k answer extraction and scoring against the authors' release itself (tests/fixtures/release_gsm8k/).

The fixture was recorded by make_fixture.py beside it with the release's own `extract_strict_gsm8k_answer`,
`extract_last_numeric_answer`, `_normalize_numeric_text`, `_extract_gsm8k_target` and `run_gsm8k_tasks`
(chandar-lab/calibration-finetuning at a09d46dc). The project runs under the `release` preset
(`gsm8k_extraction: release`, `answer_reasoning: release`); generations that hold reasoning are also read under
`answer_reasoning: strip_reasoning`, as hand-derived here. Everything here is strings and 0/1 scores: exact.
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
    gsm8k_text,
)

RELEASE = json.loads((Path(__file__).parent.parent / "fixtures" / "release_gsm8k" / "release_gsm8k.json").read_text())
EXTRACTION = resolve(None)["gsm8k_extraction"]  # the `release` preset
REASONING = resolve(None)["answer_reasoning"]
RESPONSES = RELEASE["inputs"]["responses"]
ANSWERS = RELEASE["inputs"]["answers"]
# The strict and flexible answers of `reasoning`'s texts under `answer_reasoning: strip_reasoning`, for every model,
# derived by hand from calibft.lm.chat.strip_reasoning (lower-case think blocks and an unclosed one removed, the text
# up to a stray `</think>` removed, GPT-OSS's "analysis...assistantfinal" reduced to what follows).
STRIP_REASONING_ANSWERS = {
    "<think>16 - 3 - 4 = 9</think> #### 18": ("18", "18"),
    "<think>maybe 20</think>\n#### 20": ("20", "20"),
    "<THINK>maybe 20</THINK> #### 18": ("18", "18"),  # the upper-case block stays, the "####" line is 18
    "<think>#### 20</think> #### 18": ("18", "18"),
    "<think>unclosed reasoning with 12 and 13": (None, None),
    "<THINK>unclosed #### 20": ("20", "20"),
    "maybe 20</think> #### 18": ("18", "18"),
    "#### 18</think> 19": (None, "19"),  # only " 19" follows the close tag
    "</think> 18": (None, "18"),
    "analysisLet me compute 20.assistantfinal#### 18": ("18", "18"),
    "analysis#### 20assistantfinalThe answer is 18.": (None, "18"),
    "<think>a</think> 7 <think>b 8</think> 9": (None, "9"),
}


def test_the_release_preset_extracts_as_the_release():
    assert EXTRACTION == "release" and REASONING == "release"
    assert RELEASE["inputs"]["model_name"] == "Qwen/Qwen3-1.7B"


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
    """Each (generation, solution) pair as the project's tinyGSM8k runner scores it for Qwen3 (`gsm8k_text` with
    `release_strips_thinking`, then `gsm8k_answers`) against the release's `run_gsm8k_tasks`, and the two accuracies
    over all pairs."""
    strict, flexible = [], []
    for pair in RELEASE["scored"]:
        text = gsm8k_text(RESPONSES[pair["text"]], REASONING, strips_thinking=True)
        assert text == pair["stripped"]
        fields = gsm8k_answers(text, ANSWERS[pair["answer"]], EXTRACTION)
        assert (fields["strict_answer"], fields["flexible_answer"], fields["target"]) == (
            pair["strict_prediction"],
            pair["flexible_prediction"],
            pair["gold"],
        ), pair
        assert (fields["strict"], fields["flexible"]) == (pair["strict_correct"], pair["flexible_correct"]), pair
        strict.append(fields["strict"])
        flexible.append(fields["flexible"])
    assert sum(strict) / len(strict) == RELEASE["accuracy"]["strict"]
    assert sum(flexible) / len(flexible) == RELEASE["accuracy"]["flexible"]
    assert 0 < sum(strict) < sum(flexible) < len(flexible)  # the pairs hold hits and misses of both kinds


@pytest.mark.parametrize("model", list(RELEASE["reasoning"]))
def test_generations_with_reasoning_score_as_the_releases_for_each_model(model):
    """`answer_reasoning: release`: `<think>` blocks removed before extraction for the release's Qwen3 family only (the
    model entries' `release_strips_thinking`), GPT-OSS's analysis text kept."""
    strips_thinking = RELEASE["inputs"]["reasoning_models"][model] == "qwen3"
    for case in RELEASE["reasoning"][model]:
        text = gsm8k_text(case["text"], REASONING, strips_thinking)
        assert text == case["stripped"]
        fields = gsm8k_answers(text, ANSWERS[0], EXTRACTION)
        assert (fields["strict_answer"], fields["flexible_answer"], fields["target"]) == (
            case["strict_prediction"],
            case["flexible_prediction"],
            case["gold"],
        ), case
        assert (fields["strict"], fields["flexible"]) == (case["strict_correct"], case["flexible_correct"]), case


def test_generations_with_reasoning_under_strip_reasoning():
    """`answer_reasoning: strip_reasoning`: the project's rule for every model, whatever `release_strips_thinking`
    says; the fixture's texts part it from the release's for Qwen3 and for the other models."""
    assert sorted(STRIP_REASONING_ANSWERS) == sorted(RELEASE["inputs"]["reasoning_responses"])
    for text, expected in STRIP_REASONING_ANSWERS.items():
        for strips_thinking in (True, False):
            fields = gsm8k_answers(gsm8k_text(text, "strip_reasoning", strips_thinking), ANSWERS[0], EXTRACTION)
            assert (fields["strict_answer"], fields["flexible_answer"]) == expected, text
    for model, cases in RELEASE["reasoning"].items():
        release = [(case["strict_prediction"], case["flexible_prediction"]) for case in cases]
        assert release != [STRIP_REASONING_ANSWERS[case["text"]] for case in cases], model
    with pytest.raises(ValueError, match="unknown answer_reasoning"):
        gsm8k_text("#### 18", "none", False)
