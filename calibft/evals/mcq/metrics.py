"""The MCQ evaluation's computations from the generated texts: the strict parser (`parse_mcq`), the balance
(`summarize`: parse rate, letter frequencies, TV to uniform), its bootstrap (`resampled_summaries`) and
metrics.json (`score`).

Line matching: the text is cleaned of reasoning by the protocol's `answer_reasoning` (`clean`: the release's
`strip_think_tags`, or `calibft.lm.chat.strip_reasoning`), split into lines, each line stripped of surrounding
whitespace, and empty lines dropped. Every remaining line must start with one
of the field prefixes, case sensitive, at the line start: `Question:`, `A.`, `B.`, `C.`, `D.`,
`Correct Answer:`, `Explanation:`; the field's value is the rest of the line, stripped. Fields may come in
any order, but each exactly once, on one line, with a non-empty value; a value continued on another line is
an unexpected line. The answer value, whitespace collapsed, must be exactly `A`, `B`, `C` or `D`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from calibft.core.checks import check_choice
from calibft.core.protocol import SWITCH
from calibft.evals.bootstrap import interval_block, ratio, resampled_sums
from calibft.lm.chat import strip_reasoning, strip_think_tags

LETTERS = ("A", "B", "C", "D")
ANSWER_FIELD = "Correct Answer"
# Field name -> line prefix, in the prompt's order (the order in which missing fields are reported).
FIELDS = {
    "Question": "Question:",
    "A": "A.",
    "B": "B.",
    "C": "C.",
    "D": "D.",
    ANSWER_FIELD: "Correct Answer:",
    "Explanation": "Explanation:",
}


@dataclass(frozen=True)
class ParsedMCQ:
    """The outcome of parsing one generation: `answer` is a letter, or None with a machine-readable `reason`.

    Reasons: `empty_output`, `unexpected_line`, `duplicate:<field>`, `empty:<field>`, `missing:<field>`,
    `bad_answer:<value>` (fields named as in `FIELDS`, e.g. `duplicate:A`, `missing:Explanation`).
    """

    answer: str | None
    reason: str | None = None
    fields: dict[str, str] | None = None

    @property
    def ok(self) -> bool:
        return self.answer is not None


def _field_of(line: str) -> tuple[str, str] | None:
    """The field a stripped line starts, with its stripped value, or None for a line that starts no field."""
    for name, prefix in FIELDS.items():
        if line.startswith(prefix):
            return name, line[len(prefix) :].strip()
    return None


def clean(text: str, reasoning: str = "release") -> str:
    """A generation cleaned of reasoning by `reasoning`, a value of protocol switch `answer_reasoning`: `release`
    as the release's parser (`calibft.lm.chat.strip_think_tags`: think blocks, an unclosed one and then every think
    tag left removed, in any case, mcq_gen/parser.py lines 18-21), `strip_reasoning` by
    `calibft.lm.chat.strip_reasoning`."""
    check_choice("answer_reasoning", reasoning, SWITCH["answer_reasoning"].values)
    return strip_think_tags(text) if reasoning == "release" else strip_reasoning(text)


def parse_mcq(text: str, reasoning: str = "release") -> ParsedMCQ:
    """Parse one generation strictly, once `clean` under `reasoning`; the first problem met (in line order, then
    field order) is the reason."""
    lines = [line.strip() for line in clean(text, reasoning).splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return ParsedMCQ(None, "empty_output")
    values: dict[str, str] = {}
    for line in lines:
        found = _field_of(line)
        if found is None:
            return ParsedMCQ(None, "unexpected_line")
        name, value = found
        if name in values:
            return ParsedMCQ(None, f"duplicate:{name}")
        if not value:
            return ParsedMCQ(None, f"empty:{name}")
        values[name] = value
    for name in FIELDS:
        if name not in values:
            return ParsedMCQ(None, f"missing:{name}")
    answer = " ".join(values[ANSWER_FIELD].split())
    if answer not in LETTERS:
        return ParsedMCQ(None, f"bad_answer:{answer}")
    return ParsedMCQ(answer, None, values)


def summarize(answers: Sequence[str | None]) -> dict:
    """Parse rate, per-letter frequencies among parseable generations and their TV distance to uniform.

    `answers` holds one entry per generation: its letter, or None for a parse failure. Frequencies and TV are
    None when nothing parses (the paper omits the TV then).
    """
    bad = [a for a in answers if a is not None and a not in LETTERS]
    if bad:
        raise ValueError(f"answers must be one of {LETTERS} or None, got {bad[0]!r}")
    n = len(answers)
    counts = np.array([sum(a == letter for a in answers) for letter in LETTERS], dtype=float)
    parsed = int(counts.sum())
    summary: dict = {"n": n, "parsed": parsed, "parse_rate": parsed / n if n else None}
    if parsed == 0:
        return summary | {"frequencies": None, "tv": None}
    freqs = counts / parsed
    tv = 0.5 * float(np.abs(freqs - 1 / len(LETTERS)).sum())
    return summary | {"frequencies": dict(zip(LETTERS, freqs.tolist(), strict=True)), "tv": tv}


def failure_kind(reason: str) -> str:
    """The reason a failure is counted under: `bad_answer:<value>` values vary, so they count together."""
    return reason.split(":", 1)[0] if reason.startswith("bad_answer:") else reason


def sample_records(texts: Sequence[str], finished: Sequence[bool], reasoning: str = "release") -> list[dict]:
    """One record per generation, with its answer parsed under `reasoning` or the reason it failed."""
    records = []
    for i, (text, done) in enumerate(zip(texts, finished, strict=True)):
        parsed = parse_mcq(text, reasoning)
        records.append(
            {"index": i, "text": text, "answer": parsed.answer, "reason": parsed.reason, "finished": bool(done)}
        )
    return records


def resampled_summaries(answers: Sequence[str | None], rng: np.random.Generator, replicates: int) -> dict:
    """The numbers of `summarize` (`parse_rate`, `tv`, `frequencies/<letter>`) on `replicates` resamples of the
    generations, each [replicates], NaN where a replicate leaves them undefined (nothing parsed)."""
    codes = np.array([LETTERS.index(a) if a is not None else len(LETTERS) for a in answers], dtype=np.int64)
    letters = np.eye(len(LETTERS) + 1)[codes][:, : len(LETTERS)]  # [n, 4]: one-hot of the parsed answers
    counts = resampled_sums(letters, rng, replicates)
    parsed = counts.sum(axis=1)
    frequencies = ratio(counts, parsed[:, None])
    return {
        "parse_rate": ratio(parsed, np.full(replicates, float(len(codes)))),
        "tv": 0.5 * np.abs(frequencies - 1 / len(LETTERS)).sum(axis=1),
        **{f"frequencies/{letter}": frequencies[:, i] for i, letter in enumerate(LETTERS)},
    }


def score(
    records: Sequence[dict], replicates: int = 0, bootstrap_seed: int = 0, reasoning: str = "release", **header
) -> dict:
    """metrics.json: `summarize` of the stored texts, parsed again under `reasoning`, and the count of each failure
    kind; with `replicates`, the percentile bootstrap interval of each number over resamples of the generations
    (`intervals`, seeded by `bootstrap_seed`)."""
    parsed = [parse_mcq(record["text"], reasoning) for record in records]
    answers = [p.answer for p in parsed]
    failures = Counter(failure_kind(p.reason) for p in parsed if not p.ok)
    metrics = {**header, **summarize(answers), "failures": dict(sorted(failures.items()))}
    if replicates:
        draws = resampled_summaries(answers, np.random.default_rng(bootstrap_seed), replicates)
        metrics["intervals"] = interval_block(draws, bootstrap_seed, "generations")
    return metrics
