import json
from dataclasses import replace

import numpy as np
import pytest

from calibft.core.io import read_jsonl
from calibft.core.protocol import resolve
from calibft.evals.mcq.job import MCQ_PROMPT, MCQJob
from calibft.evals.mcq.metrics import parse_mcq, resampled_summaries, sample_records, score, summarize
from calibft.evals.mcq.runner import run
from calibft.lm import generation
from calibft.lm.chat import strip_reasoning
from calibft.lm.models import load_tokenizer

VALID = """Question: Which drug reverses heparin?
A. Vitamin K
B. Protamine sulfate
C. Naloxone
D. Flumazenil
Correct Answer: B
Explanation: Protamine binds heparin."""


def _replace(old: str, new: str) -> str:
    assert old in VALID
    return VALID.replace(old, new)


def test_prompt_pins_exact_lines():
    lines = MCQ_PROMPT.split("\n")
    assert lines[0].startswith("You are a medical education expert who creates high-quality multiple-choice")
    assert lines[0].endswith("for medical students and professionals.")
    assert lines[1] == ""
    assert lines[2] == (
        "Please generate a medical multiple-choice question (single answer, 4 options). "
        "The question should cover medical knowledge and be of moderate difficulty."
    )
    assert lines[4:12] == [
        "Please strictly follow this format:",
        "Question: [Question content]",
        "A. [Option A content]",
        "B. [Option B content]",
        "C. [Option C content]",
        "D. [Option D content]",
        "Correct Answer: [A/B/C/D]",
        "Explanation: [Brief explanation]",
    ]
    assert lines[12] == ""
    assert lines[13] == "Requirements:"
    assert lines[17] == "(4) Output directly without any additional content."
    assert lines[-2] == (
        "(6) The correct answer should be evenly distributed among A, B, C, D options "
        "to avoid bias toward any particular option."
    )
    assert lines[-1] == ""  # the authors' text ends with a newline
    assert len(lines) == 21 and "\\" not in MCQ_PROMPT and "  " not in MCQ_PROMPT


ACCEPTED = [
    (VALID, "B"),
    (_replace("Correct Answer: B", "Correct Answer: B "), "B"),
    (_replace("Correct Answer: B", "Correct Answer:   D"), "D"),
    ("\n\n  " + VALID.replace("\n", "\n\n") + "\n\n", "B"),  # blank lines and indentation are ignored
    ("<think>\nQuestion: draft\nCorrect Answer: A\n</think>\n" + VALID, "B"),
    (_replace("Explanation: Protamine binds heparin.", "Explanation: x"), "B"),
    ("\n".join(reversed(VALID.splitlines())), "B"),  # field order is free
]

REJECTED = [
    ("", "empty_output"),
    ("<think>only thinking</think>", "empty_output"),
    (VALID + "\nA. Another option", "duplicate:A"),
    (VALID + "\nCorrect Answer: C", "duplicate:Correct Answer"),
    ("Question: again\n" + VALID, "duplicate:Question"),
    (_replace("Correct Answer: B", "Correct Answer: B."), "bad_answer:B."),
    (_replace("Correct Answer: B", "Correct Answer: E"), "bad_answer:E"),
    (_replace("Correct Answer: B", "Correct Answer: B and C"), "bad_answer:B and C"),
    (_replace("Correct Answer: B", "Correct Answer: b"), "bad_answer:b"),
    (_replace("\nExplanation: Protamine binds heparin.", ""), "missing:Explanation"),
    (_replace("C. Naloxone\n", ""), "missing:C"),
    (_replace("Question: Which drug reverses heparin?", "Question:"), "empty:Question"),
    (_replace("D. Flumazenil", "D.  "), "empty:D"),
    (_replace("Correct Answer: B", "Correct Answer:"), "empty:Correct Answer"),
    ("Here is your question:\n" + VALID, "unexpected_line"),
    (VALID + "\nI hope this helps.", "unexpected_line"),
    (_replace("Question: Which drug reverses heparin?", "Question: Which drug\nreverses heparin?"), "unexpected_line"),
    (_replace("Correct Answer: B", "**Correct Answer:** B"), "unexpected_line"),
    (_replace("Correct Answer: B", "Answer: B"), "unexpected_line"),
    ("analysisNo final answer came.", "unexpected_line"),
]


@pytest.mark.parametrize(("text", "answer"), ACCEPTED)
def test_accepted(text, answer):
    parsed = parse_mcq(text)
    assert parsed.ok and parsed.answer == answer and parsed.reason is None
    assert parsed.fields is not None and set(parsed.fields) == {
        "Question",
        "A",
        "B",
        "C",
        "D",
        "Correct Answer",
        "Explanation",
    }


@pytest.mark.parametrize(("text", "reason"), REJECTED)
def test_rejected(text, reason):
    parsed = parse_mcq(text)
    assert not parsed.ok and parsed.answer is None and parsed.reason == reason


def test_parsed_field_values():
    fields = parse_mcq(VALID).fields
    assert fields["Question"] == "Which drug reverses heparin?" and fields["B"] == "Protamine sulfate"


def test_summarize_all_same_letter():
    s = summarize(["A"] * 8 + [None] * 2)
    assert s["n"] == 10 and s["parsed"] == 8 and s["parse_rate"] == pytest.approx(0.8)
    assert s["frequencies"] == {"A": 1.0, "B": 0.0, "C": 0.0, "D": 0.0}
    assert s["tv"] == pytest.approx(0.75)


def test_summarize_uniform_and_by_hand():
    assert summarize(list("ABCD") * 5 + [None])["tv"] == pytest.approx(0.0)
    # freqs (0.5, 0.25, 0.25, 0): TV = 0.5 * (0.25 + 0 + 0 + 0.25) = 0.25
    s = summarize(["A", "A", "B", "C"])
    assert s["parse_rate"] == 1.0 and s["tv"] == pytest.approx(0.25)


def test_summarize_nothing_parses():
    s = summarize([None, None])
    assert s["parse_rate"] == 0.0 and s["tv"] is None and s["frequencies"] is None
    assert summarize([])["parse_rate"] is None


def test_nothing_parsed_leaves_the_tv_undefined_where_the_release_writes_zero():
    """A named choice (docs/fidelity.md): the release's `compute_mcq_metrics` (mcq_gen/metrics.py, lines 50-55)
    writes TV 0.0 and frequencies 0.0 when no generation parses; the paper omits the cell ("---" for Qwen3-0.6B
    and Llama-3.2-1B-it Soft at a 0.0% parse rate, tab:generative-distribution-summary and tab:mcq-summary).
    This pipeline follows the paper: TV and frequencies None, so that no table prints a perfect balance."""
    s = summarize([None] * 1000)
    assert s == {"n": 1000, "parsed": 0, "parse_rate": 0.0, "frequencies": None, "tv": None}
    assert summarize([None] * 999 + ["A"])["tv"] == pytest.approx(0.75)  # one parse defines it


def test_summarize_rejects_unknown_letters():
    with pytest.raises(ValueError, match="'E'"):
        summarize(["A", "E"])


def test_records_and_score_count_each_failure_kind():
    answer = "Correct Answer: B"
    texts = [VALID, _replace(answer, "Correct Answer: E"), _replace(answer, "Correct Answer: F"), "hello",
             _replace(answer, "Correct Answer:  C ")]  # fmt: skip
    records = sample_records(texts, [True, True, False, True, True])
    assert [r["answer"] for r in records] == ["B", None, None, None, "C"]
    assert [r["reason"] for r in records] == [None, "bad_answer:E", "bad_answer:F", "unexpected_line", None]
    assert [r["finished"] for r in records] == [True, True, False, True, True]
    metrics = score(records, model="m")
    assert metrics["model"] == "m" and metrics["parsed"] == 2 and metrics["parse_rate"] == pytest.approx(0.4)
    assert metrics["failures"] == {"bad_answer": 2, "unexpected_line": 1}
    assert metrics["frequencies"] == {"A": 0.0, "B": 0.5, "C": 0.5, "D": 0.0}
    assert metrics["tv"] == pytest.approx(0.5)


def _records(answers):
    """Records whose texts parse to `answers` (None: a text that does not parse)."""
    texts = [VALID.replace("Correct Answer: B", f"Correct Answer: {a}") if a else "hello" for a in answers]
    return sample_records(texts, [True] * len(texts))


def test_intervals_resample_the_generations_reproducibly_and_hold_the_estimates():
    answers = ["A"] * 30 + ["B"] * 20 + ["C"] * 25 + ["D"] * 5 + [None] * 20
    metrics = score(_records(answers), replicates=300, bootstrap_seed=7)
    intervals = metrics["intervals"]
    assert intervals == score(_records(answers), replicates=300, bootstrap_seed=7)["intervals"]
    assert intervals != score(_records(answers), replicates=300, bootstrap_seed=8)["intervals"]
    assert (intervals["seed"], intervals["replicates"], intervals["resampled"]) == (7, 300, "generations")
    for key, value in [
        ("parse_rate", 0.8),
        ("tv", 0.1875),
        *(("frequencies/" + k, v) for k, v in metrics["frequencies"].items()),
    ]:
        low, high = intervals[key]
        assert low < value < high, key
    assert "intervals" not in score(_records(answers))  # no replicates, no intervals


def test_intervals_by_hand():
    # every generation answers A: every resample does, so parse rate 1 and TV 0.75 in each
    intervals = score(_records(["A"] * 12), replicates=50, bootstrap_seed=0)["intervals"]
    assert intervals["parse_rate"] == pytest.approx([1.0, 1.0]) and intervals["tv"] == pytest.approx([0.75, 0.75])
    # nothing parses: the TV and the frequencies are undefined in every replicate
    intervals = score(_records([None] * 5), replicates=50, bootstrap_seed=0)["intervals"]
    assert intervals["parse_rate"] == pytest.approx([0.0, 0.0]) and intervals["tv"] is None
    assert intervals["undefined"]["tv"] == 50 and intervals["undefined"]["parse_rate"] == 0
    # each replicate is `summarize` of its resample
    answers = ["A", "B", None, "B"]
    draws = resampled_summaries(answers, np.random.default_rng(1), 20)
    picks = np.random.default_rng(1).integers(0, 4, size=(20, 4))
    for i, row in enumerate(picks):
        summary = summarize([answers[j] for j in row])
        assert draws["parse_rate"][i] == pytest.approx(summary["parse_rate"])
        assert draws["tv"][i] == pytest.approx(np.nan if summary["tv"] is None else summary["tv"], nan_ok=True)


@pytest.fixture(scope="module")
def mcq_run(tmp_path_factory, briefly_trained_model):
    root = tmp_path_factory.mktemp("mcq")
    job = MCQJob(
        model=str(briefly_trained_model), model_key="tiny", tokenizer=str(briefly_trained_model),
        chat={"template_kwargs": {"enable_thinking": False}}, condition="base", seed=3, precision="fp32",
        sampling={"samples_per_prompt": 24, "max_new_tokens": 12, "batch_size": 10}, out_dir=str(root / "base"),
    )  # fmt: skip
    run(job)
    return root, job


def test_mcq_job_stores_every_generation_and_recomputable_metrics(mcq_run):
    root, job = mcq_run
    records = read_jsonl(root / "base" / "generations.jsonl.gz")
    assert [r["index"] for r in records] == list(range(24))
    assert all(r["answer"] is None and r["reason"] for r in records)  # a tiny model writes no MCQ
    metrics = json.loads((root / "base" / "metrics.json").read_text())
    assert metrics["evaluation"] == "mcq" and metrics["n"] == 24 and metrics["parsed"] == 0
    assert metrics["tv"] is None and sum(metrics["failures"].values()) == 24
    assert {k: v for k, v in score(records).items()} == {
        k: metrics[k] for k in ("n", "parsed", "parse_rate", "frequencies", "tv", "failures")
    }
    # the job's intervals: over its generations, seeded by the job's seed, model and condition
    seed = job.seed_of("bootstrap", "mcq")
    assert metrics["intervals"] == score(records, replicates=1000, bootstrap_seed=seed)["intervals"]
    assert metrics["intervals"]["parse_rate"] == [0.0, 0.0] and metrics["intervals"]["tv"] is None
    assert metrics["job"]["prompt"] == MCQ_PROMPT


def test_mcq_job_is_reproducible_from_its_seed(mcq_run):
    root, job = mcq_run
    run(replace(job, out_dir=str(root / "again")))
    again, first = root / "again" / "generations.jsonl.gz", root / "base" / "generations.jsonl.gz"
    assert again.read_bytes() == first.read_bytes()
    run(replace(job, out_dir=str(root / "other"), seed=4))
    texts = [r["text"] for r in read_jsonl(root / "other" / "generations.jsonl.gz")]
    assert texts != [r["text"] for r in read_jsonl(root / "base" / "generations.jsonl.gz")]


# (generation, answer under `answer_reasoning: release`, under `strip_reasoning`)
WITH_REASONING = [
    ("<THINK>Balance the letters.</THINK>\n" + VALID, "B", None),  # the release's rule takes any case
    ("Let me think.</think>\n" + VALID, None, "B"),  # strip_reasoning removes what precedes a stray close tag
    (_replace("Correct Answer: B", "Correct Answer: B</think>"), "B", None),  # the release deletes the tag only
    ("analysisWe need a question, answer should vary.assistantfinal" + VALID, None, "B"),  # GPT-OSS's analysis
]


@pytest.mark.parametrize(("text", "release", "stripped"), WITH_REASONING)
def test_reasoning_is_removed_by_the_switch(text, release, stripped):
    assert parse_mcq(text, "release").answer == release and parse_mcq(text, "strip_reasoning").answer == stripped
    records = [{"text": text}]
    assert score(records, reasoning="release")["parsed"] == (release is not None)
    assert score(records, reasoning="strip_reasoning")["parsed"] == (stripped is not None)
    with pytest.raises(ValueError, match="unknown answer_reasoning"):
        parse_mcq(text, "none")


@pytest.mark.parametrize("reasoning", ["release", "strip_reasoning"])
def test_mcq_job_reads_its_generations_by_its_answer_reasoning(mcq_run, monkeypatch, reasoning):
    """The job decodes and parses under its protocol's `answer_reasoning`; `score` parses the stored texts again."""
    root, job = mcq_run
    tokenizer = load_tokenizer(job.tokenizer)
    texts = [text for text, _, _ in WITH_REASONING]
    ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    generations = generation.Generations(ids, np.ones(len(ids), dtype=bool))
    monkeypatch.setattr(generation, "sample", lambda *args, **kwargs: generations)
    protocol = resolve({"switches": {"answer_reasoning": reasoning}})
    run(replace(job, out_dir=str(root / reasoning), protocol=protocol))
    records = read_jsonl(root / reasoning / "generations.jsonl.gz")
    column = 1 if reasoning == "release" else 2
    assert [r["answer"] for r in records] == [case[column] for case in WITH_REASONING]
    # the stored text keeps its reasoning under `release` (decoded, trimmed); strip_reasoning's stores it stripped
    assert [r["text"] for r in records] == ([t.strip() for t in texts] if reasoning == "release" else [
        strip_reasoning(t) for t in texts
    ])  # fmt: skip
    metrics = json.loads((root / reasoning / "metrics.json").read_text())
    assert metrics["parsed"] == 2 == score(records, reasoning=reasoning)["parsed"]
