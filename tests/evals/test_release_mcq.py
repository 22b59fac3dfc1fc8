"""MCQ answer-position balance against the authors' release itself.

tests/fixtures/release_mcq/release_mcq.json holds what the release's own parse_mcq_generation and
compute_mcq_metrics give on shared generations; make_fixture.py beside it records it again. The project must parse
every generation to the release's answer (None where the release finds it unparseable) and give the release's parse
rate, answer frequencies and TV exactly: both compute them as the same few correctly rounded float64 operations.
Generations that hold reasoning are parsed under both values of protocol switch `answer_reasoning`: `release` as the
release parses them, `strip_reasoning` as hand-derived here.

One named difference (docs/fidelity.md, "When no MCQ generation parses"): when nothing parses the release writes
frequencies and a TV of 0.0, the project None.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calibft.core.protocol import resolve
from calibft.evals.mcq.metrics import LETTERS, parse_mcq, score, summarize

FIXTURE = json.loads((Path(__file__).parents[1] / "fixtures" / "release_mcq" / "release_mcq.json").read_text())
GENERATIONS = FIXTURE["generations"]
RUNS = FIXTURE["runs"]
REASONING = resolve({"preset": "release"})["answer_reasoning"]
# The answers of the generations whose reasoning the two values of `answer_reasoning` remove otherwise, under
# `strip_reasoning` (calibft.lm.chat.strip_reasoning), derived by hand; every other generation parses as under the
# release's rule.
STRIP_REASONING_ANSWERS = {
    "think_upper": None,  # the upper-case block stays: an unexpected line
    "think_upper_unclosed_after": None,  # so does "<THINK>more reasoning"
    "stray_close_after_text": "C",  # the text before the stray close tag is removed
    "stray_close_after_answer": None,  # only what follows "B</think>" stays: no question, no options
    "harmony_skipped": "D",  # what follows "assistantfinal"
    "harmony_skipped_own_line": "B",
}


def _release_answer(name: str) -> str | None:
    generation = GENERATIONS[name]
    return generation["correct_answer"] if generation["is_parseable"] else None


@pytest.mark.parametrize("name", list(GENERATIONS))
def test_parse_is_the_releases(name):
    assert REASONING == "release"
    assert parse_mcq(GENERATIONS[name]["text"], REASONING).answer == _release_answer(name)


@pytest.mark.parametrize("name", list(GENERATIONS))
def test_parse_under_strip_reasoning_is_the_projects_rule(name):
    expected = STRIP_REASONING_ANSWERS[name] if name in STRIP_REASONING_ANSWERS else _release_answer(name)
    assert parse_mcq(GENERATIONS[name]["text"], "strip_reasoning").answer == expected


def test_the_generations_with_reasoning_part_the_two_rules():
    """Every hand-derived answer differs from the release's, both ways (parsed and not)."""
    release = {name: _release_answer(name) for name in STRIP_REASONING_ANSWERS}
    assert all(release[name] != answer for name, answer in STRIP_REASONING_ANSWERS.items())
    assert any(release[name] is None and answer for name, answer in STRIP_REASONING_ANSWERS.items())
    assert any(release[name] and answer is None for name, answer in STRIP_REASONING_ANSWERS.items())


@pytest.mark.parametrize("run", list(RUNS))
def test_summary_is_the_releases_exactly(run):
    names = RUNS[run]["generations"]
    release = RUNS[run]["summary"]
    answers = [parse_mcq(GENERATIONS[name]["text"], REASONING).answer for name in names]
    scored = score([{"text": GENERATIONS[name]["text"]} for name in names], reasoning=REASONING)
    for got in (summarize(answers), scored):
        assert got["n"] == release["num_samples"]
        assert got["parsed"] == release["num_parseable"]
        assert got["parse_rate"] == release["parse_rate"]
        if release["num_parseable"] == 0:  # the named difference: the release's 0.0, the project's None
            assert release["tv_distance_from_uniform"] == 0.0
            assert [release[f"freq_{letter.lower()}"] for letter in LETTERS] == [0.0] * len(LETTERS)
            assert got["tv"] is None and got["frequencies"] is None
            continue
        assert got["frequencies"] == {letter: release[f"freq_{letter.lower()}"] for letter in LETTERS}
        assert got["tv"] == release["tv_distance_from_uniform"]
    counts = {row["answer_label"]: row["count"] for row in RUNS[run]["answer_frequency_rows"]}
    assert counts == {letter: answers.count(letter) for letter in LETTERS}


def test_fixture_covers_every_letter_and_a_run_where_nothing_parses():
    assert {_release_answer(name) for name in GENERATIONS} == {*LETTERS, None}
    assert any(run["summary"]["num_parseable"] == 0 for run in RUNS.values())
