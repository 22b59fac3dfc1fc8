"""The transfer evaluations as the paper shows them: the generative-distribution summary
(tab:generative-distribution-summary), the NoveltyBench split-level summary (tab:noveltybench-summary), the MCQ
answer-position table (tab:mcq-summary) and the qualitative NoveltyBench cases
(tab:noveltybench-qualitative-{regime}-{model}-{split}-{index}).

Inputs are plain dicts, loaded by the caller and ordered as the table shows them (models, then conditions):
`open_ended[model][condition]` and `mcq[model][condition]` are metrics.json dicts, and
`scores[model][condition][split]` the per-prompt rows of a NoveltyBench `scores.jsonl` for split "curated" or
"wildchat". Every number is recomputed from what it rests on where the input holds that: MCQ parse rates from
`parsed / n` and TVs from the answer frequencies (a stored value that disagrees raises), open-ended aggregates
are checked against their per-prompt rows when present, and NoveltyBench means come from the per-prompt rows
through `summarize_prompts` (each row's utility and distinct count checked against its class ids and
ratings), never from a stored aggregate. Undefined values and runs that do not exist print as "---".

Intervals (`Table.intervals`): the open-ended and MCQ cells take their run's bootstrap interval (metrics.json's
`intervals`); the NoveltyBench cells recompute theirs from the per-prompt rows as the scoring job does
(`calibft.evals.noveltybench.metrics.prompt_draws`, the split's seed), the pooled utility's replicate i being the mean
of the splits' replicates i weighted by their numbers of prompts (the splits resampled independently).
"""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from calibft.artifacts.formats import format_fixed, format_rate, format_three
from calibft.artifacts.runs import (
    TOLERANCE,
    Interval,
    Titles,
    first_seen,
    interval_frame,
    number,
    run_intervals,
    value_frame,
)
from calibft.artifacts.tables import Table, grouped_table, latex_escape, table_name
from calibft.core.checks import check_choice
from calibft.core.io import read_jsonl, read_runs
from calibft.evals.bootstrap import REPLICATES, percentile_interval
from calibft.evals.noveltybench.metrics import bootstrap_seed, prompt_draws, summarize_prompts
from calibft.evals.noveltybench.metrics import distinct as count_distinct
from calibft.evals.noveltybench.metrics import utility as prompt_utility

Runs = Mapping[str, Mapping[str, Mapping[str, Any]]]  # model -> condition -> metrics.json
Rows = Sequence[Mapping[str, Any]]
Scores = Mapping[str, Mapping[str, Mapping[str, Rows]]]  # model -> condition -> split -> per-prompt rows

NOVELTY_SPLITS = {"curated": "Curated", "wildchat": "WildChat"}
PARSE_GROUP = "MCQ parse rate ↑"
TV_GROUP = "MCQ TV ↓"
UNIQUE_GROUP = "Unique Output Rate ↑"
UTILITY_GROUP = "NoveltyBench Utility ↑"
HEADLINE_THRESHOLD = 0.9  # the open-ended support threshold when a metrics.json does not name one
REGIMES = ("soft", "hard", "base")
REGIME_TEXT = {
    "soft": "Representative NoveltyBench cases where soft-target Calibration Fine-Tuning clearly improves "
    "reward-weighted utility.",
    "hard": "Representative cases where the hard-target variant is competitive or best on prompt-level "
    "NoveltyBench utility.",
    "base": "Representative failure cases where Calibration Fine-Tuning hurts prompt-level utility.",
}
QUALITATIVE_CONDITIONS = ("base", "soft", "hard")


# ---------------------------------------------------------------------------------------------- formats


def format_support(value: float) -> str:
    """A mean support size as the paper prints it: one decimal, `.0` dropped (`711.2`, `45`)."""
    return format_fixed(value, 1)


# ---------------------------------------------------------------------------------------------- data


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=TOLERANCE, abs_tol=TOLERANCE)


def _count_text(counts: set[int]) -> str:
    """`1,000` or `10 to 1,000`."""
    low, high = min(counts), max(counts)
    return f"{low:,}" if low == high else f"{low:,} to {high:,}"


# MCQ


def mcq_numbers(run: Mapping[str, Any], where: str = "mcq") -> tuple[float, float]:
    """(parse rate, TV) of one MCQ metrics.json, NaN where undefined: the parse rate recomputed as parsed / n,
    the TV recomputed from the answer frequencies (0.5 Σ |f − 1/4|) when they are given; a stored value that
    disagrees raises ValueError."""
    n, parsed = int(run["n"]), int(run["parsed"])
    if not 0 <= parsed <= n:
        raise ValueError(f"{where}: {parsed} parsed generations of {n}")
    rate = parsed / n if n else math.nan
    stored = number(run.get("parse_rate"))
    if math.isnan(stored) != math.isnan(rate) or (not math.isnan(rate) and not _close(stored, rate)):
        raise ValueError(f"{where}: parse_rate {run.get('parse_rate')!r} is not parsed / n = {parsed}/{n}")
    tv = number(run.get("tv"))
    frequencies = run.get("frequencies")
    if frequencies is not None:
        recomputed = 0.5 * sum(abs(float(f) - 1 / len(frequencies)) for f in frequencies.values())
        if math.isnan(tv) or not _close(tv, recomputed):
            raise ValueError(f"{where}: tv {run.get('tv')!r} does not match the frequencies (TV {recomputed})")
        tv = recomputed
    if parsed == 0 and not math.isnan(tv):
        raise ValueError(f"{where}: a TV of {tv} with no parsed generation")
    return rate, tv


def _mcq_frames(mcq: Runs, models: Sequence[str], conditions: Sequence[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    numbers = {
        (m, c): mcq_numbers(mcq[m][c], f"mcq {m}/{c}") for m in models for c in conditions if c in mcq.get(m, {})
    }
    rate = value_frame(models, conditions, lambda m, c: numbers.get((m, c), (math.nan, math.nan))[0])
    tv = value_frame(models, conditions, lambda m, c: numbers.get((m, c), (math.nan, math.nan))[1])
    return rate, tv


# open-ended


def open_ended_numbers(run: Mapping[str, Any], where: str = "open_ended") -> tuple[float, float]:
    """(mean top-t support, mean unique fraction) of one open-ended metrics.json, NaN where undefined. When the
    run holds its per-prompt rows (`prompts`), the aggregates must be their means (else ValueError)."""
    if run.get("evaluation", "open_ended") != "open_ended":
        raise ValueError(f"{where}: expected an open_ended evaluation, got {run.get('evaluation')!r}")
    aggregate = run["aggregate"]
    support, unique = number(aggregate["support"]), number(aggregate.get("unique_fraction"))
    rows = run.get("prompts")
    if rows:
        mean_support = float(np.mean([row["support"] for row in rows]))
        fractions = [row["unique_fraction"] for row in rows if row.get("unique_fraction") is not None]
        mean_unique = float(np.mean(fractions)) if fractions else math.nan
        if not _close(support, mean_support) or not (
            (math.isnan(unique) and math.isnan(mean_unique)) or _close(unique, mean_unique)
        ):
            raise ValueError(f"{where}: the aggregate support / unique fraction are not the means of its prompts")
    return support, unique


def _support_group(open_ended: Runs) -> str:
    runs = [run for model_runs in open_ended.values() for run in model_runs.values()]
    thresholds = {float(run.get("headline_threshold", HEADLINE_THRESHOLD)) for run in runs}
    if len(thresholds) > 1:
        raise ValueError(f"open-ended runs report support at different thresholds {sorted(thresholds)}")
    threshold = thresholds.pop() if thresholds else HEADLINE_THRESHOLD
    return f"Top-{format_fixed(100 * threshold, 1)}% Support Size ↑"


# NoveltyBench


def _checked_rows(rows: Rows, split: str, where: str) -> list[Mapping[str, Any]]:
    """The rows of one run and split, after checking each: its split, unique ids, and (when it holds its class
    ids and ratings) its utility and distinct count recomputed from them."""
    if split not in NOVELTY_SPLITS:
        raise ValueError(f"{where}: unknown NoveltyBench split {split!r}; expected one of {', '.join(NOVELTY_SPLITS)}")
    seen: set[str] = set()
    for row in rows:
        name = f"{where}/{row.get('id')}"
        if row["split"] != split:
            raise ValueError(f"{name}: a row of split {row['split']!r} under {split!r}")
        if row["id"] in seen:
            raise ValueError(f"{name}: the prompt appears twice")
        seen.add(row["id"])
        if "class_ids" in row and "ratings" in row:
            class_ids, ratings = row["class_ids"], row["ratings"]
            if "generations" in row and len(row["generations"]) != len(class_ids):
                raise ValueError(f"{name}: {len(row['generations'])} generations for {len(class_ids)} class ids")
            if int(row["distinct"]) != count_distinct(class_ids):
                raise ValueError(f"{name}: distinct {row['distinct']} but {count_distinct(class_ids)} classes")
            recomputed = prompt_utility(class_ids, ratings)
            if not _close(float(row["utility"]), recomputed):
                raise ValueError(f"{name}: utility {row['utility']} but {recomputed} from its classes and ratings")
    return list(rows)


def _novelty_summary(run: Mapping[str, Rows], where: str) -> dict[str, Any] | None:
    """summarize_prompts over all rows of a run (every split); None when it has none."""
    rows = [row for split, split_rows in run.items() for row in _checked_rows(split_rows, split, where)]
    return summarize_prompts(rows) if rows else None


def _novelty_summaries(
    scores: Scores, models: Sequence[str], conditions: Sequence[str]
) -> dict[tuple[str, str], dict[str, Any]]:
    summaries = {}
    for m in models:
        for c in conditions:
            run = scores.get(m, {}).get(c)
            summary = _novelty_summary(run, f"noveltybench {m}/{c}") if run is not None else None
            if summary is not None:
                summaries[m, c] = summary
    return summaries


SplitDraws = dict[str, tuple[int, dict[str, np.ndarray]]]  # split -> (its prompts, `prompt_draws` of its rows)


def _novelty_draws(
    scores: Scores, summaries: Mapping[tuple[str, str], Any], replicates: int = REPLICATES
) -> dict[tuple[str, str], SplitDraws]:
    """Per run of `summaries` and per split, its number of prompts and the replicates of its means over
    resamples of its prompts, recomputed from its rows as the scoring job computes them (`prompt_draws`
    seeded by the split)."""
    return {
        (m, c): {
            split: (len(rows), prompt_draws(rows, bootstrap_seed(split), replicates))
            for split, rows in scores[m][c].items()
            if rows
        }
        for m, c in summaries
    }


def _split_interval(draws: Mapping[tuple[str, str], SplitDraws], m: str, c: str, split: str, key: str) -> Interval:
    """The interval of a split's mean `key` of run (m, c); None where it has no rows of the split."""
    entry = draws.get((m, c), {}).get(split)
    return None if entry is None else percentile_interval(entry[1][key])


def _pooled_interval(draws: Mapping[tuple[str, str], SplitDraws], m: str, c: str, key: str) -> Interval:
    """The interval of the mean `key` over the prompts of every split of run (m, c): replicate i is the splits'
    replicates i weighted by their numbers of prompts (independent resamples of disjoint prompts)."""
    entry = draws.get((m, c))
    if not entry:
        return None
    sizes = np.array([n for n, _ in entry.values()], dtype=np.float64)
    stacked = np.array([split_draws[key] for _, split_draws in entry.values()])
    return percentile_interval((sizes[:, None] * stacked).sum(axis=0) / sizes.sum())


def _present_splits(summaries: Mapping[Any, Mapping[str, Any]]) -> list[str]:
    present = {split for summary in summaries.values() for split in summary["splits"]}
    return [split for split in NOVELTY_SPLITS if split in present]


# ---------------------------------------------------------------------------------------------- tables


def mcq_table(
    mcq: Runs,
    titles: Titles,
) -> Table:
    """tab:mcq-summary (`mcq_summary`): per model, the MCQ parse rate (bold: highest) and the TV distance of the
    answer positions from uniform (bold: lowest) of each condition; "---" where nothing parsed or not run."""
    models, conditions = list(mcq), titles.shown(mcq)
    rate, tv = _mcq_frames(mcq, models, conditions)
    counts = {int(run["n"]) for runs in mcq.values() for run in runs.values()}
    caption = (
        "Multiple-choice generation results across all evaluated models"
        f"{f' ({_count_text(counts)} generations per model and checkpoint)' if counts else ''}. "
        "MCQ parse rate is the fraction of generations that can be parsed as MCQs with a question, four A/B/C/D "
        "options, and a correct-answer field in A/B/C/D. MCQ TV is the total variation distance between "
        "answer-position frequencies and the uniform distribution over parseable generations, and is omitted "
        f"(---) when no generation is parseable. {titles.sentence(conditions)} "
        "Bold: the best value of each metric per model."
    )
    groups = [(PARSE_GROUP, rate, format_rate, False), (TV_GROUP, tv, format_three, True)]
    intervals = {
        PARSE_GROUP: run_intervals(mcq, models, conditions, "parse_rate"),
        TV_GROUP: run_intervals(mcq, models, conditions, "tv"),
    }
    return grouped_table(groups, titles, "tab:mcq-summary", caption, intervals)


def noveltybench_table(
    scores: Scores,
    titles: Titles,
) -> Table:
    """tab:noveltybench-summary (`noveltybench_summary`): per model, the mean distinct count and mean utility of
    each condition on each split present (curated, then WildChat), recomputed from the per-prompt rows. Bold:
    the highest value of each metric per model."""
    models, conditions = list(scores), titles.shown(scores)
    summaries = _novelty_summaries(scores, models, conditions)
    splits = _present_splits(summaries)
    if not splits:
        raise ValueError("no NoveltyBench rows in any run")

    def mean(split: str, key: str) -> pd.DataFrame:
        def cell(m: str, c: str) -> float:
            entry = summaries.get((m, c), {"splits": {}})["splits"].get(split)
            return math.nan if entry is None else entry[key]

        return value_frame(models, conditions, cell)

    draws = _novelty_draws(scores, summaries)

    def spans(split: str, key: str) -> pd.DataFrame:
        return interval_frame(models, conditions, lambda m, c: _split_interval(draws, m, c, split, key))

    groups, intervals = [], {}
    for split in splits:
        title = NOVELTY_SPLITS[split]
        for key, name in (("distinct", "Distinct"), ("utility", "Utility")):
            groups.append((f"{title} {name} ↑", mean(split, key), format_three, False))
            intervals[f"{title} {name} ↑"] = spans(split, key)
    sizes = {
        split: {s["splits"][split]["n_prompts"] for s in summaries.values() if split in s["splits"]} for split in splits
    }
    over = " and ".join(f"{_count_text(sizes[s])} {NOVELTY_SPLITS[s]} prompts" for s in splits)
    caption = (
        "NoveltyBench split-level summary across all evaluated models. Distinct is the mean number of semantic "
        "partitions per prompt, and Utility is the benchmark's patience-discounted reward-based score, averaged "
        f"over the prompts of each split ({over}). {titles.sentence(conditions)} "
        "Bold values denote the best reported result for each metric."
    )
    return grouped_table(groups, titles, "tab:noveltybench-summary", caption, intervals)


def generative_distribution_table(
    open_ended: Runs,
    mcq: Runs,
    scores: Scores,
    titles: Titles,
) -> Table:
    """tab:generative-distribution-summary: per model and condition, the mean top-90% first-token support and
    the mean unique output rate of open-ended random generation, the MCQ TV and the NoveltyBench utility pooled
    by prompt over both splits. Rows: every model of any input, in order of first appearance; "---" where a run
    is missing or the value undefined. A NoveltyBench run without a split that other runs have raises
    ValueError (its pooled utility would not be comparable). Bold: the best value of each metric per model."""
    models = first_seen(open_ended, mcq, scores)
    conditions = titles.shown(open_ended, mcq, scores)
    numbers = {
        (m, c): open_ended_numbers(open_ended[m][c], f"open_ended {m}/{c}")
        for m in models
        for c in conditions
        if c in open_ended.get(m, {})
    }
    support = value_frame(models, conditions, lambda m, c: numbers.get((m, c), (math.nan, math.nan))[0])
    unique = value_frame(models, conditions, lambda m, c: numbers.get((m, c), (math.nan, math.nan))[1])
    _, tv = _mcq_frames(mcq, models, conditions)
    summaries = _novelty_summaries(scores, models, conditions)
    splits = _present_splits(summaries)
    for (m, c), summary in summaries.items():
        missing = [s for s in splits if s not in summary["splits"]]
        if missing:
            raise ValueError(f"noveltybench {m}/{c} has no rows of split {missing}, which other runs have")
    utility = value_frame(
        models, conditions, lambda m, c: summaries[m, c]["pooled"]["utility"] if (m, c) in summaries else math.nan
    )
    over = " and ".join(NOVELTY_SPLITS[s] for s in splits) or "NoveltyBench"
    caption = (
        "Generative-distribution summary. Support Size (the number of most likely first tokens that cover the "
        "probability threshold, averaged over prompts) and Unique Output Rate (the fraction of distinct answers "
        "among repeated samples, averaged over prompts) measure open-ended random-generation diversity; MCQ TV "
        "measures answer-position balance over parseable generations; NoveltyBench Utility is the benchmark's "
        f"patience-discounted reward metric, averaged over all {over} prompts together. MCQ TV is omitted (---) "
        f"when no generation is parseable. {titles.sentence(conditions)} "
        "Bold denotes the best value for each available metric."
    )
    support_group = _support_group(open_ended)
    groups = [
        (support_group, support, format_support, False),
        (UNIQUE_GROUP, unique, format_rate, False),
        (TV_GROUP, tv, format_three, True),
        (UTILITY_GROUP, utility, format_three, False),
    ]
    draws = _novelty_draws(scores, summaries)
    intervals = {
        support_group: run_intervals(open_ended, models, conditions, "support"),
        UNIQUE_GROUP: run_intervals(open_ended, models, conditions, "unique_fraction"),
        TV_GROUP: run_intervals(mcq, models, conditions, "tv"),
        UTILITY_GROUP: interval_frame(models, conditions, lambda m, c: _pooled_interval(draws, m, c, "utility")),
    }
    label = "tab:generative-distribution-summary"
    return grouped_table(groups, titles, label, caption, intervals)


# ---------------------------------------------------------------------------------------------- qualitative


@dataclass(frozen=True)
class QualitativeCase:
    """One prompt of one model shown as a qualitative table. regime: "soft" (soft-target fine-tuning helps),
    "hard" (the hard-target variant is competitive or best) or "base" (fine-tuning hurts); index: the number
    after the last "-" of the prompt id; delta: the regime's utility delta (see `qualitative_cases`)."""

    regime: str
    model: str
    split: str
    prompt_id: str
    index: int
    delta: float

    def __post_init__(self):
        check_choice("regime", self.regime, REGIMES)

    @property
    def label(self) -> str:
        return f"tab:noveltybench-qualitative-{self.regime}-{self.model}-{self.split}-{self.index}"


DELTAS: dict[str, Callable[[Mapping[str, float]], float]] = {
    "soft": lambda u: u["soft"] - u["base"],
    "hard": lambda u: u["hard"] - max(u["base"], u["soft"]),
    "base": lambda u: u["base"] - max(u["soft"], u["hard"]),
}


def _prompt_index(prompt_id: str) -> int:
    try:
        return int(prompt_id.rsplit("-", 1)[-1])
    except ValueError:
        raise ValueError(f"prompt id {prompt_id!r} does not end in -<number>") from None


def qualitative_cases(
    scores: Scores, models: Sequence[str], split: str = "curated", per_regime: int = 3
) -> list[QualitativeCase]:
    """The prompts shown as qualitative tables, `per_regime` for each regime, in the order soft, hard, base.

    Candidates are the (model, prompt) pairs of `models` on `split` with a row under each of base, soft and
    hard. With U the prompt-level utilities, each regime ranks all candidates by its delta:
      soft (soft-target fine-tuning helps):        U_soft − U_base
      hard (the hard-target variant competes):     U_hard − max(U_base, U_soft)
      base (fine-tuning hurts):                    U_base − max(U_soft, U_hard)
    ties broken by the order of `models`, then by the order of the prompts in the base run's rows. It takes the
    best case of each model whose best delta is positive, then fills the places left with the next cases of
    the ranking (whatever their sign), and lists them in ranking order. The paper's tables show this: one soft
    and one hard case of each of its three models, and two of GPT-OSS among the cases where fine-tuning hurts.
    The regimes choose independently, so one prompt may appear in two regimes (under two labels). Raises
    ValueError when there are fewer candidates than `per_regime`, or when a model is not in `scores`.
    """
    if per_regime < 1:
        raise ValueError(f"per_regime must be at least 1, got {per_regime}")
    unknown = [m for m in models if m not in scores]
    if unknown:
        raise ValueError(f"models {unknown} are not in the NoveltyBench scores ({', '.join(scores)})")
    candidates: list[tuple[int, int, str, str, dict[str, float]]] = []
    for model_rank, model in enumerate(dict.fromkeys(models)):
        by_condition = {}
        for condition in QUALITATIVE_CONDITIONS:
            rows = scores[model].get(condition, {}).get(split) or []
            where = f"noveltybench {model}/{condition}"
            by_condition[condition] = {row["id"]: row for row in _checked_rows(rows, split, where)}
        for prompt_rank, prompt_id in enumerate(by_condition["base"]):
            if all(prompt_id in by_condition[c] for c in QUALITATIVE_CONDITIONS):
                utilities = {c: float(by_condition[c][prompt_id]["utility"]) for c in QUALITATIVE_CONDITIONS}
                candidates.append((model_rank, prompt_rank, model, prompt_id, utilities))
    if len(candidates) < per_regime:
        raise ValueError(
            f"{len(candidates)} candidate prompts (with base, soft and hard rows on {split!r} for models "
            f"{list(models)}), fewer than the {per_regime} per regime asked for"
        )
    cases = []
    for regime in REGIMES:
        delta = DELTAS[regime]
        ranked = sorted(candidates, key=lambda c: (-delta(c[4]), c[0], c[1]))
        best_of_model: dict[str, int] = {}  # model -> rank of its best case, where that delta is positive
        for rank, (_, _, model, _, utilities) in enumerate(ranked):
            if delta(utilities) > 0:
                best_of_model.setdefault(model, rank)
        chosen = sorted(best_of_model.values())[:per_regime]
        chosen += [rank for rank in range(len(ranked)) if rank not in chosen][: per_regime - len(chosen)]
        cases += [
            QualitativeCase(regime, model, split, prompt_id, _prompt_index(prompt_id), delta(utilities))
            for _, _, model, prompt_id, utilities in (ranked[rank] for rank in sorted(chosen))
        ]
    return cases


def case_rows(
    scores: Scores, case: QualitativeCase, conditions: Sequence[str] = QUALITATIVE_CONDITIONS
) -> dict[str, Mapping[str, Any]]:
    """The per-prompt row of each condition for a case: what `qualitative_table` takes."""
    rows = {}
    for condition in conditions:
        found = [r for r in scores[case.model][condition][case.split] if r["id"] == case.prompt_id]
        if not found:
            raise ValueError(f"noveltybench {case.model}/{condition} has no row {case.prompt_id!r}")
        rows[condition] = found[0]
    return rows


def representatives(row: Mapping[str, Any], k: int = 5) -> list[tuple[int, str]]:
    """(rating, text) of the first member of each class (its rating is the class's partition score), ranked by
    rating, highest first, ties in class creation order; the top `k`."""
    class_ids, ratings, generations = row["class_ids"], row["ratings"], row["generations"]
    if not len(class_ids) == len(ratings) == len(generations):
        raise ValueError(
            f"{row.get('id')}: {len(generations)} generations, {len(class_ids)} class ids, {len(ratings)} ratings"
        )
    first: dict[int, int] = {}  # class id -> index of its first member, in creation order
    for i, class_id in enumerate(class_ids):
        first.setdefault(class_id, i)
    members = [(int(ratings[i]), rank, generations[i]) for rank, i in enumerate(first.values())]
    members.sort(key=lambda member: (-member[0], member[1]))
    return [(rating, text) for rating, _, text in members[:k]]


_PUNCTUATION = str.maketrans(
    {
        "\u2010": "-",
        "\u2011": "-",
        "\u2012": "-",
        "\u2018": "'",
        "\u2019": "'",
        "\u201a": "'",
        "\u201b": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
        "\u2032": "'",
        "\u00ad": "",  # soft hyphen
        "\u200b": "",  # zero-width space
    }
)


def _printable(char: str) -> bool:
    """Whether pdfLaTeX (utf8, T1) prints the character: ASCII, Latin-1, or what `latex_escape` turns into
    LaTeX (Greek letters, dashes, math symbols)."""
    if char.isascii() or "\u00a0" <= char <= "\u00ff":
        return char.isprintable() or char.isspace()
    return latex_escape(char) != char


def plain_text(text: str) -> str:
    """Generated text for a table cell: typographic quotes and hyphens made plain, characters that pdfLaTeX
    cannot print (emoji, most non-Latin scripts) dropped, whitespace collapsed to single spaces."""
    text = unicodedata.normalize("NFC", text).translate(_PUNCTUATION)
    return " ".join("".join(char for char in text if _printable(char)).split())


def truncate(text: str, max_chars: int = 150) -> str:
    """The text cut to at most `max_chars` characters at a word boundary, followed by " ..." when cut."""
    if len(text) <= max_chars:
        return text
    cut = text[:max_chars]
    if not text[max_chars].isspace() and " " in cut:
        cut = cut.rsplit(" ", 1)[0]  # no partial word
    return cut.rstrip() + " ..."


def qualitative_table(
    case: QualitativeCase,
    rows: Mapping[str, Mapping[str, Any]],
    titles: Titles,
    k: int = 5,
    max_chars: int = 150,
) -> Table:
    """tab:noveltybench-qualitative-{regime}-{model}-{split}-{index}: one column per condition (`rows[condition]`
    its row of the case's prompt, in order). The first row gives the prompt-level distinct count and utility,
    the next `k` rows the top-k class representatives (`representatives`), numbered, whitespace collapsed and
    cut at `max_chars` characters; a condition with fewer classes has empty cells. The condition with the
    highest utility (as printed; ties all) is bold in every row."""
    if not rows:
        raise ValueError(f"{case.label}: no rows")
    for condition, row in rows.items():
        if row["id"] != case.prompt_id or row["split"] != case.split:
            raise ValueError(f"{case.label}: the {condition} row is {row['split']}/{row['id']}")
        _checked_rows([row], case.split, f"{case.model}/{condition}")
    columns: dict[str, list[str]] = {}
    shown: dict[str, float] = {}
    for condition, row in rows.items():
        title = titles.condition(condition)
        if title in columns:
            raise ValueError(f"{case.label}: two conditions are titled {title!r}")
        head = f"D: {int(row['distinct'])}, U: {float(row['utility']):.2f}"
        shown[title] = float(f"{float(row['utility']):.2f}")
        shown_texts = [truncate(plain_text(text), max_chars) for _, text in representatives(row, k)]
        cells = [f"{i}. {text}" for i, text in enumerate(shown_texts, 1)]
        columns[title] = [head, *cells, *[""] * (k - len(cells))]
    frame = pd.DataFrame(columns)
    best = max(shown.values())
    bold = pd.DataFrame({title: [shown[title] == best] * len(frame) for title in columns})
    first = next(iter(rows.values()))
    model = titles.model(case.model)
    category = plain_text(str(first.get("category") or ""))
    caption = (
        f"{REGIME_TEXT[case.regime]} Model: {model}{f' ({category})' if category else ''}. "
        f"Prompt: {plain_text(str(first['prompt']))}"
    )
    width = 0.96 / len(columns)
    column_format = "@{}" + f"p{{{width:.2f}\\linewidth}}" * len(columns) + "@{}"
    return Table(frame, case.label, caption, bold=bold, column_format=column_format, font_size="scriptsize")


# ---------------------------------------------------------------------------------------------- renderers
# The registry's renderers (calibft.artifacts.registry): result files and settings in, a Table out.


def read_scores(
    paths: Sequence[str | Path], runs: Sequence[Sequence[str]]
) -> dict[str, dict[str, dict[str, list[dict]]]]:
    """{model: {condition: {split: rows of scores.jsonl}}} from the scores file of each (model, condition, split)
    of `runs`, in the same order."""
    scores: dict[str, dict[str, dict[str, list[dict]]]] = {}
    for path, (model, condition, split) in zip(paths, runs, strict=True):
        scores.setdefault(model, {}).setdefault(condition, {})[split] = read_jsonl(path)
    return scores


def case_records(cases: Sequence[QualitativeCase]) -> list[dict[str, Any]]:
    """The chosen cases as JSON records, each with the name of its table."""
    return [{"name": table_name(case.label), "label": case.label, **asdict(case)} for case in cases]


def chosen_case(cases_file: str | Path, name: str) -> QualitativeCase:
    """The case of the table `name` among the chosen cases of `cases_file` (`case_records`)."""
    chosen = [record for record in json.loads(Path(cases_file).read_text()) if record["name"] == name]
    if not chosen:
        raise ValueError(f"{name} is not one of the cases in {cases_file}")
    return QualitativeCase(**{k: v for k, v in chosen[0].items() if k not in ("name", "label")})


def render_mcq_table(inputs: Mapping[str, Sequence[str]], settings: Mapping[str, Any]) -> Table:
    return mcq_table(read_runs(inputs["mcq"], settings["runs"]), Titles.of(settings))


def render_noveltybench_table(inputs: Mapping[str, Sequence[str]], settings: Mapping[str, Any]) -> Table:
    return noveltybench_table(read_scores(inputs["noveltybench"], settings["noveltybench_runs"]), Titles.of(settings))


def render_generative_distribution_table(inputs: Mapping[str, Sequence[str]], settings: Mapping[str, Any]) -> Table:
    return generative_distribution_table(
        read_runs(inputs["open_ended"], settings["runs"]),
        read_runs(inputs["mcq"], settings["runs"]),
        read_scores(inputs["noveltybench"], settings["noveltybench_runs"]),
        Titles.of(settings),
    )


def render_qualitative_table(inputs: Mapping[str, Sequence[str]], settings: Mapping[str, Any]) -> Table:
    (cases_file,) = inputs["noveltybench_cases"]
    case = chosen_case(cases_file, settings["name"])
    rows = case_rows(read_scores(inputs["noveltybench_curated"], settings["noveltybench_curated_runs"]), case)
    return qualitative_table(case, rows, Titles.of(settings))
