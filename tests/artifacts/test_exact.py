"""The exact evaluation's table and figure, from hand-made metrics.json dicts."""

import matplotlib.pyplot as plt
import numpy as np
import pytest

from calibft.artifacts.exact import exact_figure, exact_table, within_counts
from calibft.artifacts.runs import Titles
from calibft.artifacts.tables import to_markdown

CONDITION_TITLES = {"base": "Base", "soft": "Soft", "hard": "Hard"}
MODEL_TITLES = {"qwen": "Qwen3-0.6B", "gemma": "Gemma-3-1B-it"}


def _prompt(exact: float | None, on_space: float | None, spread, sampled: float | None, within) -> dict:
    return {
        "w1_norm": exact,
        "on_space": {"w1_norm": on_space, "spread": spread, "within": within},
        "sampled": {"w1_norm": sampled, "spread": spread},
    }


def _run(split: str, w1, kl_space, kl_sequences, mass, prompts=(), within=(0, 0)) -> dict:
    return {
        "evaluation": "exact",
        "split": split,
        "aggregate": {
            "w1_norm": w1, "kl_on_space": kl_space, "kl_sequences": kl_sequences, "mass": mass,
            "within_spread": {"prompts": within[1], "within": within[0]},
        },
        "prompts": list(prompts),
    }  # fmt: skip


def _metrics(split: str) -> dict:
    points = [_prompt(0.2, 0.25, [0.1, 0.3], 0.4, True), _prompt(0.5, 2.0, [0.3, 0.8], 500.0, False)]
    return {
        "qwen": {
            "base": _run(split, 0.41, 3.2, 6.1, 0.25, points, within=(1, 2)),
            "soft": _run(split, 0.12, 0.5, 1.0, 0.6, points[:1], within=(1, 1)),
            "hard": _run(split, 0.2, 0.7, 0.9, 0.7),
        },
        "gemma": {
            "base": _run(split, None, 2.0, 4.0, 0.1),
            "soft": _run(split, 0.3, 1.0, 2.0, 0.5),
        },
    }


def test_the_table_shows_every_metric_per_condition_with_the_best_in_bold():
    table = exact_table(_metrics("ood"), "ood", Titles(MODEL_TITLES, CONDITION_TITLES))
    assert table.label == "tab:exact-structured-ood"
    text = to_markdown(table)
    assert "Exact OOD W₁ ↓ / Soft" in text and "Mass on space ↑ / Hard" in text
    qwen = table.frame.iloc[0]
    assert qwen[("Exact OOD W₁ ↓", "Soft")] == 0.12 and qwen[("KL sequences ↓", "Hard")] == 0.9
    assert table.bold.iloc[0][("Exact OOD W₁ ↓", "Soft")] and table.bold.iloc[0][("Mass on space ↑", "Hard")]
    assert table.bold.iloc[0][("KL sequences ↓", "Hard")] and not table.bold.iloc[0][("KL sequences ↓", "Soft")]
    gemma = table.frame.iloc[1]
    assert np.isnan(gemma[("Exact OOD W₁ ↓", "Base")]) and np.isnan(gemma[("Exact OOD W₁ ↓", "Hard")])
    assert "---" in text


def test_a_cell_whose_certified_bounds_are_wider_than_its_precision_shows_them():
    metrics = _metrics("unseen")
    qwen = metrics["qwen"]
    qwen["base"]["aggregate"]["bounds"] = {"w1_norm": [0.40812, 0.41247], "mass": [0.25, None]}
    qwen["soft"]["aggregate"]["bounds"] = {"w1_norm": [0.119996, 0.120004], "mass": [0.6, 0.6]}
    table = exact_table(metrics, "unseen", Titles(MODEL_TITLES, CONDITION_TITLES))
    row = to_markdown(table).splitlines()[2]
    assert "| 0.41 [0.4081, 0.4125] |" in row  # bounds wider than the printed four decimals
    assert "| 0.25 [0.25, ∞] |" in row  # an upper bound left open
    assert "| **0.12** |" in row and "| 0.6 |" in row  # bounds within the printed precision: the value alone
    assert table.frame.iloc[0][("Exact Unseen-Param W₁ ↓", "Base")] == 0.41


def test_a_run_of_another_split_is_refused():
    with pytest.raises(ValueError, match="expected a 'exact' evaluation of split 'unseen'"):
        exact_table(_metrics("ood"), "unseen", Titles(MODEL_TITLES, CONDITION_TITLES))


def test_the_figure_has_a_panel_per_split_and_condition_counting_prompts_within():
    figure = exact_figure(
        {"ood": _metrics("ood"), "unseen": _metrics("unseen")}, Titles(MODEL_TITLES, CONDITION_TITLES)
    )
    axes = figure.axes
    assert len(axes) == 6
    titles = [ax.get_title() for ax in axes]
    assert titles[0] == "Base · Held-out families (OOD)\n1/2 within"
    assert titles[1] == "Soft · Held-out families (OOD)\n1/1 within"
    assert titles[2].endswith("none on the space")
    # base, ood: the 500 of every valid answer is beyond the axes, drawn at the upper limit
    low, high = axes[0].get_ylim()
    assert high < 500 and low > 0
    plt.close(figure)


def test_within_counts_add_over_models():
    runs = {"a": _run("ood", 0.1, 1, 1, 1, within=(3, 4)), "b": _run("ood", 0.1, 1, 1, 1, within=(5, 5))}
    assert within_counts(runs) == (8, 9)
