import pytest

from calibft.evals.mcq import MCQ_PROMPT, parse_mcq, summarize

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
    assert lines[-1] == (
        "(6) The correct answer should be evenly distributed among A, B, C, D options "
        "to avoid bias toward any particular option."
    )
    assert len(lines) == 20 and "\\" not in MCQ_PROMPT and "  " not in MCQ_PROMPT


ACCEPTED = [
    (VALID, "B"),
    (_replace("Correct Answer: B", "Correct Answer: B "), "B"),
    (_replace("Correct Answer: B", "Correct Answer:   D"), "D"),
    ("\n\n  " + VALID.replace("\n", "\n\n") + "\n\n", "B"),  # blank lines and indentation are ignored
    ("<think>\nQuestion: draft\nCorrect Answer: A\n</think>\n" + VALID, "B"),
    ("analysisWe need a question, answer should vary.assistantfinal" + VALID, "B"),
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


def test_summarize_rejects_unknown_letters():
    with pytest.raises(ValueError, match="'E'"):
        summarize(["A", "E"])
