import math

import numpy as np
import pytest

from calibft.artifacts.figures import save_figure
from calibft.artifacts.formats import format_three
from calibft.artifacts.retention import (
    SLICE_TITLES,
    format_perplexity,
    gpirt_numbers,
    gpirt_per_task_figure,
    paloma_figure,
    paloma_model_table,
    paloma_numbers,
    paloma_slice_table,
    retention_table,
    retention_transfer_table,
)
from calibft.artifacts.runs import Titles
from calibft.artifacts.tables import to_latex, to_markdown, write_table
from calibft.evals.paloma import metrics as paloma
from calibft.evals.tinybench import gpirt
from calibft.evals.tinybench.summary import gpirt_summary

CONDITIONS = ("base", "soft", "hard")
CONDITION_TITLES = {"base": "Base", "soft": "Soft", "hard": "Hard"}
MODEL_TITLES = {"qwen": "Qwen3-0.6B", "gemma": "Gemma-3-1B-it"}
GPIRT = "TinyBenchmarks gp-IRT ↑"
PPL = "PALOMA Perplexity ↓"
BPB = "PALOMA Bits per Byte ↓"
TASK_ORDER = ["MMLU", "HellaSwag", "TruthfulQA", "WinoGrande", "GSM8K Strict"]

# model -> condition -> gp-IRT per task, in the file's (scrambled) order: gsm8k, mmlu, winogrande, truthfulqa,
# hellaswag. gemma's base and soft means (0.4004, 0.4001) both print 0.4; gemma has no hard run.
SCORES = {
    "qwen": {
        "base": {"gsm8k_strict": 0.3, "mmlu": 0.5, "winogrande": 0.7, "truthfulqa": 0.4, "hellaswag": 0.6},
        "soft": {"gsm8k_strict": 0.1, "mmlu": 0.55, "winogrande": 0.72, "truthfulqa": 0.41, "hellaswag": 0.62},
        "hard": {"gsm8k_strict": 0.2, "mmlu": 0.56, "winogrande": 0.71, "truthfulqa": 0.39, "hellaswag": 0.61},
    },
    "gemma": {
        "base": {"gsm8k_strict": 0.2, "mmlu": 0.4, "winogrande": 0.6, "truthfulqa": 0.3, "hellaswag": 0.502},
        "soft": {"gsm8k_strict": 0.1, "mmlu": 0.45, "winogrande": 0.65, "truthfulqa": 0.3, "hellaswag": 0.5005},
    },
}

# model -> condition -> slice -> perplexity; stored in the file's order ptb, then wikitext_103
PERPLEXITY = {
    "qwen": {
        "base": {"ptb": 100.0, "wikitext_103": 20.0},
        "soft": {"ptb": 90.0, "wikitext_103": 18.0},
        "hard": {"ptb": 85.0, "wikitext_103": 19.0},
    },
    "gemma": {
        "base": {"ptb": 300.0, "wikitext_103": 30.0},
        "soft": {"ptb": 310.0, "wikitext_103": 25.0},
        "hard": {"ptb": 305.0, "wikitext_103": 28.0},
    },
}
TOKENS = {"qwen": {"ptb": 500, "wikitext_103": 1000}, "gemma": {"ptb": 400, "wikitext_103": 800}}
BYTES = {"ptb": 2000, "wikitext_103": 4000}


# ---------------------------------------------------------------------------------------------- inputs


def gpirt_run(model, condition, scores, mean=None):
    """A TinyBenchmarks summary.json; its stored mean is the tasks' mean unless `mean` is given."""
    tasks = {task: {"irt": v, "pirt": v, "gpirt": v, "accuracy": v} for task, v in scores.items()}
    stored = sum(scores.values()) / len(scores) if mean is None else mean
    return {"model": model, "condition": condition, "tasks": tasks, "mean_gpirt": stored}


def totals(nll, tokens, n_bytes, documents=3):
    """The totals of a slice (or pooled) and their metrics, computed here from the definitions."""
    return {
        "nll": nll,
        "tokens": tokens,
        "bytes": n_bytes,
        "documents": documents,
        "perplexity": math.exp(nll / tokens) if tokens else None,
        "bits_per_byte": nll / (math.log(2) * n_bytes) if n_bytes else None,
    }


def paloma_run(model, condition, perplexities, tokens, n_bytes=BYTES):
    """A PALOMA summary.json whose slices have the given perplexities (nll = tokens · ln perplexity)."""
    slices = {name: totals(tokens[name] * math.log(p), tokens[name], n_bytes[name]) for name, p in perplexities.items()}
    pooled = totals(
        sum(s["nll"] for s in slices.values()),
        sum(s["tokens"] for s in slices.values()),
        sum(s["bytes"] for s in slices.values()),
        sum(s["documents"] for s in slices.values()),
    )
    return {"evaluation": "paloma", "model": model, "condition": condition, "slices": slices, "pooled": pooled}


def tinybench_runs(scores=SCORES):
    return {m: {c: gpirt_run(m, c, s) for c, s in runs.items()} for m, runs in scores.items()}


def paloma_runs(perplexity=PERPLEXITY):
    return {m: {c: paloma_run(m, c, p, TOKENS[m]) for c, p in runs.items()} for m, runs in perplexity.items()}


def pooled_perplexity(model, condition):
    """exp(Σ nll / Σ tokens) over the slices, by hand."""
    slices = PERPLEXITY[model][condition]
    nll = sum(TOKENS[model][s] * math.log(p) for s, p in slices.items())
    return math.exp(nll / sum(TOKENS[model].values()))


def cell(table, group, title, row):
    return table.frame.loc[row, (group, title)]


def bold(table, group, title, row):
    return bool(table.bold.loc[row, (group, title)])


def first_column(table):
    return list(table.frame.iloc[:, 0])


# ---------------------------------------------------------------------------------------------- formats


def test_formats_follow_the_paper():
    assert [format_three(v) for v in (0.36, 0.3021, 0.45, 0.7164)] == ["0.36", "0.302", "0.45", "0.716"]
    assert [format_perplexity(v) for v in (19.733, 15.5, 12.001, 103.73, 1234.5)] == [
        "19.73",
        "15.5",
        "12",
        "103.73",
        "1234.5",
    ]
    assert [format_three(v) for v in (0.9981, 0.99, 1.0504)] == ["0.998", "0.99", "1.05"]


# ---------------------------------------------------------------------------------------------- gp-IRT data


def test_gpirt_numbers_orders_tasks_as_the_paper_and_recomputes_the_mean():
    scores, mean = gpirt_numbers(gpirt_run("qwen", "base", SCORES["qwen"]["base"]))
    assert list(scores) == ["mmlu", "hellaswag", "truthfulqa", "winogrande", "gsm8k_strict"]
    assert scores["gsm8k_strict"] == 0.3 and mean == pytest.approx(0.5, abs=1e-15)


def test_gpirt_numbers_rejects_a_disagreeing_stored_mean():
    run = gpirt_run("qwen", "base", SCORES["qwen"]["base"], mean=0.5 * (1 + 1e-12))
    assert gpirt_numbers(run)[1] == pytest.approx(0.5)  # within the tolerance
    with pytest.raises(ValueError, match="mean_gpirt"):
        gpirt_numbers(gpirt_run("qwen", "base", SCORES["qwen"]["base"], mean=0.51))


def test_gpirt_numbers_rejects_unknown_tasks_and_runs_in_the_wrong_slot():
    with pytest.raises(ValueError, match="unknown tasks"):
        gpirt_numbers(gpirt_run("qwen", "base", {"mmlu": 0.5, "arc_easy": 0.4}))
    runs = tinybench_runs()
    runs["qwen"]["soft"] = gpirt_run("qwen", "hard", SCORES["qwen"]["soft"])
    with pytest.raises(ValueError, match="condition 'hard'"):
        retention_table(runs, Titles(MODEL_TITLES, CONDITION_TITLES))


def test_runs_over_different_tasks_are_refused():
    runs = tinybench_runs()
    runs["gemma"]["base"] = gpirt_run("gemma", "base", {"mmlu": 0.4, "hellaswag": 0.5})
    with pytest.raises(ValueError, match="different TinyBenchmarks tasks"):
        retention_table(runs, Titles(MODEL_TITLES, CONDITION_TITLES))


# ---------------------------------------------------------------------------------------------- PALOMA data


def test_paloma_numbers_recomputes_every_metric_from_the_totals():
    numbers = paloma_numbers(paloma_runs()["qwen"]["base"])
    assert list(numbers["slices"]) == ["wikitext_103", "ptb"]  # the paper's order, not the file's
    wiki = numbers["slices"]["wikitext_103"]
    assert wiki["perplexity"] == pytest.approx(20.0, rel=1e-12)
    assert wiki["bits_per_byte"] == pytest.approx(math.log2(20.0) / 4, rel=1e-12)  # 1000 ln 20 / (ln 2 · 4000)
    assert numbers["slices"]["ptb"]["bits_per_byte"] == pytest.approx(500 * math.log2(100.0) / 2000, rel=1e-12)


def test_pooled_metrics_come_from_the_summed_slice_totals():
    pooled = paloma_numbers(paloma_runs()["qwen"]["base"])["pooled"]
    # exp((1000 ln 20 + 500 ln 100) / 1500) = 20^(2/3) · 100^(1/3), not the mean of 20 and 100
    assert pooled["perplexity"] == pytest.approx(20 ** (2 / 3) * 100 ** (1 / 3), rel=1e-12)
    bits = (1000 * math.log2(20.0) + 500 * math.log2(100.0)) / 6000
    assert pooled["bits_per_byte"] == pytest.approx(bits, rel=1e-12)


@pytest.mark.parametrize(
    ("where", "key", "factor"),
    [
        ("ptb", "perplexity", 1 + 1e-7),
        ("wikitext_103", "bits_per_byte", 1 - 1e-7),
        ("pooled", "perplexity", 1 + 1e-7),
        ("pooled", "bits_per_byte", 1 + 1e-7),
        ("pooled", "nll", 1 + 1e-7),
        ("pooled", "tokens", 2),
        ("pooled", "bytes", 2),
        ("pooled", "documents", 2),
    ],
)
def test_a_stored_value_that_disagrees_with_the_totals_raises(where, key, factor):
    run = paloma_runs()["qwen"]["base"]
    entry = run["pooled"] if where == "pooled" else run["slices"][where]
    paloma_numbers(run)  # consistent as built
    entry[key] = entry[key] * factor if isinstance(entry[key], float) else entry[key] * int(factor)
    with pytest.raises(ValueError, match=key):
        paloma_numbers(run)


def test_a_stored_value_within_the_tolerance_is_accepted_but_the_recomputed_one_is_used():
    run = paloma_runs()["qwen"]["base"]
    run["slices"]["ptb"]["perplexity"] *= 1 + 1e-12
    assert paloma_numbers(run)["slices"]["ptb"]["perplexity"] == pytest.approx(100.0, rel=1e-14)


def test_paloma_accepts_the_evaluation_output_and_an_empty_slice():
    from calibft.evals.paloma.metrics import Totals, summarize

    metrics = summarize({"wikitext_103": Totals(1000 * math.log(20.0), 1000, 4000, 3), "ptb": Totals(0.0, 0, 0, 0)}) | {
        "evaluation": "paloma",
        "model": "qwen",
        "condition": "base",
    }
    numbers = paloma_numbers(metrics)
    assert math.isnan(numbers["slices"]["ptb"]["perplexity"]) and math.isnan(numbers["slices"]["ptb"]["bits_per_byte"])
    assert numbers["pooled"]["perplexity"] == pytest.approx(20.0, rel=1e-12)


def test_paloma_refuses_unknown_slices_and_runs_over_different_slices():
    run = paloma_run(
        "qwen", "base", {"ptb": 10.0, "the_pile": 12.0}, {"ptb": 10, "the_pile": 10}, {"ptb": 40, "the_pile": 40}
    )
    with pytest.raises(ValueError, match="unknown slices"):
        paloma_numbers(run)
    runs = paloma_runs()
    runs["gemma"]["soft"] = paloma_run("gemma", "soft", {"ptb": 310.0}, TOKENS["gemma"])
    with pytest.raises(ValueError, match="different PALOMA slices"):
        paloma_model_table(runs, Titles(MODEL_TITLES, CONDITION_TITLES))


# ---------------------------------------------------------------------------------------------- tables


def test_retention_transfer_table_pairs_mean_gpirt_with_pooled_perplexity():
    paloma = paloma_runs()
    del paloma["gemma"]["soft"]
    table = retention_transfer_table(tinybench_runs(), paloma, Titles(MODEL_TITLES, CONDITION_TITLES))
    assert table.label == "tab:retention-transfer-summary" and table.name == "retention_transfer_summary"
    assert first_column(table) == ["Qwen3-0.6B", "Gemma-3-1B-it"]
    assert list(table.frame.columns)[1:] == [(g, c) for g in (GPIRT, PPL) for c in ("Base", "Soft", "Hard")]
    assert cell(table, GPIRT, "Soft", 0) == pytest.approx((0.1 + 0.55 + 0.72 + 0.41 + 0.62) / 5)
    assert cell(table, PPL, "Hard", 0) == pytest.approx(pooled_perplexity("qwen", "hard"), rel=1e-12)
    # qwen: gp-IRT best is base (0.5 > 0.494 > 0.48), perplexity best is soft
    assert [bold(table, GPIRT, c, 0) for c in ("Base", "Soft", "Hard")] == [True, False, False]
    assert [bold(table, PPL, c, 0) for c in ("Base", "Soft", "Hard")] == [False, True, False]
    # gemma: base 0.4004 and soft 0.4001 both print 0.4 (both bold); no hard gp-IRT, no soft perplexity
    assert [bold(table, GPIRT, c, 1) for c in ("Base", "Soft", "Hard")] == [True, True, False]
    assert math.isnan(cell(table, GPIRT, "Hard", 1)) and math.isnan(cell(table, PPL, "Soft", 1))
    assert [bold(table, PPL, c, 1) for c in ("Base", "Soft", "Hard")] == [False, False, True]
    gemma_line = to_latex(table).splitlines()[-6]
    assert gemma_line.startswith("Gemma-3-1B-it & \\textbf{0.4} & \\textbf{0.4} & --- &")
    assert " & --- & " in gemma_line.split("---", 1)[1]
    assert "PALOMA Perplexity" in to_latex(table) and "two evaluation slices" in table.caption


def test_retention_table_stacks_model_means_and_task_means_over_models():
    table = retention_table(tinybench_runs(), Titles(MODEL_TITLES, CONDITION_TITLES))
    assert table.label == "tab:retention-summary" and table.name == "retention_summary"
    assert first_column(table) == ["Qwen3-0.6B", "Gemma-3-1B-it", *TASK_ORDER]
    assert table.frame.columns[0] == ("", "Model / Task")
    assert list(table.shaded) == [False, False, True, True, True, True, True]
    # the task rows: mean over the two models, by hand; hard is undefined (gemma has no hard run)
    assert cell(table, GPIRT, "Base", 2) == pytest.approx((0.5 + 0.4) / 2)  # MMLU
    assert cell(table, GPIRT, "Soft", 3) == pytest.approx((0.62 + 0.5005) / 2)  # HellaSwag
    assert cell(table, GPIRT, "Base", 6) == pytest.approx((0.3 + 0.2) / 2)  # GSM8K
    assert all(math.isnan(cell(table, GPIRT, "Hard", row)) for row in range(2, 7))
    assert cell(table, GPIRT, "Hard", 0) == pytest.approx((0.2 + 0.56 + 0.71 + 0.39 + 0.61) / 5)
    # bold: the highest per row; MMLU: soft (0.5 > 0.45); GSM8K: base (0.25 > 0.1); gemma: base and soft print 0.4
    assert [bold(table, GPIRT, c, 2) for c in ("Base", "Soft", "Hard")] == [False, True, False]
    assert [bold(table, GPIRT, c, 6) for c in ("Base", "Soft", "Hard")] == [True, False, False]
    assert [bold(table, GPIRT, c, 1) for c in ("Base", "Soft", "Hard")] == [True, True, False]
    tex = to_latex(table)
    assert tex.count("\\rowcolor") == 5 and "Model / Task" in tex
    assert "five TinyBenchmarks tasks" in table.caption and "averaging across both evaluated models" in table.caption


def test_paloma_model_table_reports_pooled_perplexity_and_bits_per_byte():
    table = paloma_model_table(paloma_runs(), Titles(MODEL_TITLES, CONDITION_TITLES))
    assert table.label == "tab:paloma-model-summary" and table.name == "paloma_model_summary"
    assert list(table.frame.columns)[1:] == [(g, c) for g in (PPL, BPB) for c in ("Base", "Soft", "Hard")]
    assert cell(table, PPL, "Base", 0) == pytest.approx(pooled_perplexity("qwen", "base"), rel=1e-12)
    gemma_bits = (800 * math.log2(28.0) + 400 * math.log2(305.0)) / 6000
    assert cell(table, BPB, "Hard", 1) == pytest.approx(gemma_bits, rel=1e-12)
    # qwen: soft (18, 90) is lowest on both metrics; gemma: whichever pooled value is lowest by hand
    assert [bold(table, PPL, c, 0) for c in ("Base", "Soft", "Hard")] == [False, True, False]
    assert [bold(table, BPB, c, 0) for c in ("Base", "Soft", "Hard")] == [False, True, False]
    gemma = {c: pooled_perplexity("gemma", c) for c in ("base", "soft", "hard")}
    lowest = min(gemma, key=gemma.get)
    assert [bold(table, PPL, CONDITION_TITLES[c], 1) for c in ("base", "soft", "hard")] == [
        c == lowest for c in ("base", "soft", "hard")
    ]
    assert "two PALOMA evaluation slices" in table.caption
    assert "Base denotes the original checkpoint, Soft the soft-target" in table.caption


def test_paloma_model_table_bolds_every_tie_as_printed():
    runs = {
        "m": {
            "base": paloma_run("m", "base", {"c4_en": 12.041}, {"c4_en": 100}, {"c4_en": 400}),
            "soft": paloma_run("m", "soft", {"c4_en": 12.044}, {"c4_en": 100}, {"c4_en": 400}),
            "hard": paloma_run("m", "hard", {"c4_en": 12.2}, {"c4_en": 100}, {"c4_en": 400}),
        }
    }
    table = paloma_model_table(runs, Titles({}, CONDITION_TITLES))
    assert [bold(table, PPL, c, 0) for c in ("Base", "Soft", "Hard")] == [True, True, False]
    assert "| **12.04** | **12.04** | 12.2 |" in to_markdown(table)


def test_paloma_slice_table_averages_each_conditions_values_over_models():
    table = paloma_slice_table(paloma_runs(), Titles(MODEL_TITLES, CONDITION_TITLES))
    assert table.label == "tab:paloma-slice-summary" and table.name == "paloma_slice_summary"
    assert table.frame.columns[0] == ("", "Slice") and first_column(table) == ["WikiText-103", "PTB"]
    assert cell(table, PPL, "Base", 0) == pytest.approx((20.0 + 30.0) / 2)
    assert cell(table, PPL, "Soft", 1) == pytest.approx((90.0 + 310.0) / 2)
    ptb_hard_bits = (500 * math.log2(85.0) / 2000 + 400 * math.log2(305.0) / 2000) / 2
    assert cell(table, BPB, "Hard", 1) == pytest.approx(ptb_hard_bits, rel=1e-12)
    # WikiText-103: soft (21.5) lowest; PTB: hard (195) lowest
    assert [bold(table, PPL, c, 0) for c in ("Base", "Soft", "Hard")] == [False, True, False]
    assert [bold(table, PPL, c, 1) for c in ("Base", "Soft", "Hard")] == [False, False, True]
    assert "mean across both evaluated models" in table.caption


def test_paloma_slice_table_marks_a_mean_with_a_missing_model():
    runs = paloma_runs()
    del runs["gemma"]["hard"]
    table = paloma_slice_table(runs, Titles(MODEL_TITLES, CONDITION_TITLES))
    assert math.isnan(cell(table, PPL, "Hard", 1)) and not bold(table, PPL, "Hard", 1)
    assert cell(table, PPL, "Base", 1) == pytest.approx(200.0)
    lines = to_latex(table).splitlines()
    rows = lines[lines.index("\\midrule") + 1 : lines.index("\\bottomrule")]
    assert rows[1].startswith("PTB & \\textbf{200} & \\textbf{200} & --- & ")  # base and soft tie at 200
    assert sum(row.count("---") for row in rows) == 4


def test_every_table_writes_its_three_files(tmp_path):
    tinybench, paloma = tinybench_runs(), paloma_runs()
    tables = [
        retention_transfer_table(tinybench, paloma, Titles(MODEL_TITLES, CONDITION_TITLES)),
        retention_table(tinybench, Titles(MODEL_TITLES, CONDITION_TITLES)),
        paloma_model_table(paloma, Titles(MODEL_TITLES, CONDITION_TITLES)),
        paloma_slice_table(paloma, Titles(MODEL_TITLES, CONDITION_TITLES)),
    ]
    for table in tables:
        write_table(table, tmp_path)
    names = ["retention_transfer_summary", "retention_summary", "paloma_model_summary", "paloma_slice_summary"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{n}.{s}" for n in names for s in ("tex", "csv", "md"))
    assert "\\label{tab:paloma-slice-summary}" in (tmp_path / "paloma_slice_summary.tex").read_text()
    assert (tmp_path / "retention_summary.csv").read_text().splitlines()[0] == (
        "Model / Task,TinyBenchmarks gp-IRT ↑ / Base,TinyBenchmarks gp-IRT ↑ / Soft,TinyBenchmarks gp-IRT ↑ / Hard"
    )


# ---------------------------------------------------------------------------------------------- intervals
# Summaries made by the evaluations' own producers (small replicate counts), so that every model's replicates are
# drawn as a real job draws them: the same seed resamples the same items (documents) alike.

REPLICATES = 40
SEED = 11
PARAMS = gpirt.synthetic_params(seed=3, n_seen=5)  # five anchors per scenario: five items per task
ITEM_SCORES = {  # model -> condition -> task -> (metric -> the five items' scores)
    "qwen": {
        "base": {
            "mmlu": [1, 0, 1, 1, 0],
            "truthfulqa": [0.7, 0.2, 0.9, 0.4, 0.5],
            "gsm8k": ([1, 0, 0, 1, 0], [1, 1, 0, 1, 0]),
        },
        "soft": {
            "mmlu": [1, 1, 1, 0, 0],
            "truthfulqa": [0.6, 0.3, 0.8, 0.1, 0.5],
            "gsm8k": ([0, 0, 0, 1, 0], [0, 1, 0, 1, 0]),
        },
        "hard": {
            "mmlu": [0, 1, 1, 1, 0],
            "truthfulqa": [0.5, 0.5, 0.9, 0.2, 0.3],
            "gsm8k": ([1, 0, 1, 1, 0], [1, 0, 1, 1, 1]),
        },
    },
    "gemma": {
        "base": {
            "mmlu": [0, 0, 1, 1, 0],
            "truthfulqa": [0.4, 0.1, 0.6, 0.3, 0.8],
            "gsm8k": ([0, 1, 0, 0, 0], [0, 1, 1, 0, 0]),
        },
        "soft": {
            "mmlu": [1, 0, 0, 1, 1],
            "truthfulqa": [0.3, 0.2, 0.7, 0.6, 0.9],
            "gsm8k": ([1, 1, 0, 0, 0], [1, 1, 0, 0, 1]),
        },
    },
}
METRICS_OF = {"mmlu": ("acc",), "truthfulqa": ("mc2",), "gsm8k": ("strict", "flexible")}
TASK_KEYS = ["mmlu", "truthfulqa", "gsm8k_strict", "gsm8k_flexible"]  # the rows of GPIRT_ROWS scored, in order
DOCUMENTS = {"ptb": 6, "wikitext_103": 9}  # documents per slice: the same for every model and condition


def scored_tinybench(model, condition, seed=SEED):
    """A TinyBenchmarks summary.json as the job writes it (`gpirt_summary` over the tasks' scores.json)."""
    summaries = {}
    for task, columns in ITEM_SCORES[model][condition].items():
        columns = columns if isinstance(columns, tuple) else (columns,)
        metrics = {
            metric: {"scores": [float(x) for x in scores], "accuracy": float(np.mean(scores))}
            for metric, scores in zip(METRICS_OF[task], columns, strict=True)
        }
        summaries[task] = {"metrics": metrics}
    summary = gpirt_summary(PARAMS, summaries, seed, REPLICATES)
    return {"evaluation": "tinybench", "model": model, "condition": condition, **summary}


def documents(model, condition):
    """Per-document records of a PALOMA run: each model has its own tokens, each run its own NLLs."""
    rng = np.random.default_rng(len(model) * 100 + CONDITIONS.index(condition))
    records = []
    for name, n in DOCUMENTS.items():
        for i in range(n):
            tokens = 20 + (7 * i + len(model)) % 13
            nll = float(tokens * rng.uniform(1.0, 4.0 if name == "ptb" else 3.0))
            records.append({"slice": name, "index": i, "nll": nll, "tokens": tokens, "bytes": 4 * tokens + i})
    return records


def scored_paloma(model, condition, seed=SEED):
    """A PALOMA summary.json as the job writes it (`paloma.score` with replicates)."""
    return paloma.score(
        documents(model, condition),
        list(DOCUMENTS),
        replicates=REPLICATES,
        bootstrap_seed=seed,
        evaluation="paloma",
        model=model,
        condition=condition,
    )


@pytest.fixture(scope="module")
def scored():
    tinybench = {m: {c: scored_tinybench(m, c) for c in runs} for m, runs in ITEM_SCORES.items()}
    paloma_runs = {m: {c: scored_paloma(m, c) for c in CONDITIONS} for m in MODEL_TITLES}
    return tinybench, paloma_runs


def span(table, group, title, row):
    return table.intervals.loc[row, (group, title)]


def paired_mean_interval(runs, key, condition, models=("qwen", "gemma")):
    """By hand: the 2.5% and 97.5% quantiles over replicates i of the mean of the models' kept replicates i."""
    draws = np.array([runs[m][condition]["intervals"]["draws"][key] for m in models], dtype=float)
    mean = draws.mean(axis=0)
    return [float(np.quantile(mean, 0.025)), float(np.quantile(mean, 0.975))]


def test_intervals_keep_the_frames_shape_and_first_column(scored):
    tinybench, paloma_runs = scored
    tables = [
        retention_transfer_table(tinybench, paloma_runs, Titles(MODEL_TITLES, CONDITION_TITLES)),
        retention_table(tinybench, Titles(MODEL_TITLES, CONDITION_TITLES)),
        paloma_model_table(paloma_runs, Titles(MODEL_TITLES, CONDITION_TITLES)),
        paloma_slice_table(paloma_runs, Titles(MODEL_TITLES, CONDITION_TITLES)),
    ]
    for table in tables:
        assert table.intervals is not None and table.intervals.shape == table.frame.shape, table.label
        assert list(table.intervals.columns) == list(table.frame.columns), table.label
        assert table.intervals.iloc[:, 0].isna().all(), table.label  # the row titles have no interval
    assert tables[1].intervals.columns[0] == ("", "Model / Task")
    assert tables[3].intervals.columns[0] == ("", "Slice")


def test_run_cells_take_the_runs_intervals(scored):
    tinybench, paloma_runs = scored
    paloma_runs = {m: dict(runs) for m, runs in paloma_runs.items()}
    del paloma_runs["gemma"]["soft"]
    table = retention_transfer_table(tinybench, paloma_runs, Titles(MODEL_TITLES, CONDITION_TITLES))
    models = paloma_model_table(paloma_runs, Titles(MODEL_TITLES, CONDITION_TITLES))
    for row, model in enumerate(("qwen", "gemma")):
        for condition, title in CONDITION_TITLES.items():
            gp = tinybench[model].get(condition)
            pal = paloma_runs[model].get(condition)
            if gp is None:  # gemma: no hard TinyBenchmarks run
                assert span(table, GPIRT, title, row) is None
            else:
                assert span(table, GPIRT, title, row) == gp["intervals"]["mean_gpirt"]
                low, high = gp["intervals"]["mean_gpirt"]
                assert low <= cell(table, GPIRT, title, row) <= high
            if pal is None:  # gemma: no soft PALOMA run
                assert span(table, PPL, title, row) is None
                assert span(models, PPL, title, row) is None and span(models, BPB, title, row) is None
            else:
                assert span(table, PPL, title, row) == pal["intervals"]["pooled/perplexity"]
                assert span(models, PPL, title, row) == pal["intervals"]["pooled/perplexity"]
                assert span(models, BPB, title, row) == pal["intervals"]["pooled/bits_per_byte"]
                low, high = pal["intervals"]["pooled/bits_per_byte"]
                assert low <= cell(models, BPB, title, row) <= high


def test_retention_table_task_rows_take_the_interval_of_the_mean_over_models(scored):
    tinybench, _ = scored
    table = retention_table(tinybench, Titles(MODEL_TITLES, CONDITION_TITLES))
    titles = ["MMLU", "TruthfulQA", "GSM8K Strict", "GSM8K Flex"]
    assert first_column(table) == ["Qwen3-0.6B", "Gemma-3-1B-it", *titles]
    assert list(table.shaded) == [False, False, True, True, True, True]
    for row, model in enumerate(("qwen", "gemma")):  # the model rows: each run's own interval of its mean
        for condition, title in CONDITION_TITLES.items():
            run = tinybench[model].get(condition)
            assert span(table, GPIRT, title, row) == (None if run is None else run["intervals"]["mean_gpirt"])
    for row, task in enumerate(TASK_KEYS, start=2):
        key = f"tasks/{task}/gpirt"
        for condition in ("base", "soft"):
            title = CONDITION_TITLES[condition]
            want = paired_mean_interval(tinybench, key, condition)
            assert span(table, GPIRT, title, row) == pytest.approx(want), (task, condition)
            # not the mean of the models' intervals, which ignores that both resample the same items
            ends = np.mean([tinybench[m][condition]["intervals"][key] for m in ("qwen", "gemma")], axis=0)
            assert want != pytest.approx(list(ends))
        assert span(table, GPIRT, "Hard", row) is None  # gemma has no hard run
        assert math.isnan(cell(table, GPIRT, "Hard", row))


def test_retention_table_task_rows_of_models_bootstrapped_unpaired_have_no_interval(scored):
    tinybench, _ = scored
    tinybench = {m: dict(runs) for m, runs in tinybench.items()}
    tinybench["gemma"]["soft"] = scored_tinybench("gemma", "soft", seed=SEED + 1)  # other resamples of the items
    table = retention_table(tinybench, Titles(MODEL_TITLES, CONDITION_TITLES))
    for row in range(2, 2 + len(TASK_KEYS)):
        assert span(table, GPIRT, "Soft", row) is None
        assert span(table, GPIRT, "Base", row) is not None
        assert not math.isnan(cell(table, GPIRT, "Soft", row))  # the mean itself is still defined
    assert span(table, GPIRT, "Soft", 1) == tinybench["gemma"]["soft"]["intervals"]["mean_gpirt"]


def hand_slice_perplexities(model, condition, name, seed=SEED):
    """[replicates] of a slice's perplexity, resampling its documents as the job does (the slice's seed, n of n
    with replacement), from the per-document records."""
    rows = [r for r in documents(model, condition) if r["slice"] == name]
    nll = np.array([r["nll"] for r in rows])
    tokens = np.array([r["tokens"] for r in rows], dtype=float)
    picks = np.random.default_rng(paloma.slice_seed(seed, name)).integers(0, len(rows), size=(REPLICATES, len(rows)))
    return np.exp(nll[picks].sum(axis=1) / tokens[picks].sum(axis=1))


def test_paloma_slice_rows_take_the_interval_of_the_mean_over_models(scored):
    _, paloma_runs = scored
    paloma_runs = {m: dict(runs) for m, runs in paloma_runs.items()}
    del paloma_runs["gemma"]["hard"]
    table = paloma_slice_table(paloma_runs, Titles(MODEL_TITLES, CONDITION_TITLES))
    assert first_column(table) == ["WikiText-103", "PTB"]
    for row, name in enumerate(("wikitext_103", "ptb")):
        for condition in ("base", "soft"):
            title = CONDITION_TITLES[condition]
            for group, metric in ((PPL, "perplexity"), (BPB, "bits_per_byte")):
                want = paired_mean_interval(paloma_runs, f"slices/{name}/{metric}", condition)
                assert span(table, group, title, row) == pytest.approx(want), (name, condition, metric)
            # from the documents: the same resamples of the slice for both models, replicate by replicate
            mean = np.mean([hand_slice_perplexities(m, condition, name) for m in ("qwen", "gemma")], axis=0)
            got = span(table, PPL, title, row)
            assert got == pytest.approx([np.quantile(mean, 0.025), np.quantile(mean, 0.975)])
            assert got[0] <= cell(table, PPL, title, row) <= got[1]
        # a model without the run: no mean, no interval
        assert span(table, PPL, "Hard", row) is None and span(table, BPB, "Hard", row) is None


def test_paloma_slice_rows_of_models_bootstrapped_unpaired_have_no_interval(scored):
    _, paloma_runs = scored
    paloma_runs = {m: dict(runs) for m, runs in paloma_runs.items()}
    paloma_runs["gemma"]["base"] = scored_paloma("gemma", "base", seed=SEED + 1)
    slices = paloma_slice_table(paloma_runs, Titles(MODEL_TITLES, CONDITION_TITLES))
    for row in range(2):
        assert span(slices, PPL, "Base", row) is None and span(slices, BPB, "Base", row) is None
        assert span(slices, PPL, "Soft", row) is not None
    # the run's own cells keep its interval, however it was seeded
    models = paloma_model_table(paloma_runs, Titles(MODEL_TITLES, CONDITION_TITLES))
    assert span(models, PPL, "Base", 1) == paloma_runs["gemma"]["base"]["intervals"]["pooled/perplexity"]


# ---------------------------------------------------------------------------------------------- figures


def visible_axes(figure):
    return [ax for ax in figure.axes if ax.get_visible()]


def legend_labels(figure):
    return [text.get_text() for text in figure.legends[0].get_texts()]


def test_gpirt_per_task_figure_has_one_panel_per_task(tmp_path):
    figure = gpirt_per_task_figure(tinybench_runs(), Titles(MODEL_TITLES, CONDITION_TITLES))
    axes = visible_axes(figure)
    assert [ax.get_title() for ax in axes] == TASK_ORDER
    assert all(ax.get_yscale() == "linear" and ax.get_ylim()[1] >= 1.0 for ax in axes)
    heights = sorted(round(p.get_height(), 6) for p in axes[0].patches if p.get_fill())  # MMLU
    assert heights == sorted([0.5, 0.55, 0.56, 0.4, 0.45])
    assert legend_labels(figure) == ["Base", "Soft", "Hard", "missing"]  # gemma has no hard run
    assert [t.get_text() for t in axes[-1].get_xticklabels()] == ["Qwen3-0.6B", "Gemma-3-1B-it"]
    pdf, png = save_figure(figure, "gpirt", tmp_path)
    assert pdf.exists() and png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(("metric", "scale"), [("perplexity", "log"), ("bits_per_byte", "linear")])
def test_paloma_figure_has_one_panel_per_slice(tmp_path, metric, scale):
    figure = paloma_figure(paloma_runs(), metric, Titles(MODEL_TITLES, CONDITION_TITLES))
    axes = visible_axes(figure)
    assert [ax.get_title() for ax in axes] == ["WikiText-103", "PTB"]
    assert [ax.get_yscale() for ax in axes] == [scale, scale]  # perplexity spans 18 to 310: log
    assert legend_labels(figure) == ["Base", "Soft", "Hard"]
    if scale == "log":  # WikiText-103 spans 18 to 30, within one decade: its ticks still carry numbers
        figure.canvas.draw()
        low, high = axes[0].get_ylim()
        shown = [t.get_text() for t in axes[0].get_yticklabels() if low <= t.get_position()[1] <= high]
        assert shown == ["20", "30"]
    pdf, png = save_figure(figure, metric, tmp_path)
    assert pdf.exists() and png.read_bytes()[:4] == b"\x89PNG"


def test_paloma_figure_of_the_paper_fits_the_page_and_labels_the_bottom_panel_of_each_column():
    models = {f"model_{i}": f"Model number {i}" for i in range(12)}  # the paper's twelve, with long names
    slices = list(SLICE_TITLES)  # seven: the second column ends a row above the first
    tokens = dict.fromkeys(slices, 1000)
    runs = {
        m: {c: paloma_run(m, c, {s: 10.0 + i + j for j, s in enumerate(slices)}, tokens, tokens) for c in CONDITIONS}
        for i, m in enumerate(models)
    }
    figure = paloma_figure(runs, "perplexity", Titles(models, CONDITION_TITLES))
    axes = visible_axes(figure)
    assert [ax.get_title() for ax in axes] == list(SLICE_TITLES.values())
    figure.canvas.draw()
    labelled = [ax.get_title() for ax in axes if any(t.get_visible() and t.get_text() for t in ax.get_xticklabels())]
    assert labelled == ["RedPajama", "RefinedWeb"]  # the last panel of each column
    assert figure.get_size_inches()[0] <= 7.5  # two panels side by side on a page


def test_paloma_figure_keeps_a_narrow_perplexity_range_linear():
    narrow = {m: {c: {"ptb": 10.0 + i, "wikitext_103": 12.0} for i, c in enumerate(CONDITIONS)} for m in MODEL_TITLES}
    figure = paloma_figure(paloma_runs(narrow), "perplexity", Titles(MODEL_TITLES, CONDITION_TITLES))
    axes = visible_axes(figure)
    assert [ax.get_yscale() for ax in axes] == ["linear", "linear"] and axes[0].get_ylim()[0] == 0
    heights = sorted(round(p.get_height(), 9) for p in axes[1].patches)  # PTB
    assert heights == [10.0, 10.0, 11.0, 11.0, 12.0, 12.0]


def test_unknown_metric_is_refused():
    with pytest.raises(ValueError, match="unknown metric"):
        paloma_figure(paloma_runs(), "nll", Titles(MODEL_TITLES, CONDITION_TITLES))
