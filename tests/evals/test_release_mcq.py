"""MCQ answer-position balance against the authors' release itself.

tests/fixtures/release_mcq/release_mcq.json holds what the release's own parse_mcq_generation and
compute_mcq_metrics give on shared generations; make_fixture.py beside it records it again. The project must parse
every generation to the release's answer (None where the release finds it unparseable) and give the release's parse
rate, answer frequencies and TV exactly: both compute them as the same few correctly rounded float64 operations.

One named difference (docs/fidelity.md, "When no MCQ generation parses"): when nothing parses the release writes
frequencies and a TV of 0.0, the project None.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calibft.evals.mcq import LETTERS, parse_mcq, score, summarize

FIXTURE = json.loads((Path(__file__).parents[1] / "fixtures" / "release_mcq" / "release_mcq.json").read_text())
GENERATIONS = FIXTURE["generations"]
RUNS = FIXTURE["runs"]


def _release_answer(name: str) -> str | None:
    generation = GENERATIONS[name]
    return generation["correct_answer"] if generation["is_parseable"] else None


@pytest.mark.parametrize("name", list(GENERATIONS))
def test_parse_is_the_releases(name):
    assert parse_mcq(GENERATIONS[name]["text"]).answer == _release_answer(name)


@pytest.mark.parametrize("run", list(RUNS))
def test_summary_is_the_releases_exactly(run):
    names = RUNS[run]["generations"]
    release = RUNS[run]["summary"]
    answers = [parse_mcq(GENERATIONS[name]["text"]).answer for name in names]
    scored = score([{"text": GENERATIONS[name]["text"]} for name in names])
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
