"""Structured sampling scored as the authors' release scores it, differentially: parsing, validity, W1 and the
logit KL of tests/fixtures/release_structured/release_structured.json, and the SSOT baseline's answer extraction of
tests/fixtures/release_ssot_extraction/release_ssot_extraction.json, each recorded from the release's own functions
by the make_fixture.py beside it and computed again here by the project under the `release` preset. Answers that
hold reasoning are read under both values of protocol switch `answer_reasoning`: `release` as the release reads
them, `strip_reasoning` as hand-derived here."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from calibft.core.protocol import resolve
from calibft.data.families import family
from calibft.data.grid import Prompt
from calibft.evals.metrics import parse_number, valid_mask, wasserstein1
from calibft.evals.structured.job import StructuredJob
from calibft.evals.structured.metrics import answer_part, prompt_metrics, sample_records
from calibft.evals.structured.ssot import STYLES
from calibft.evals.structured.ssot import extract_answer as ssot_extract
from calibft.lm.chat import decode_output, strip_thinking_trace
from calibft.training.objectives import Q_FLOOR, soft_target_kl

FIXTURE = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "release_structured" / "release_structured.json").read_text()
)
RELEASE = resolve({"preset": "release"})
STRIP_REASONING = resolve({"switches": {"answer_reasoning": "strip_reasoning"}})
TARGETS = FIXTURE["targets"]
# W1: both sort the samples and pair them with the same SciPy ppf at (i - 0.5) / n; the release takes the mean of
# the gaps, the project sums gap / n, so they part in the last bits only.
W1_RTOL = 1e-12
# float32 logit KL: the same float32 operations, the project's sums accumulated by index_add instead of sum/mean.
KL_F32_RTOL = 1e-6


def number(value):
    return float(value) if isinstance(value, str) else value


def job(protocol: dict, evaluation: str = "structured", **fields) -> StructuredJob:
    """A structured (or SSOT) job under `protocol`, for what `answer_part` reads from it."""
    return StructuredJob(
        model="m", model_key="m", tokenizer="m", chat={}, condition="base", seed=0, precision="fp32", sampling={},
        out_dir="o", evaluation=evaluation, split="ood", protocol=protocol, **fields,
    )  # fmt: skip


class Decoded:
    """A tokenizer whose output decodes to `text` (special tokens skipped), as a model might have written it."""

    def __init__(self, text: str):
        self.text = text

    def decode(self, ids, skip_special_tokens=False):
        assert skip_special_tokens  # as the release's backend and decode_output decode
        return self.text


def project_answer(text: str, structured_job: StructuredJob) -> str | None:
    """The answer the project's structured or SSOT evaluation reads from a decoded output: `decode_output` under the
    job's `answer_reasoning`, then `answer_part`."""
    decoded = decode_output(Decoded(text), [], structured_job.protocol["answer_reasoning"])
    return answer_part(structured_job)(decoded)


def project_value(text: str, protocol: dict = RELEASE) -> float | None:
    """The number the project's structured evaluation reads from a decoded output under `protocol`."""
    answer = project_answer(text, job(protocol))
    return None if answer is None else parse_number(answer)


def test_fixture_is_the_pinned_release():
    assert FIXTURE["release_commit"] == "a09d46dc5f6a87c39b85b8ec524c7904284bc2ab"
    assert RELEASE["numerics"] == "logits_dtype" and RELEASE["w1_nonfinite_prompts"] == "undefined"
    assert RELEASE["answer_reasoning"] == "release" and STRIP_REASONING["answer_reasoning"] == "strip_reasoning"


def test_targets_have_the_releases_support_and_law():
    for target in TARGETS:
        spec, fam = target["spec"], family(target["family"])
        lower, upper = fam.support(target["params"])
        assert (lower, upper) == (
            -math.inf if spec["support_min"] is None else spec["support_min"],
            math.inf if spec["support_max"] is None else spec["support_max"],
        ), target
        assert fam.integer == spec["integer_only"] and fam.scipy_name == spec["scipy_name"], target
        assert fam.scipy_params(target["params"]) == pytest.approx(spec["scipy_params"], rel=1e-15), target


@pytest.mark.parametrize("row", FIXTURE["parsing"], ids=lambda row: repr(row["text"]))
def test_parsing_and_validity_equal_the_releases(row):
    value = project_value(row["text"])
    release_value = number(row["value"])
    if row["parsed"] and math.isfinite(release_value):
        assert value == release_value  # exact: both call float() on the same stripped text
    else:
        # the release parses "1e999" to inf and rejects it as non-finite; the project does not parse it
        assert value is None
    # the parser alone, on the text with its reasoning and its whitespace
    raw_value, release_raw = parse_number(row["text"]), number(row["value_raw"])
    assert raw_value == (release_raw if row["parsed_raw"] and math.isfinite(release_raw) else None)
    for target, release_valid in zip(TARGETS, row["valid"], strict=True):
        values = np.array([np.nan if value is None else value])
        assert bool(valid_mask(values, target["family"], target["params"])[0]) == release_valid, target
    # the answers of `parsing` hold no reasoning the two values of `answer_reasoning` read otherwise
    assert project_value(row["text"], STRIP_REASONING) == value


# The numbers of `reasoning`'s answers under `strip_reasoning`, derived by hand from calibft.lm.chat.strip_reasoning:
# lower-case think blocks and an unclosed one removed, the text up to a stray `</think>` removed, GPT-OSS's
# "analysis...assistantfinal" reduced to what follows; upper-case tags are text.
STRIP_REASONING_VALUES = {
    "<THINK>7</THINK>3": None,
    "<Think>7</think>3": 3.0,  # what follows the lower-case close tag
    "<think>7</THINK>\n0.25": None,  # a lower-case <think> that no lower-case tag closes: removed to the end
    "<THINK>no end 3": None,
    "<think>a</think>3<THINK>b": None,
    "7</think>3": 3.0,
    "</think>3": 3.0,
    "3</think>": None,
    "<think>7</think>3</think>": None,
    "<think>x</think><think>y</think>\n2": 2.0,
    "analysisThe user wants a number.assistantfinal3": 3.0,
    "analysis7assistantfinal 0.5": 0.5,
    "assistantfinal3": None,  # no "analysis" first: a reply of its own
    "analysis no final 3": None,
}


@pytest.mark.parametrize("row", FIXTURE["reasoning"], ids=lambda row: repr(row["text"]))
def test_answers_with_reasoning_parse_as_the_releases_under_release(row):
    value = project_value(row["text"])
    assert value == (number(row["value"]) if row["parsed"] else None)
    for target, release_valid in zip(TARGETS, row["valid"], strict=True):
        values = np.array([np.nan if value is None else value])
        assert bool(valid_mask(values, target["family"], target["params"])[0]) == release_valid, target


def test_answers_with_reasoning_parse_by_the_projects_rule_under_strip_reasoning():
    texts = [row["text"] for row in FIXTURE["reasoning"]]
    assert sorted(STRIP_REASONING_VALUES) == sorted(texts)
    assert {text: project_value(text, STRIP_REASONING) for text in texts} == STRIP_REASONING_VALUES
    release = {row["text"]: number(row["value"]) if row["parsed"] else None for row in FIXTURE["reasoning"]}
    # the fixture's answers part the two values of `answer_reasoning` in both directions
    assert any(release[t] is None and STRIP_REASONING_VALUES[t] is not None for t in texts)
    assert any(release[t] is not None and STRIP_REASONING_VALUES[t] is None for t in texts)


@pytest.mark.parametrize(
    "case", FIXTURE["w1"], ids=lambda case: f"{TARGETS[case['target']]['family']}-n{len(case['samples'])}"
)
def test_w1_equals_the_releases(case):
    target = TARGETS[case["target"]]
    law = family(target["family"]).law(target["params"])
    w1 = wasserstein1(np.array(case["samples"], dtype=np.float64), law)
    if not case["samples"]:
        # Expected difference, `w1_nonfinite_prompts: undefined`: the release's W1 without a valid answer is inf,
        # the project's NaN, written None; both leave the prompt's family without a finite mean.
        assert number(case["w1"]) == math.inf and math.isnan(w1)
        return
    assert w1 == pytest.approx(number(case["w1"]), rel=W1_RTOL, abs=0.0)


@pytest.mark.parametrize("row", FIXTURE["prompt_rows"], ids=lambda row: TARGETS[row["target"]]["family"])
def test_prompt_row_equals_the_releases(row):
    target = TARGETS[row["target"]]
    prompt = Prompt(f"fixture-{row['target']}", target["family"], target["params"], "")
    texts = [decode_output(Decoded(text), [], RELEASE["answer_reasoning"]) for text in row["texts"]]
    records = sample_records(prompt, texts, np.ones(len(texts), dtype=bool), answer_part(job(RELEASE)))
    metrics = prompt_metrics(prompt, records)
    assert metrics["valid"] == row["num_valid"] and metrics["valid_rate"] == row["valid_rate"]
    assert metrics["w1"] == pytest.approx(number(row["wasserstein_1"]), rel=W1_RTOL, abs=0.0)


def project_kl(case: dict, dtype: torch.dtype) -> float:
    steps = case["steps"]
    child_step = torch.tensor([s for s, step in enumerate(steps) for _ in step["next_token_ids"]])
    child_token = torch.tensor([t for step in steps for t in step["next_token_ids"]])
    child_q = torch.tensor([q for step in steps for q in step["next_token_probs"]], dtype=torch.float64)
    logits = torch.tensor(case["logits"], dtype=torch.float32).to(dtype)
    kl = soft_target_kl(
        logits,
        torch.zeros(len(steps), dtype=torch.long),
        child_step,
        child_token,
        child_q,
        case["tau"],
        numerics=RELEASE["numerics"],
    )
    assert kl.dtype == dtype
    return float(kl.float()[0])


def test_q_floor_is_the_releases_epsilon():
    assert Q_FLOOR == FIXTURE["epsilon"]


@pytest.mark.parametrize("case", FIXTURE["logit_kl"], ids=lambda case: f"steps{len(case['steps'])}-tau{case['tau']}")
def test_logit_kl_equals_the_releases(case):
    assert project_kl(case, torch.float32) == pytest.approx(case["kl"]["float32"], rel=KL_F32_RTOL)
    # bfloat16 logits under `numerics: logits_dtype`: the release's bf16 arithmetic, step for step
    assert project_kl(case, torch.bfloat16) == case["kl"]["bfloat16"]


# --- the SSOT baseline's answer extraction ------------------------------------------------------------------------
# tests/fixtures/release_ssot_extraction/release_ssot_extraction.json, recorded by make_fixture.py beside it: the
# release's extract_ssot_answer (strict) of each decoded text after its backend's strip_response, per model name.

SSOT = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "release_ssot_extraction" / "release_ssot_extraction.json").read_text()
)
# The numbers of SSOT texts under `strip_reasoning` (calibft.lm.chat.strip_reasoning, for every model, then the
# release's extraction), derived by hand where they part from the release's for some model: (default style, GPT-OSS
# style). The release's `strip_model_response` removes `<think>` blocks for Qwen3 only, keeps GPT-OSS's analysis
# text for its extraction rules, and strips `<think>` from the extracted answer.
SSOT_STRIP_REASONING = {
    "<think>reason</think>\n6": (None, 6.0),  # GPT-OSS: a bare final answer once the block is gone
    "<think><answer>1</answer></think><answer>2</answer>": (2.0, 2.0),  # the release: 1 but for Qwen3
    "<think>unclosed <answer>7</answer>": (None, None),  # the release: 7 but for Qwen3
    "analysisWe pick.assistantfinal7\nmore": (None, None),  # GPT-OSS: "7\nmore" is two lines, no tags
    "analysis<answer>5</answer> draft assistantfinal<answer>3</answer>": (3.0, 3.0),  # the release: 5
    "<THINK><answer>1</answer></THINK><answer>2</answer>": (1.0, 1.0),  # the release: 2 for Qwen3
    "<answer>1</answer></think><answer>2</answer>": (2.0, 2.0),  # what follows the stray close tag
    "<think>x</think><answer><THINK>y</THINK>3</answer>": (None, None),  # the answer keeps its upper-case block
    "<answer><THINK>y</THINK>3</answer>": (None, None),
    "<THINK>unclosed <answer>7</answer>": (7.0, 7.0),  # the release: nothing left for Qwen3
}


def release_strips_thinking(model: str) -> bool:
    """The model entries' `release_strips_thinking` where the release's `infer_model_family` says qwen3."""
    return SSOT["families"][model][0] == "qwen3"


def ssot_style(model: str) -> bool:
    """GPT-OSS's extraction rules: the model entries' `ssot_release_style: gpt_oss` where the release's adapter is
    its GPT-OSS one."""
    return SSOT["families"][model][1] == "gpt_oss"


def ssot_value(row: dict, protocol: dict) -> float | None:
    """The number the project's SSOT evaluation reads from a decoded text under `protocol` (`answer_part`)."""
    ssot = job(
        protocol, "ssot", release_prompts="ssot_prompts.py", release_style="gpt_oss" if ssot_style(row["model"])
        else "default", release_strips_thinking=release_strips_thinking(row["model"]),
    )  # fmt: skip
    answer = project_answer(row["text"], ssot)
    return None if answer is None else parse_number(answer)


def release_value(row: dict) -> float | None:
    return row["value"] if row["parsed"] else None


def test_ssot_fixture_is_the_pinned_release():
    assert SSOT["release_commit"] == "a09d46dc5f6a87c39b85b8ec524c7904284bc2ab"
    assert STYLES["gpt_oss"].gpt_oss_output and not STYLES["default"].gpt_oss_output
    assert {family for family, _ in SSOT["families"].values()} == {"qwen3", "llama", "gemma", "gpt_oss", "default"}


@pytest.mark.parametrize("row", SSOT["rows"], ids=lambda row: f"{row['model'].split('/')[0]}-{row['text']!r}")
def test_ssot_extraction_equals_the_releases(row):
    answer = ssot_extract(row["stripped"], gpt_oss=ssot_style(row["model"]))
    if answer is None:
        # the release's "" with `degraded`: no answer found (an empty pair is "" without `degraded`)
        assert row["answer"] == "" and row["degraded"]
    else:
        assert answer == row["answer"]
    value = None if answer is None else parse_number(strip_thinking_trace(answer))
    assert value == release_value(row)


@pytest.mark.parametrize("row", SSOT["rows"], ids=lambda row: f"{row['model'].split('/')[0]}-{row['text']!r}")
def test_ssot_number_from_the_decoded_text_equals_the_releases(row):
    """What the SSOT baseline scores under `answer_reasoning: release`: the release's `strip_model_response` for the
    model, its extraction, `strip_thinking_trace` of the answer, the number."""
    assert ssot_value(row, RELEASE) == release_value(row)


def test_ssot_number_from_the_decoded_text_under_strip_reasoning():
    """`strip_reasoning` for every model before the release's extraction: the release's number where the two
    rules agree, the hand-derived one where they part."""
    parted = set()
    for row in SSOT["rows"]:
        expected = release_value(row)
        if row["text"] in SSOT_STRIP_REASONING:
            expected = SSOT_STRIP_REASONING[row["text"]][ssot_style(row["model"])]
        assert ssot_value(row, STRIP_REASONING) == expected, row
        if expected != release_value(row):
            parted.add(row["text"])
    assert parted == set(SSOT_STRIP_REASONING)  # each hand-derived text parts from the release for some model
