import math

import numpy as np
import pytest

from calibft.artifacts import transfer
from calibft.artifacts.formats import format_three
from calibft.artifacts.runs import Titles
from calibft.artifacts.tables import to_latex, to_markdown, write_table
from calibft.artifacts.transfer import (
    QualitativeCase,
    case_rows,
    format_support,
    generative_distribution_table,
    mcq_table,
    noveltybench_table,
    plain_text,
    qualitative_cases,
    qualitative_table,
    representatives,
    truncate,
)
from calibft.evals.bootstrap import REPLICATES
from calibft.evals.mcq.metrics import summarize
from calibft.evals.noveltybench.metrics import bootstrap_seed, prompt_draws, split_summary, utility

CONDITION_TITLES = {"base": "Base", "soft": "Soft", "hard": "Hard"}
MODEL_TITLES = {"qwen": "Qwen3-0.6B", "gemma": "Gemma-3-1B-it", "m1": "Model-One", "m2": "Model-Two"}


# ---------------------------------------------------------------------------------------------- inputs


def mcq_run(counts, failed=0):
    """An MCQ metrics.json of `counts` parsed answers per letter A-D and `failed` unparseable generations."""
    answers = [letter for letter, n in zip("ABCD", counts, strict=True) for _ in range(n)] + [None] * failed
    return summarize(answers) | {"failures": {"missing:Question": failed} if failed else {}}


def nb_row(split, index, rating, distinct=10, texts=None, category="Creativity", prompt="Say something."):
    """A NoveltyBench row: `distinct` classes (later generations repeat the last class), every rating `rating`."""
    class_ids = list(range(distinct)) + [distinct - 1] * (10 - distinct)
    ratings = [rating] * 10
    return {
        "id": f"{split}-{index}",
        "split": split,
        "category": category,
        "prompt": prompt,
        "generations": texts or [f"{split}-{index} answer {i}" for i in range(10)],
        "class_ids": class_ids,
        "ratings": ratings,
        "utility": utility(class_ids, ratings),
        "distinct": distinct,
    }


def open_run(support, unique, threshold=0.9):
    return {
        "evaluation": "open_ended",
        "headline_threshold": threshold,
        "aggregate": {"support": support, "unique_fraction": unique, "num_prompts": 2},
        "prompts": [
            {"prompt_index": 0, "support": support - 1, "unique_fraction": unique},
            {"prompt_index": 1, "support": support + 1, "unique_fraction": unique},
        ],
    }


def cell(table, group, condition, row=0):
    return table.frame.loc[row, (group, condition)]


def bold(table, group, condition, row=0):
    return bool(table.bold.loc[row, (group, condition)])


def span(table, group, condition, row=0):
    """The interval of a cell, located like `cell`."""
    return table.intervals.loc[row, (group, condition)]


# ---------------------------------------------------------------------------------------------- formats


def test_formats_follow_the_paper():
    assert [format_three(v) for v in (0.374, 0.24, 0.0661, 2.0, 3.1429)] == ["0.374", "0.24", "0.066", "2", "3.143"]
    assert [format_support(v) for v in (45.0, 711.23, 8.8, 1234.56)] == ["45", "711.2", "8.8", "1234.6"]


# ---------------------------------------------------------------------------------------------- MCQ

MCQ = {
    "qwen": {
        "base": mcq_run((10, 10, 10, 10)),  # 100%, TV 0
        "soft": mcq_run((0, 0, 0, 0), failed=40),  # 0%, TV undefined
        "hard": mcq_run((20, 10, 5, 5)),  # 100%, TV 0.25
    },
    "gemma": {
        "base": mcq_run((2500, 2500, 2500, 2500)),  # 100%, TV 0
        "soft": mcq_run((2499, 2499, 2499, 2499), failed=4),  # 99.96% prints 100.0%, TV 0
        "hard": mcq_run((4000, 2000, 1000, 1000), failed=2000),  # 80%, TV 0.25
    },
}


def test_mcq_table_values_bold_and_missing():
    table = mcq_table(MCQ, Titles(MODEL_TITLES, CONDITION_TITLES))
    assert table.label == "tab:mcq-summary" and table.name == "mcq_summary"
    assert list(table.frame[("", "Model")]) == ["Qwen3-0.6B", "Gemma-3-1B-it"]
    rate, tv = "MCQ parse rate ↑", "MCQ TV ↓"
    assert [cell(table, rate, c) for c in ("Base", "Soft", "Hard")] == [1.0, 0.0, 1.0]
    assert cell(table, rate, "Soft", 1) == pytest.approx(0.9996)
    assert cell(table, tv, "Hard") == pytest.approx(0.25)
    assert math.isnan(cell(table, tv, "Soft"))
    # highest parse rate bold, ties as printed (99.96% prints 100.0%); lowest TV bold, never the undefined one
    assert [bold(table, rate, c) for c in ("Base", "Soft", "Hard")] == [True, False, True]
    assert [bold(table, rate, c, 1) for c in ("Base", "Soft", "Hard")] == [True, True, False]
    assert [bold(table, tv, c) for c in ("Base", "Soft", "Hard")] == [True, False, False]
    assert [bold(table, tv, c, 1) for c in ("Base", "Soft", "Hard")] == [True, True, False]
    markdown = to_markdown(table)
    assert "| Qwen3-0.6B | **100.0%** | 0.0% | **100.0%** | **0** | --- | 0.25 |" in markdown
    assert "| Gemma-3-1B-it | **100.0%** | **100.0%** | 80.0% | **0** | **0** | 0.25 |" in markdown
    assert "parse rate" in table.caption and "omitted" in table.caption


def test_mcq_table_recomputes_and_rejects_inconsistent_metrics():
    tampered = {"qwen": {"base": MCQ["qwen"]["base"] | {"parse_rate": 0.5}}}
    with pytest.raises(ValueError, match="parse_rate"):
        mcq_table(tampered, Titles(MODEL_TITLES, CONDITION_TITLES))
    tampered = {"qwen": {"base": MCQ["qwen"]["base"] | {"tv": 0.3}}}
    with pytest.raises(ValueError, match="frequencies"):
        mcq_table(tampered, Titles(MODEL_TITLES, CONDITION_TITLES))
    # a missing run prints as undefined
    table = mcq_table({"qwen": {"base": MCQ["qwen"]["base"]}}, Titles(MODEL_TITLES, CONDITION_TITLES, ("base", "soft")))
    assert math.isnan(cell(table, "MCQ parse rate ↑", "Soft"))


# ---------------------------------------------------------------------------------------------- NoveltyBench

# model -> condition -> split -> rows. Curated and WildChat have different sizes so that the pooled mean over
# prompts differs from the mean of the split means.
SCORES = {
    "qwen": {
        "base": {
            "wildchat": [nb_row("wildchat", 0, 10)],  # listed first: the table still starts with curated
            "curated": [nb_row("curated", 0, 2, distinct=4), nb_row("curated", 1, 4, distinct=6)],
        },
        "soft": {
            "curated": [nb_row("curated", 0, 5, distinct=8), nb_row("curated", 1, 5, distinct=9)],
            "wildchat": [nb_row("wildchat", 0, 1, distinct=10)],
        },
        "hard": {"curated": [nb_row("curated", 0, 6), nb_row("curated", 1, 6)], "wildchat": [nb_row("wildchat", 0, 2)]},
    },
    "gemma": {
        "base": {"curated": [nb_row("curated", 0, 3, distinct=3)]},
        "soft": {"curated": [nb_row("curated", 0, 3, distinct=3)]},
    },
}


def mean_utility(rows):
    return float(np.mean([r["utility"] for r in rows]))


def test_noveltybench_table_split_means_and_bold():
    table = noveltybench_table(SCORES, Titles(MODEL_TITLES, CONDITION_TITLES))
    assert table.label == "tab:noveltybench-summary" and table.name == "noveltybench_summary"
    groups = list(dict.fromkeys(group for group, _ in table.frame.columns[1:]))
    assert groups == ["Curated Distinct ↑", "Curated Utility ↑", "WildChat Distinct ↑", "WildChat Utility ↑"]
    base = SCORES["qwen"]["base"]
    assert cell(table, "Curated Distinct ↑", "Base") == 5.0
    assert cell(table, "Curated Distinct ↑", "Soft") == 8.5
    assert cell(table, "Curated Utility ↑", "Base") == pytest.approx(mean_utility(base["curated"]))
    assert cell(table, "WildChat Utility ↑", "Base") == pytest.approx(mean_utility(base["wildchat"]))
    # hard has all classes distinct and rating 6: utility 6, the best curated utility; distinct 10 is best too
    assert cell(table, "Curated Utility ↑", "Hard") == pytest.approx(6.0)
    assert [bold(table, "Curated Utility ↑", c) for c in ("Base", "Soft", "Hard")] == [False, False, True]
    assert [bold(table, "WildChat Utility ↑", c) for c in ("Base", "Soft", "Hard")] == [True, False, False]
    # gemma: no hard run, no wildchat rows -> undefined; its base and soft tie, both bold
    assert math.isnan(cell(table, "Curated Utility ↑", "Hard", 1))
    assert math.isnan(cell(table, "WildChat Utility ↑", "Base", 1))
    assert [bold(table, "Curated Utility ↑", c, 1) for c in ("Base", "Soft", "Hard")] == [True, True, False]
    assert "2 Curated prompts" in table.caption or "1 to 2 Curated prompts" in table.caption


def test_noveltybench_table_only_present_splits():
    only_curated = {"gemma": SCORES["gemma"]}
    table = noveltybench_table(only_curated, Titles(MODEL_TITLES, CONDITION_TITLES))
    groups = list(dict.fromkeys(group for group, _ in table.frame.columns[1:]))
    assert groups == ["Curated Distinct ↑", "Curated Utility ↑"]


def test_noveltybench_rows_must_match_their_classes_and_split():
    row = nb_row("curated", 0, 5) | {"utility": 9.5}
    with pytest.raises(ValueError, match="utility"):
        noveltybench_table({"qwen": {"base": {"curated": [row]}}}, Titles(MODEL_TITLES, CONDITION_TITLES))
    row = nb_row("curated", 0, 5) | {"distinct": 3}
    with pytest.raises(ValueError, match="distinct"):
        noveltybench_table({"qwen": {"base": {"curated": [row]}}}, Titles(MODEL_TITLES, CONDITION_TITLES))
    with pytest.raises(ValueError, match="split"):
        noveltybench_table(
            {"qwen": {"base": {"curated": [nb_row("wildchat", 0, 5)]}}}, Titles(MODEL_TITLES, CONDITION_TITLES)
        )


def test_pooled_utility_is_the_mean_over_prompts_not_of_split_means():
    run = SCORES["qwen"]["base"]
    pooled = mean_utility(run["curated"] + run["wildchat"])
    of_means = (mean_utility(run["curated"]) + mean_utility(run["wildchat"])) / 2
    assert abs(pooled - of_means) > 0.5  # the inputs tell the two apart
    assert transfer._novelty_summary(run, "noveltybench")["pooled"]["utility"] == pytest.approx(pooled)


# ---------------------------------------------------------------------------------------------- generative summary

OPEN_ENDED = {
    "qwen": {"base": open_run(45.0, 0.569), "soft": open_run(711.23, 0.453), "hard": open_run(501.6, 0.459)},
    "gemma": {"base": open_run(5.5, 0.133), "soft": open_run(52.6, 0.168), "hard": open_run(36.6, 0.173)},
}


def test_generative_distribution_table():
    both_splits = {"curated": SCORES["gemma"]["base"]["curated"], "wildchat": [nb_row("wildchat", 0, 4)]}
    scores = {"qwen": SCORES["qwen"], "gemma": {"base": both_splits, "soft": both_splits}}  # gemma: no hard
    table = generative_distribution_table(OPEN_ENDED, MCQ, scores, Titles(MODEL_TITLES, CONDITION_TITLES))
    assert table.label == "tab:generative-distribution-summary" and table.name == "generative_distribution_summary"
    groups = list(dict.fromkeys(group for group, _ in table.frame.columns[1:]))
    assert groups == ["Top-90% Support Size ↑", "Unique Output Rate ↑", "MCQ TV ↓", "NoveltyBench Utility ↑"]
    base = SCORES["qwen"]["base"]
    pooled = mean_utility(base["curated"] + base["wildchat"])
    assert cell(table, "NoveltyBench Utility ↑", "Base") == pytest.approx(pooled)
    assert cell(table, "Top-90% Support Size ↑", "Soft") == 711.23
    assert cell(table, "Unique Output Rate ↑", "Base") == 0.569
    assert math.isnan(cell(table, "MCQ TV ↓", "Soft"))
    assert math.isnan(cell(table, "NoveltyBench Utility ↑", "Hard", 1))
    support, unique, tv = "Top-90% Support Size ↑", "Unique Output Rate ↑", "MCQ TV ↓"
    assert [bold(table, support, c) for c in ("Base", "Soft", "Hard")] == [False, True, False]
    assert [bold(table, unique, c) for c in ("Base", "Soft", "Hard")] == [True, False, False]
    assert [bold(table, unique, c, 1) for c in ("Base", "Soft", "Hard")] == [False, False, True]
    assert [bold(table, tv, c) for c in ("Base", "Soft", "Hard")] == [True, False, False]
    # pooled qwen utilities: base (2-ish, 4-ish, 9-ish over 3 prompts) beats soft and hard
    utilities = [cell(table, "NoveltyBench Utility ↑", c) for c in ("Base", "Soft", "Hard")]
    assert [bold(table, "NoveltyBench Utility ↑", c) for c in ("Base", "Soft", "Hard")] == [
        u == max(utilities) for u in utilities
    ]
    markdown = to_markdown(table)
    assert "| Qwen3-0.6B | 45 | **711.2** | 501.6 | **56.9%** | 45.3% | 45.9% | **0** | --- | 0.25 |" in markdown


def test_generative_distribution_table_checks_its_inputs():
    partial = {"qwen": {"base": SCORES["qwen"]["base"], "soft": {"curated": SCORES["qwen"]["soft"]["curated"]}}}
    with pytest.raises(ValueError, match="wildchat"):
        generative_distribution_table(OPEN_ENDED, MCQ, partial, Titles(MODEL_TITLES, CONDITION_TITLES))
    tampered = {"qwen": {"base": open_run(45.0, 0.569) | {"aggregate": {"support": 50.0, "unique_fraction": 0.569}}}}
    with pytest.raises(ValueError, match="means of its prompts"):
        generative_distribution_table(tampered, {}, {}, Titles(MODEL_TITLES, CONDITION_TITLES))
    other = {"qwen": {"base": open_run(45.0, 0.569, threshold=0.5)}}
    table = generative_distribution_table(other, {}, {}, Titles(MODEL_TITLES, CONDITION_TITLES))
    assert table.frame.columns[1][0] == "Top-50% Support Size ↑"


# ---------------------------------------------------------------------------------------------- intervals


def with_intervals(runs, keys):
    """The runs, each with an `intervals` entry of a distinct made-up interval per key (what its JSON holds)."""
    out, i = {}, 0
    for model, model_runs in runs.items():
        out[model] = {}
        for condition, run in model_runs.items():
            i += 1
            out[model][condition] = run | {
                "intervals": {key: [i + k / 10, i + k / 10 + 0.05] for k, key in enumerate(keys)}
            }
    return out


def test_mcq_table_cells_take_their_runs_intervals():
    mcq = with_intervals(MCQ, ("parse_rate", "tv"))
    table = mcq_table(mcq, Titles(MODEL_TITLES, CONDITION_TITLES))
    assert table.intervals.shape == table.frame.shape
    assert list(table.intervals.columns) == list(table.frame.columns)
    for row, model in enumerate(("qwen", "gemma")):
        assert span(table, "", "Model", row) is None
        for condition, title in CONDITION_TITLES.items():
            spans = mcq[model][condition]["intervals"]
            assert span(table, "MCQ parse rate ↑", title, row) == spans["parse_rate"]
            assert span(table, "MCQ TV ↓", title, row) == spans["tv"]
    # a missing run and a run written without intervals: none
    partial = {"qwen": {"base": mcq["qwen"]["base"], "soft": MCQ["qwen"]["soft"]}}
    table = mcq_table(partial, Titles(MODEL_TITLES, CONDITION_TITLES, ("base", "soft", "hard")))
    assert span(table, "MCQ TV ↓", "Base") == mcq["qwen"]["base"]["intervals"]["tv"]
    assert span(table, "MCQ TV ↓", "Soft") is None and span(table, "MCQ parse rate ↑", "Hard") is None


def varied_rows(split, n, shift):
    """n rows of a split whose utilities and distinct counts differ from prompt to prompt."""
    return [nb_row(split, i, 1 + (3 * i + shift) % 9, distinct=1 + (5 * i + shift) % 10) for i in range(n)]


# curated and WildChat differ in size and level, so that a weighted pool differs from an unweighted one
VARIED = {
    "qwen": {
        "base": {"curated": varied_rows("curated", 12, 0), "wildchat": varied_rows("wildchat", 5, 4)},
        "soft": {"curated": varied_rows("curated", 12, 2), "wildchat": varied_rows("wildchat", 5, 7)},
    },
    "gemma": {"base": {"curated": varied_rows("curated", 12, 5), "wildchat": varied_rows("wildchat", 5, 1)}},
}


def test_noveltybench_split_intervals_are_those_the_scoring_job_writes():
    scores = {"qwen": VARIED["qwen"], "gemma": {"base": {"curated": VARIED["gemma"]["base"]["curated"]}}}
    table = noveltybench_table(scores, Titles(MODEL_TITLES, CONDITION_TITLES, ("base", "soft", "hard")))
    assert table.intervals.shape == table.frame.shape
    for row, model in enumerate(("qwen", "gemma")):
        for condition, title in CONDITION_TITLES.items():
            for split, split_title in (("curated", "Curated"), ("wildchat", "WildChat")):
                rows = scores[model].get(condition, {}).get(split)
                written = split_summary(rows, split)["intervals"] if rows else None  # the job's summary.json
                for key, name in (("distinct", "Distinct"), ("utility", "Utility")):
                    got = span(table, f"{split_title} {name} ↑", title, row)
                    if written is None:  # gemma: no hard run, no WildChat rows
                        assert got is None, (model, condition, split, key)
                    else:
                        assert got == pytest.approx(written[key]), (model, condition, split, key)
                        assert got[0] < cell(table, f"{split_title} {name} ↑", title, row) < got[1]


def test_pooled_utility_interval_weighs_the_splits_replicates_by_their_prompts():
    scores = VARIED
    open_ended = with_intervals(OPEN_ENDED, ("support", "unique_fraction"))
    mcq = with_intervals(MCQ, ("parse_rate", "tv"))
    table = generative_distribution_table(open_ended, mcq, scores, Titles(MODEL_TITLES, CONDITION_TITLES))
    assert table.intervals.shape == table.frame.shape
    support, unique, tv, utility_group = (
        "Top-90% Support Size ↑",
        "Unique Output Rate ↑",
        "MCQ TV ↓",
        "NoveltyBench Utility ↑",
    )
    for row, model in enumerate(("qwen", "gemma")):
        for condition, title in CONDITION_TITLES.items():
            assert span(table, support, title, row) == open_ended[model][condition]["intervals"]["support"]
            assert span(table, unique, title, row) == open_ended[model][condition]["intervals"]["unique_fraction"]
            assert span(table, tv, title, row) == mcq[model][condition]["intervals"]["tv"]
            run = scores[model].get(condition)
            if run is None:  # qwen and gemma have no hard NoveltyBench run, gemma no soft one
                assert span(table, utility_group, title, row) is None
                continue
            sizes = {split: len(rows) for split, rows in run.items()}
            utilities = {
                split: prompt_draws(rows, bootstrap_seed(split), REPLICATES)["utility"] for split, rows in run.items()
            }
            pooled = (sizes["curated"] * utilities["curated"] + sizes["wildchat"] * utilities["wildchat"]) / 17
            want = [float(np.quantile(pooled, 0.025)), float(np.quantile(pooled, 0.975))]
            got = span(table, utility_group, title, row)
            assert got == pytest.approx(want)
            unweighted = (utilities["curated"] + utilities["wildchat"]) / 2
            assert got != pytest.approx([np.quantile(unweighted, 0.025), np.quantile(unweighted, 0.975)])
            mean = cell(table, utility_group, title, row)
            assert mean == pytest.approx(mean_utility(run["curated"] + run["wildchat"]))
            assert got[0] < mean < got[1]


# ---------------------------------------------------------------------------------------------- qualitative cases


def triple(index, base, soft, hard):
    """Rows of one curated prompt for base, soft, hard, every generation distinct: utility = the rating."""
    return {
        c: nb_row("curated", index, rating)
        for c, rating in zip(("base", "soft", "hard"), (base, soft, hard), strict=True)
    }


def crafted_scores():
    # model -> [(index, (U_base, U_soft, U_hard))] in the runs' row order
    plan = {
        "m1": [(3, (8, 3, 4)), (6, (2, 9, 3)), (1, (2, 9, 3)), (2, (5, 6, 8))],
        "m2": [(1, (2, 9, 3)), (4, (4, 4, 10)), (5, (7, 1, 1))],
    }
    scores = {}
    for model, prompts in plan.items():
        runs = {c: {"curated": []} for c in ("base", "soft", "hard")}
        for index, utilities in prompts:
            for condition, row in triple(index, *utilities).items():
                runs[condition]["curated"].append(row)
        scores[model] = runs
    # a prompt without a hard row is no candidate, though its soft delta (9) would be the largest
    scores["m1"]["base"]["curated"].append(nb_row("curated", 9, 1))
    scores["m1"]["soft"]["curated"].append(nb_row("curated", 9, 10))
    return scores


def picked(cases, regime):
    return [(c.model, c.prompt_id) for c in cases if c.regime == regime]


def test_qualitative_cases_rank_by_regime_deltas_with_tie_break():
    cases = qualitative_cases(crafted_scores(), ["m1", "m2"])
    assert [c.regime for c in cases] == ["soft"] * 3 + ["hard"] * 3 + ["base"] * 3
    # soft delta 7 three times: model order first, then the order of the prompts in the base rows (6 before 1)
    assert picked(cases, "soft") == [("m1", "curated-6"), ("m1", "curated-1"), ("m2", "curated-1")]
    assert picked(cases, "hard") == [("m2", "curated-4"), ("m1", "curated-2"), ("m1", "curated-3")]
    assert picked(cases, "base") == [("m2", "curated-5"), ("m1", "curated-3"), ("m1", "curated-2")]
    deltas = [c.delta for c in cases]
    assert deltas == pytest.approx([7, 7, 7, 6, 2, -4, 6, 4, -3])
    first = cases[0]
    assert (first.split, first.index) == ("curated", 6)
    # the model order decides ties
    swapped = qualitative_cases(crafted_scores(), ["m2", "m1"], per_regime=2)
    assert picked(swapped, "soft") == [("m2", "curated-1"), ("m1", "curated-6")]


def test_qualitative_cases_show_each_models_best_case_before_a_models_second():
    # m1 holds the three largest soft deltas (7, 6, 5), m2 one of 2 and m3 only a negative one
    plan = {"m1": [(1, (2, 9, 0)), (2, (2, 8, 0)), (3, (2, 7, 0))], "m2": [(4, (2, 4, 0))], "m3": [(5, (9, 1, 0))]}
    scores = {}
    for model, prompts in plan.items():
        scores[model] = {c: {"curated": []} for c in ("base", "soft", "hard")}
        for index, utilities in prompts:
            for condition, row in triple(index, *utilities).items():
                scores[model][condition]["curated"].append(row)
    soft = [c for c in qualitative_cases(scores, ["m1", "m2", "m3"]) if c.regime == "soft"]
    assert [(c.model, c.prompt_id) for c in soft] == [("m1", "curated-1"), ("m1", "curated-2"), ("m2", "curated-4")]
    assert [c.delta for c in soft] == pytest.approx([7, 6, 2])  # m3's best (-8) gives way to m1's second


def test_qualitative_cases_need_enough_candidates():
    scores = crafted_scores()
    assert len(qualitative_cases(scores, ["m1", "m2"], per_regime=7)) == 21
    with pytest.raises(ValueError, match="7 candidate"):
        qualitative_cases(scores, ["m1", "m2"], per_regime=8)
    with pytest.raises(ValueError, match="4 candidate"):
        qualitative_cases(scores, ["m1"], per_regime=5)
    with pytest.raises(ValueError, match="0 candidate"):
        qualitative_cases(scores, ["m1"], split="wildchat", per_regime=1)
    with pytest.raises(ValueError, match="not in the NoveltyBench scores"):
        qualitative_cases(scores, ["m3"])


def test_case_label_and_file_name():
    case = QualitativeCase("soft", "qwen3_14b", "curated", "curated-31", 31, 4.4)
    assert case.label == "tab:noveltybench-qualitative-soft-qwen3_14b-curated-31"
    table = qualitative_table(case, triple(31, 2, 9, 3), Titles(MODEL_TITLES, CONDITION_TITLES))
    assert table.label == case.label
    assert table.name == "noveltybench_qualitative_soft_qwen3_14b_curated_31"
    with pytest.raises(ValueError, match="regime"):
        QualitativeCase("ssot", "m", "curated", "curated-1", 1, 0.0)


def test_representatives_rank_first_members_by_rating_then_creation():
    row = {
        "id": "curated-0",
        "class_ids": [0, 1, 0, 2, 1, 3, 3, 4, 2, 5],
        "ratings": [3, 7, 9, 7, 10, 2, 8, 7, 1, 5],  # later members (9, 10, 8, 1) do not count
        "generations": [f"g{i}" for i in range(10)],
    }
    assert representatives(row, k=10) == [(7, "g1"), (7, "g3"), (7, "g7"), (5, "g9"), (3, "g0"), (2, "g5")]
    assert representatives(row) == [(7, "g1"), (7, "g3"), (7, "g7"), (5, "g9"), (3, "g0")]
    assert representatives(row, k=2) == [(7, "g1"), (7, "g3")]


def test_truncate_and_plain_text():
    assert truncate("short text", 150) == "short text"
    text = "alpha beta gamma delta"
    assert truncate(text, 13) == "alpha beta ..."  # "gamma" would be cut inside: dropped
    assert truncate(text, 16) == "alpha beta gamma ..."  # the cut falls on a space: the word stays
    assert truncate("abcdefghij", 4) == "abcd ..."  # one long word is cut inside
    assert len(truncate("word " * 100, 150)) <= 154
    assert plain_text("  Pokémon\n\nis  “cool” 🎉  high\u2011quality ") == 'Pokémon is "cool" high-quality'


def test_qualitative_table_cells_bold_and_caption():
    long = "Typhlosion. " + "A powerful Fire-type with a cool design. " * 6
    base = nb_row("curated", 54, 3, distinct=3, category="Subjective Rankings & Opinions", prompt="Coolest  Pokémon?")
    base["generations"] = [long] + [f"base {i}" for i in range(1, 10)]
    soft = nb_row("curated", 54, 9, distinct=10, category="Subjective Rankings & Opinions", prompt="Coolest  Pokémon?")
    hard = nb_row("curated", 54, 5, distinct=2, category="Subjective Rankings & Opinions", prompt="Coolest  Pokémon?")
    hard["ratings"] = [5, 8] + [5] * 8  # the second class scores higher: it is listed first
    hard["utility"] = utility(hard["class_ids"], hard["ratings"])
    rows = {"base": base, "soft": soft, "hard": hard}
    case = QualitativeCase("soft", "gemma", "curated", "curated-54", 54, 1.0)
    table = qualitative_table(case, rows, Titles(MODEL_TITLES, CONDITION_TITLES))
    frame = table.frame
    assert list(frame.columns) == ["Base", "Soft", "Hard"] and len(frame) == 6
    assert frame.loc[0, "Soft"] == f"D: 10, U: {soft['utility']:.2f}"
    assert frame.loc[0, "Base"] == f"D: 3, U: {base['utility']:.2f}"
    assert frame.loc[1, "Base"] == "1. " + truncate(" ".join(long.split()), 150)
    assert frame.loc[1, "Base"].endswith(" ...") and len(frame.loc[1, "Base"]) <= 3 + 150 + 4
    assert frame.loc[3, "Base"] == "3. base 2"
    assert (
        list(frame["Hard"])
        == [f"D: 2, U: {hard['utility']:.2f}", "1. curated-54 answer 1", "2. curated-54 answer 0"] + [""] * 3
    )
    # soft has the highest utility: its column is bold in every row, no other cell is
    assert table.bold["Soft"].all() and not table.bold[["Base", "Hard"]].to_numpy().any()
    assert table.caption == (
        "Representative NoveltyBench cases where soft-target Calibration Fine-Tuning clearly improves "
        "reward-weighted utility. Model: Gemma-3-1B-it (Subjective Rankings & Opinions). Prompt: Coolest Pokémon?"
    )
    latex = to_latex(table)
    assert r"Subjective Rankings \& Opinions" in latex and r"\textbf{D: 10" in latex
    assert "p{0.32\\linewidth}" in latex
    short = qualitative_table(case, rows, Titles(MODEL_TITLES, CONDITION_TITLES), k=2, max_chars=20)
    assert len(short.frame) == 3 and short.frame.loc[1, "Base"] == "1. Typhlosion. A ..."


def test_qualitative_table_rejects_rows_of_another_prompt():
    case = QualitativeCase("base", "m1", "curated", "curated-3", 3, 4.0)
    rows = triple(3, 8, 3, 4) | {"hard": nb_row("curated", 4, 4)}
    with pytest.raises(ValueError, match="hard row"):
        qualitative_table(case, rows, Titles(MODEL_TITLES, CONDITION_TITLES))


def test_case_rows_fetch_each_condition():
    scores = crafted_scores()
    case = qualitative_cases(scores, ["m1", "m2"])[6]  # base regime, m2 curated-5: base 7 vs soft 1, hard 1
    rows = case_rows(scores, case)
    assert list(rows) == ["base", "soft", "hard"] and all(r["id"] == "curated-5" for r in rows.values())
    assert rows["base"]["utility"] - max(rows["soft"]["utility"], rows["hard"]["utility"]) == pytest.approx(case.delta)


# ---------------------------------------------------------------------------------------------- files


def test_every_table_writes(tmp_path):
    scores = crafted_scores()
    cases = qualitative_cases(scores, ["m1", "m2"])
    tables = [
        mcq_table(MCQ, Titles(MODEL_TITLES, CONDITION_TITLES)),
        noveltybench_table(SCORES, Titles(MODEL_TITLES, CONDITION_TITLES)),
        generative_distribution_table(
            OPEN_ENDED, MCQ, {"qwen": SCORES["qwen"]}, Titles(MODEL_TITLES, CONDITION_TITLES)
        ),
        *(qualitative_table(c, case_rows(scores, c), Titles(MODEL_TITLES, CONDITION_TITLES)) for c in cases),
    ]
    names = set()
    for table in tables:
        paths = write_table(table, tmp_path)
        assert [p.name for p in paths] == [f"{table.name}.{s}" for s in ("tex", "csv", "md")]
        assert all(p.exists() for p in paths)
        assert f"\\label{{{table.label}}}" in paths[0].read_text()
        names.add(table.name)
    assert len(names) == len(tables)  # distinct labels, distinct files
