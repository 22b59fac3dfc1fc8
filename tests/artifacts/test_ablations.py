"""The ablation tables of appendix C: rows, bold best per model and split, the shaded final recipe."""

from __future__ import annotations

import math

import pytest

from calibft.artifacts.ablations import ablation_table, recipe_columns
from calibft.artifacts.tables import to_latex


def _run(split: str, w1: float | None) -> dict:
    return {"evaluation": "structured", "split": split, "aggregate": {"w1_norm": w1}}


W1 = {  # model -> recipe -> (ood, unseen)
    "qwen": {"soft_d2": (0.12, 0.09), "soft": (0.08, 0.07), "soft_d3": (0.10, 0.05)},
    "gemma": {"soft_d2": (0.11, None), "soft": (0.13, 0.15), "soft_d3": (0.11, 0.16)},
}
SETTINGS = {
    "soft_d2": {"d": 2, "max bins": 1001},
    "soft": {"d": 5, "max bins": 1001},
    "soft_d3": {"d": 3, "max bins": 4096},
}


def _metrics() -> dict:
    return {
        split: {m: {r: _run(split, w[i]) for r, w in runs.items()} for m, runs in W1.items()}
        for i, split in enumerate(("ood", "unseen"))
    }


def _table():
    return ablation_table(
        _metrics(),
        ["soft_d2", "soft_d3", "soft"],
        SETTINGS,
        "soft",
        "soft",
        {"qwen": "Qwen3-14B", "gemma": "Gemma-3-12B-it"},
        {"decimals": 5, "max_bins": 16384},
    )


def test_rows_follow_models_then_recipes_with_their_settings_and_w1():
    frame = _table().frame
    assert list(frame.columns) == ["Model", "d", "max bins", "OOD W₁ ↓", "Unseen W₁ ↓"]
    assert list(frame["Model"]) == ["Qwen3-14B"] * 3 + ["Gemma-3-12B-it"] * 3
    assert list(frame["d"]) == [2, 3, 5, 2, 3, 5]
    assert list(frame["OOD W₁ ↓"]) == [0.12, 0.10, 0.08, 0.11, 0.11, 0.13]
    assert math.isnan(frame["Unseen W₁ ↓"][3])  # undefined stays undefined


def test_bold_marks_the_best_of_each_model_and_split_ties_included_and_the_final_row_is_shaded():
    table = _table()
    bold = table.bold
    assert list(bold["OOD W₁ ↓"]) == [False, False, True, True, True, False]  # gemma ties at 0.11
    assert list(bold["Unseen W₁ ↓"]) == [False, True, False, False, False, True]
    assert not bold[["Model", "d", "max bins"]].to_numpy().any()
    assert list(table.shaded) == [False, False, True, False, False, True]
    tex = to_latex(table)
    assert "\\label{tab:grid-ablation}" in tex and "d=5 and max bins=16384" in tex
    assert "---" in tex  # gemma's undefined unseen W1


def test_hard_rows_show_the_sampling_budget_and_any_step_cap():
    columns = recipe_columns({"samples_per_prompt": 8, "epochs": 4}, {"decimals": 3, "max_bins": 1001}, "hard")
    assert columns == {"d": 3, "max bins": 1001, "spp": 8, "epochs": 4, "total draws": 32}
    assert recipe_columns({}, {"decimals": 2, "max_bins": 4096}, "soft") == {"d": 2, "max bins": 4096}
    capped = recipe_columns(
        {"samples_per_prompt": 16, "epochs": 2, "max_steps": 400}, {"decimals": 5, "max_bins": 9}, "hard"
    )
    assert capped["max steps"] == 400 and capped["total draws"] == 32


def test_a_setting_that_only_some_recipes_have_is_blank_elsewhere():
    settings = {**SETTINGS, "soft_d3": {**SETTINGS["soft_d3"], "max steps": 400}}
    table = ablation_table(
        _metrics(), ["soft_d2", "soft_d3", "soft"], settings, "soft", "soft", {}, {"decimals": 5, "max_bins": 16384}
    )
    assert list(table.frame.columns) == ["Model", "d", "max bins", "max steps", "OOD W₁ ↓", "Unseen W₁ ↓"]
    steps = table.frame["max steps"].tolist()[:3]
    assert math.isnan(steps[0]) and steps[1] == 400 and math.isnan(steps[2])
    assert not table.bold["max steps"].any()
    assert "qwen & 2 & 1001 & --- & " in to_latex(table)


def test_a_run_of_the_wrong_split_is_refused():
    metrics = _metrics()
    metrics["ood"]["qwen"]["soft"] = _run("unseen", 0.08)
    with pytest.raises(ValueError, match="expected a 'structured' evaluation of split 'ood'"):
        ablation_table(
            metrics, ["soft_d2", "soft_d3", "soft"], SETTINGS, "soft", "soft", {}, {"decimals": 5, "max_bins": 1}
        )
