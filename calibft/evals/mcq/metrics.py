"""MCQ answer-position balance (docs/metrics.md, MCQ answer-position balance): the paper's prompt, its strict
parser and the TV score.

    python -m calibft.evals.mcq JOB     # JOB: an MCQJob as JSON text or file

A model asked for a medical multiple-choice question with "the correct answer evenly distributed" should
place the correct answer on A, B, C and D equally often. Generations are parsed strictly, so that a model
cannot look balanced by emitting malformed questions, and the balance is scored as the total variation
distance between the answer-letter frequencies of the parseable generations and the uniform law.

Line matching: the text is cleaned of reasoning (`calibft.lm.chat.strip_reasoning`), split into lines, each
line stripped of surrounding whitespace, and empty lines dropped. Every remaining line must start with one
of the field prefixes, case sensitive, at the line start: `Question:`, `A.`, `B.`, `C.`, `D.`,
`Correct Answer:`, `Explanation:`; the field's value is the rest of the line, stripped. Fields may come in
any order, but each exactly once, on one line, with a non-empty value; a value continued on another line is
an unexpected line. The answer value, whitespace collapsed, must be exactly `A`, `B`, `C` or `D`.

Outputs in `out_dir`: `generations.jsonl.gz` (one object per generation: index, text, answer, reason, finished;
a generation that does not parse has answer null and the parser's reason) and `metrics.json`, which `score`
computes from the stored texts alone (they are parsed again), with the bootstrap interval of each number over
resamples of the generations (`intervals`, `resampled_summaries`).
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from calibft.core.io import read_job, write_json, write_jsonl
from calibft.evals.bootstrap import REPLICATES, interval_block, ratio, resampled_sums
from calibft.evals.mcq_job import MCQJob
from calibft.lm.chat import chat_prompt_ids, strip_reasoning
from calibft.lm.generation import sample_texts

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


def parse_mcq(text: str) -> ParsedMCQ:
    """Parse one generation strictly; the first problem met (in line order, then field order) is the reason."""
    lines = [line.strip() for line in strip_reasoning(text).splitlines()]
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


def sample_records(texts: Sequence[str], finished: Sequence[bool]) -> list[dict]:
    """One record per generation, with its parsed answer or the reason it failed."""
    records = []
    for i, (text, done) in enumerate(zip(texts, finished, strict=True)):
        parsed = parse_mcq(text)
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


def score(records: Sequence[dict], replicates: int = 0, bootstrap_seed: int = 0, **header) -> dict:
    """metrics.json: `summarize` of the stored texts, parsed again, and the count of each failure kind; with
    `replicates`, the percentile bootstrap interval of each number over resamples of the generations
    (`intervals`, seeded by `bootstrap_seed`)."""
    parsed = [parse_mcq(record["text"]) for record in records]
    answers = [p.answer for p in parsed]
    failures = Counter(failure_kind(p.reason) for p in parsed if not p.ok)
    metrics = {**header, **summarize(answers), "failures": dict(sorted(failures.items()))}
    if replicates:
        draws = resampled_summaries(answers, np.random.default_rng(bootstrap_seed), replicates)
        metrics["intervals"] = interval_block(draws, bootstrap_seed, "generations")
    return metrics


def run(job: MCQJob) -> None:
    started = time.time()
    tokenizer, model = job.load()
    settings = job.settings()
    ids = chat_prompt_ids(tokenizer, job.prompt, job.chat_options(), bos=job.protocol["prompt_bos"])
    texts, finished = sample_texts(model, tokenizer, ids, settings, job.seed_of("mcq", job.prompt), progress=True)
    records = sample_records(texts, finished)
    out = Path(job.out_dir)
    write_jsonl(out / "generations.jsonl.gz", records)
    header = job.header("mcq", wall_time_s=time.time() - started)
    bootstrap = {"replicates": REPLICATES, "bootstrap_seed": job.seed_of("bootstrap", "mcq")}
    write_json(out / "metrics.json", score(records, **bootstrap, **header))
    job.write_provenance(model, tokenizer, job.generation())


def main(argv: list[str] | None = None) -> None:
    run(read_job(MCQJob, "calibft.evals.mcq", sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
