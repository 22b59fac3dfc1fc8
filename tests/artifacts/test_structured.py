import gzip
import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from matplotlib.text import Text

from calibft.artifacts.figures import W1_CLIP, save_figure
from calibft.artifacts.formats import format_kl, format_rate, format_w1
from calibft.artifacts.runs import Titles
from calibft.artifacts.structured import (
    PEAK_FACTOR,
    per_distribution_figure,
    prompt_title,
    qualitative_figure,
    sample_density,
    ssot_table,
    structured_sampling_figure,
    structured_table,
    valid_values,
)
from calibft.artifacts.tables import best_cells, to_latex, to_markdown, write_table
from calibft.data.families import family
from calibft.data.grid import prompts

CONDITIONS = ("base", "soft", "hard")
CONDITION_TITLES = {"base": "Base", "soft": "Soft", "hard": "Hard", "ssot": "SSOT"}
MODEL_TITLES = {"qwen": "Qwen3-0.6B", "gemma": "Gemma-3-1B-it", "llama": "Llama-3.2-1B-it"}

# model -> condition -> (aggregate W1, logit KL, valid rate); None = undefined
AGGREGATES = {
    "qwen": {"base": (0.462, 2.59, 0.173), "soft": (170.423, 0.52, 0.841), "hard": (0.2641, 0.47, 0.879)},
    # W1: a tie as stored; KL: 0.341 and 0.336 both print 0.34; valid rate: 100.0% printed three times
    "gemma": {"base": (None, 3.87, 1.0), "soft": (0.3, 0.341, 1.0), "hard": (0.3, 0.336, 0.99996)},
    # the only defined W1 is astronomically large; KL undefined for two conditions
    "llama": {"base": (5470.0, None, 0.565), "soft": (None, 0.61, 0.88), "hard": (None, None, 0.945)},
}


def run(split, condition, w1, kl, valid, evaluation="structured", samples=1000, undefined=()):
    """A metrics.json of one run: every family and prompt gets w1 (kl) scaled by its position, except the
    families and prompt ids in `undefined`, which are null."""
    split_prompts = prompts(split)
    families = list(dict.fromkeys(p.family for p in split_prompts))

    def value(base, i, name):
        return None if base is None or name in undefined else base * (1 + 0.1 * i)

    return {
        "evaluation": evaluation,
        "model": "m",
        "condition": condition,
        "split": split,
        "samples_per_prompt": samples,
        "aggregate": {
            "w1_norm": w1,
            "logit_kl": kl,
            "valid_rate": valid,
            "num_families": len(families),
            "undefined_families": [f for f in families if f in undefined],
        },
        "families": [
            {
                "family": f,
                "w1_norm": value(w1, i, f),
                "logit_kl": value(kl, i, f),
                "valid_rate": valid,
                "num_prompts": 3,
            }
            for i, f in enumerate(families)
        ],
        "prompts": [
            {
                "id": p.id,
                "family": p.family,
                "params": p.params,
                "samples": samples,
                "valid": round(valid * samples),
                "valid_rate": valid,
                "w1": value(w1, i, p.id),
                "w1_scale": 1.0,
                "w1_norm": value(w1, i, p.id),
                "logit_kl": value(kl, i, p.id),
            }
            for i, p in enumerate(split_prompts)
        ],
    }


def metrics_of(split, aggregates=AGGREGATES, undefined=()):
    return {
        model: {c: run(split, c, *values, undefined=undefined) for c, values in conditions.items()}
        for model, conditions in aggregates.items()
    }


def hatched(figure):
    return [p for ax in figure.axes for p in ax.patches if p.get_hatch()]


def visible_axes(figure):
    return [ax for ax in figure.axes if ax.get_visible()]


# ---------------------------------------------------------------------------------------------- tables


def test_formats_follow_the_paper():
    assert [format_w1(v) for v in (0.2641, 0.462, 170.423, 0.13, 96.96634, 5470.0, 4.21e223)] == [
        "0.2641",
        "0.462",
        "170.423",
        "0.13",
        "96.9663",
        "5.47e+03",
        "4.21e+223",
    ]
    assert format_w1(2e-6) == "2.00e-06"  # not "0"
    assert [format_kl(v) for v in (2.594, 0.3, 5.0, 0.336)] == ["2.59", "0.3", "5", "0.34"]
    assert [format_rate(v) for v in (0.879, 1.0, 0.173)] == ["87.9%", "100.0%", "17.3%"]


def test_best_cells_compare_values_as_printed():
    values = pd.DataFrame({"a": [0.341, 1.0, np.nan], "b": [0.336, 2.0, np.nan], "c": [0.5, np.nan, np.nan]})
    lowest = best_cells(values, format_kl, lowest=True)
    assert lowest.to_numpy().tolist() == [[True, True, False], [True, False, False], [False, False, False]]
    highest = best_cells(values, format_kl, lowest=False)
    assert highest.to_numpy().tolist() == [[False, False, True], [False, True, False], [False, False, False]]


def test_structured_table_rows_columns_and_bold():
    table = structured_table(metrics_of("ood"), "ood", Titles(MODEL_TITLES, CONDITION_TITLES))
    assert table.label == "tab:main-ood" and table.name == "main_ood"
    frame = table.frame
    assert frame[("", "Model")].tolist() == ["Qwen3-0.6B", "Gemma-3-1B-it", "Llama-3.2-1B-it"]
    groups = list(dict.fromkeys(top for top, _ in frame.columns))
    assert groups == ["", "OOD W₁ ↓", "Logit KL ↓", "Valid rate ↑"]
    assert [sub for top, sub in frame.columns if top == "Logit KL ↓"] == ["Base", "Soft", "Hard"]
    assert frame[("OOD W₁ ↓", "Soft")].iloc[0] == 170.423 and math.isnan(frame[("OOD W₁ ↓", "Base")].iloc[1])

    bold = table.bold
    w1 = bold.xs("OOD W₁ ↓", axis=1, level=0).to_numpy().tolist()
    kl = bold.xs("Logit KL ↓", axis=1, level=0).to_numpy().tolist()
    valid = bold.xs("Valid rate ↑", axis=1, level=0).to_numpy().tolist()
    assert w1 == [[False, False, True], [False, True, True], [True, False, False]]
    assert kl == [[False, False, True], [False, True, True], [False, True, False]]
    assert valid == [[False, False, True], [True, True, True], [False, False, True]]
    assert not bold[("", "Model")].any()

    md = to_markdown(table).splitlines()
    assert md[2] == (
        "| Qwen3-0.6B | 0.462 | 170.423 | **0.2641** | 2.59 | 0.52 | **0.47** | 17.3% | 84.1% | **87.9%** |"
    )
    tied = "**100.0%** | **100.0%** | **100.0%**"
    assert md[3] == f"| Gemma-3-1B-it | --- | **0.3** | **0.3** | 3.87 | **0.34** | **0.34** | {tied} |"
    assert md[4] == "| Llama-3.2-1B-it | **5.47e+03** | --- | --- | --- | **0.61** | --- | 56.5% | 88.0% | **94.5%** |"

    tex = to_latex(table)
    assert r"\label{tab:main-ood}" in tex and r"\begin{table*}" in tex
    assert r"\textbf{\ensuremath{5.47 \times 10^{3}}}" in tex and r"\textbf{87.9\%}" in tex
    assert r"\multicolumn{3}{c}{OOD W\ensuremath{_1} \ensuremath{\downarrow}}" in tex
    assert "18 held-out configurations from six OOD families" in table.caption


def test_structured_table_unseen_and_write(tmp_path):
    table = structured_table(metrics_of("unseen"), "unseen", Titles(MODEL_TITLES, CONDITION_TITLES))
    assert table.label == "tab:main-unseen"
    assert ("Unseen-Param W₁ ↓", "Hard") in table.frame.columns
    paths = write_table(table, tmp_path)
    assert sorted(p.name for p in paths) == ["main_unseen.csv", "main_unseen.md", "main_unseen.tex"]
    csv = pd.read_csv(paths[1])
    assert csv.columns[0] == "Model" and "Valid rate ↑ / Soft" in csv.columns
    assert csv["Unseen-Param W₁ ↓ / Base"].isna().tolist() == [False, True, False]


def test_structured_table_conditions_and_missing_runs():
    metrics = metrics_of("ood")
    del metrics["llama"]["hard"]  # not run: "---", like an undefined value
    table = structured_table(metrics, "ood", Titles(MODEL_TITLES, CONDITION_TITLES, ("hard", "base")))
    assert [sub for top, sub in table.frame.columns if top == "Valid rate ↑"] == ["Hard", "Base"]
    assert math.isnan(table.frame[("Valid rate ↑", "Hard")].iloc[2])
    assert table.bold[("Valid rate ↑", "Base")].iloc[2]


def test_tables_refuse_runs_of_another_split_or_evaluation():
    with pytest.raises(ValueError, match="split 'unseen'"):
        structured_table(metrics_of("ood"), "unseen", Titles(MODEL_TITLES, CONDITION_TITLES))
    with pytest.raises(ValueError, match="unknown split"):
        structured_table(metrics_of("ood"), "train", Titles(MODEL_TITLES, CONDITION_TITLES))
    structured = {"qwen": run("ood", "ssot", 0.3, 0.1, 0.5)}  # a structured run passed as the SSOT one
    with pytest.raises(ValueError, match="'ssot' evaluation"):
        ssot_table(metrics_of("ood"), structured, "ood", Titles(MODEL_TITLES, CONDITION_TITLES))


def test_ssot_table(tmp_path):
    ssot = {
        "qwen": run("ood", "ssot", 2.05e30, None, 0.375, evaluation="ssot", samples=250),
        "gemma": run("ood", "ssot", None, None, 0.043, evaluation="ssot", samples=250),
    }  # llama has no SSOT run
    table = ssot_table(metrics_of("ood"), ssot, "ood", Titles(MODEL_TITLES, CONDITION_TITLES))
    assert table.label == "tab:ssot-structured-ood" and table.name == "ssot_structured_ood"
    assert list(table.frame.columns) == [
        ("", "Model"),
        ("OOD W₁ ↓", "Base"),
        ("OOD W₁ ↓", "Soft"),
        ("OOD W₁ ↓", "SSOT"),
        ("Valid rate ↑", "Base"),
        ("Valid rate ↑", "Soft"),
        ("Valid rate ↑", "SSOT"),
    ]
    assert not table.bold.to_numpy().any()  # the paper does not bold this table
    md = to_markdown(table).splitlines()
    assert md[2] == "| Qwen3-0.6B | 0.462 | 170.423 | 2.05e+30 | 17.3% | 84.1% | 37.5% |"
    assert md[3] == "| Gemma-3-1B-it | --- | 0.3 | --- | 100.0% | 100.0% | 4.3% |"
    assert md[4] == "| Llama-3.2-1B-it | 5.47e+03 | --- | --- | 56.5% | 88.0% | --- |"
    assert "SSOT uses 250 generations per prompt" in table.caption
    unseen = {m: run("unseen", "ssot", 0.3, None, 0.9, evaluation="ssot", samples=250) for m in MODEL_TITLES}
    table = ssot_table(metrics_of("unseen"), unseen, "unseen", Titles(MODEL_TITLES, CONDITION_TITLES))
    assert table.label == "tab:ssot-structured-unseen"
    assert write_table(table, tmp_path)[0].name == "ssot_structured_unseen.tex"


# ---------------------------------------------------------------------------------------------- bar charts


def test_structured_sampling_figure(tmp_path):
    by_split = {"unseen": metrics_of("unseen"), "ood": metrics_of("ood")}
    figure = structured_sampling_figure(by_split, Titles(MODEL_TITLES, CONDITION_TITLES))
    left, right = visible_axes(figure)
    assert (left.get_title(), right.get_title()) == ("Held-out families (OOD)", "Unseen parameters")
    assert [t.get_text() for t in left.get_xticklabels()] == list(MODEL_TITLES.values())
    assert len(hatched(figure)) == 2 * 3  # gemma base, llama soft and hard, in both panels
    assert left.get_yscale() == "log"
    bottom, top = left.get_ylim()
    assert bottom <= 0.2641 / 2 and top < 1e4  # 5470 and 170.423 are clipped, not drawn to scale
    assert max(p.get_y() + p.get_height() for p in left.patches) <= W1_CLIP
    printed = sorted(t.get_text() for t in left.texts)
    assert printed == ["170", "5470"]
    legend = [t.get_text() for t in figure.legends[0].get_texts()]
    assert legend[:3] == ["Base", "Soft", "Hard"] and "undefined (no finite value)" in legend
    pdf, png = save_figure(figure, "main_structured_sampling", tmp_path)
    assert png.read_bytes()[:4] == b"\x89PNG" and pdf.exists()
    fonts = re.findall(rb"/Subtype /(Type3|TrueType|CIDFontType2)", pdf.read_bytes())
    assert fonts and b"Type3" not in fonts  # TrueType (Type 42) fonts, which conference checks accept


def test_structured_sampling_figure_without_clipping():
    aggregates = {"qwen": {c: (0.1 * (i + 1), 1.0, 1.0) for i, c in enumerate(CONDITIONS)}}
    figure = structured_sampling_figure({"ood": metrics_of("ood", aggregates)}, Titles(MODEL_TITLES, CONDITION_TITLES))
    (ax,) = visible_axes(figure)
    assert not hatched(figure) and not ax.texts
    heights = sorted(p.get_y() + p.get_height() for p in ax.patches)
    np.testing.assert_allclose(heights, [0.1, 0.2, 0.3])
    assert len(figure.legends[0].get_texts()) == 3  # the three conditions: no hatching, no clipping entry
    figure.canvas.draw()  # within one decade the log axis is labelled plainly at 1, 2, 3 and 5 of it
    assert {"0.1", "0.2", "0.3"} <= {t.get_text() for t in ax.get_yticklabels()}


def test_per_distribution_figure_ood(tmp_path):
    metrics = metrics_of("ood", undefined={"poisson"})
    figure = per_distribution_figure(metrics, "ood", "w1_norm", Titles(MODEL_TITLES, CONDITION_TITLES))
    axes = visible_axes(figure)
    assert [ax.get_title() for ax in axes] == ["Bernoulli", "Poisson", "Weibull", "Maxwell", "Chi", "TruncNorm"]
    assert axes[0].get_ylabel() == "family-mean normalized W₁"
    # defined aggregate cells: 6; Poisson undefined everywhere: 9 more; each other family: the 3 undefined
    per_axis = [sum(bool(p.get_hatch()) for p in ax.patches) for ax in axes]
    assert per_axis == [3, 9, 3, 3, 3, 3]
    assert all(ax.get_ylim()[1] < W1_CLIP * 10 for ax in axes)
    save_figure(figure, "ood_w1", tmp_path)

    kl = per_distribution_figure(metrics, "ood", "logit_kl", Titles(MODEL_TITLES, CONDITION_TITLES))
    assert [sum(bool(p.get_hatch()) for p in ax.patches) for ax in visible_axes(kl)] == [2, 9, 2, 2, 2, 2]
    assert not any(ax.texts for ax in kl.axes)  # KL is never clipped


def test_per_distribution_figure_unseen_has_one_panel_per_configuration():
    unseen = prompts("unseen")
    metrics = metrics_of("unseen", undefined={unseen[3].id})
    figure = per_distribution_figure(metrics, "unseen", "w1_norm", Titles(MODEL_TITLES, CONDITION_TITLES))
    axes = visible_axes(figure)
    assert len(axes) == 24
    assert axes[0].get_title() == "Uniform (a=3.5, b=10.5)" and axes[1].get_title() == "Gaussian (μ=3.5, σ=3)"
    assert sum(bool(p.get_hatch()) for p in axes[3].patches) == 9
    labelled = [ax for ax in axes if any(t.get_text() for t in ax.get_xticklabels())]
    assert labelled == axes[-4:] or labelled == axes[-3:]  # model names under the bottom row only


def test_per_distribution_figure_with_one_model_and_twelve(tmp_path):
    one = {"qwen": metrics_of("ood")["qwen"]}
    figure = per_distribution_figure(one, "ood", "w1_norm", Titles(MODEL_TITLES, CONDITION_TITLES))
    assert len(visible_axes(figure)) == 6 and len(visible_axes(figure)[0].patches) == 3
    many = {f"m{i}": metrics_of("ood")["qwen"] for i in range(12)}
    titles = {f"m{i}": f"Model-{i}-with-a-long-name" for i in range(12)}
    figure = per_distribution_figure(many, "ood", "w1_norm", Titles(titles, CONDITION_TITLES))
    assert len(visible_axes(figure)[0].patches) == 36
    save_figure(figure, "many", tmp_path)
    with pytest.raises(ValueError, match="unknown key"):
        per_distribution_figure(one, "ood", "w1", Titles(MODEL_TITLES, CONDITION_TITLES))


# ---------------------------------------------------------------------------------------------- qualitative


def test_valid_values_round_trip(tmp_path):
    records = [
        {"id": "poisson-001", "index": 0, "text": "3", "value": 3.0, "valid": True},
        {"id": "poisson-001", "index": 1, "text": "x", "value": None, "valid": False},
        {"id": "poisson-001", "index": 2, "text": "-1", "value": -1.0, "valid": False},
        {"id": "poisson-001", "index": 3, "text": "5", "value": 5.0, "valid": True},
        {"id": "chi-000", "index": 0, "text": "?", "value": None, "valid": False},
        {"id": "chi-001", "index": 0, "text": "1e300", "value": 1e300, "valid": True},
    ]
    path = tmp_path / "samples.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    values = valid_values(path)
    assert list(values) == ["poisson-001", "chi-000", "chi-001"]
    np.testing.assert_array_equal(values["poisson-001"], [3.0, 5.0])
    assert values["chi-000"].size == 0 and values["chi-000"].dtype == float
    assert values["chi-001"].tolist() == [1e300]


def test_sample_density_is_normalized_by_all_values():
    edges = np.array([0.0, 1.0, 2.0, 4.0])
    density, outside = sample_density(np.array([0.5, 1.5, 3.0, 3.5, 10.0, np.inf, np.nan, -1.0]), edges)
    np.testing.assert_allclose(density, [1 / 8, 1 / 8, 2 / 16])
    assert outside == 4
    assert sample_density(np.array([]), edges)[1] == 0


def _prompt(split, family_id, k=0):
    return [p for p in prompts(split) if p.family == family_id][k]


def test_qualitative_figure_matches_the_target_and_clips_extremes(tmp_path):
    rng = np.random.default_rng(0)
    maxwell, poisson, truncnorm = (
        _prompt("ood", "maxwell", 1),
        _prompt("ood", "poisson", 1),
        _prompt("ood", "truncnorm"),
    )
    true = {
        p.id: family(p.family).law(p.params).rvs(size=4000, random_state=rng) for p in (maxwell, poisson, truncnorm)
    }
    extreme = np.concatenate([true[maxwell.id][:1000], [4.2e223, 1e9, -5e6, np.inf]])
    panels = [
        ("Model A", maxwell, {"base": extreme, "soft": true[maxwell.id]}),
        ("Model B", poisson, {"base": np.full(500, 4.0), "soft": true[poisson.id]}),
        ("", truncnorm, {"base": np.array([]), "soft": true[truncnorm.id]}),
    ]
    figure = qualitative_figure(panels, Titles({}, CONDITION_TITLES), title="GPT-OSS-20B")
    axes = visible_axes(figure)
    assert len(axes) == 3 and figure.get_suptitle() == "GPT-OSS-20B"
    assert axes[0].get_title() == f"Model A\n{prompt_title(maxwell)}" and axes[2].get_title() == prompt_title(truncnorm)

    # continuous: the x-range stays around the target despite 4.2e223, and the histogram is a density
    law = family("maxwell").law(maxwell.params)
    lo, hi = law.ppf([0.005, 0.995])
    start, stop = axes[0].get_xlim()
    assert lo - (hi - lo) <= start <= lo and hi <= stop <= hi + (hi - lo) + 0.1
    areas = [np.sum(p.get_data().values * np.diff(p.get_data().edges)) for p in axes[0].patches]
    assert areas and all(0.95 < a <= 1.0 for a in areas)
    notes = [t.get_text() for t in axes[0].texts]
    assert any(n.startswith("Base: ") and "outside" in n and "of 1004" in n for n in notes)

    # integer: bars at the target's pmf; the all-at-4 spike is cut at PEAK_FACTOR × the peak and noted
    pmf = family("poisson").law(poisson.params).pmf(np.arange(0, 30))
    soft = [p for p in axes[1].patches if p.get_facecolor()[:3] == pytest.approx((0.1216, 0.4667, 0.7059), abs=1e-3)]
    heights = np.array([p.get_height() for p in soft])
    centres = np.array([p.get_x() + p.get_width() / 2 for p in soft])
    np.testing.assert_allclose(heights, pmf[np.round(centres).astype(int)], atol=0.03)
    assert axes[1].get_ylim()[1] <= 1.25 * PEAK_FACTOR * pmf.max() + 1e-9
    assert any("100% in one bin" in t.get_text() for t in axes[1].texts)
    assert all(float(tick).is_integer() for tick in axes[1].get_xticks())  # an integer family: integer ticks
    assert any(t.get_text() == "Base: no valid sample" for t in axes[2].texts if isinstance(t, Text))
    assert [t.get_text() for t in figure.legends[0].get_texts()] == ["Target", "Base", "Soft"]
    save_figure(figure, "appendix_ssot_qualitative", tmp_path)


def test_qualitative_figure_needs_panels():
    with pytest.raises(ValueError, match="no panels"):
        qualitative_figure([], Titles({}, CONDITION_TITLES))
