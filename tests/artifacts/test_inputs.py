"""What each table and figure reads of the paper's config (calibft.pipeline.artifact_inputs)."""

from pathlib import Path

import pytest
from snakemake.utils import validate

from calibft.artifacts.registry import planned, where
from calibft.pipeline.artifact_inputs import (
    artifact_inputs,
    artifact_seeds,
    artifact_settings,
    qualitative_panels,
    seed_inputs,
)
from calibft.pipeline.config import read_config
from calibft.pipeline.layout import Layout

REPO = Path(__file__).resolve().parents[2]


def layout_of(path: str) -> Layout:
    config = read_config(REPO / path)
    validate(config, str(REPO / "schemas" / "config.schema.yaml"))
    return Layout(config, str(REPO))


PAPER = layout_of("config.yaml")


@pytest.mark.parametrize("row", planned(["unseen", "ood"]), ids=lambda row: row.name)
def test_every_row_gets_each_result_set_it_reads(row):
    inputs = artifact_inputs(PAPER, row.name)
    assert list(inputs) == list(row.reads)
    for read, files in inputs.items():
        assert bool(files) == (read != "config"), read  # only the config tables read no file
        assert all(isinstance(path, str) for path in files)
    settings = artifact_settings(PAPER, row.name)
    assert settings["name"] == row.name and settings["split"] == row.split
    assert settings["runs"][:3] == [["qwen3_0p6b", "base"], ["qwen3_0p6b", "soft"], ["qwen3_0p6b", "hard"]]


def test_the_ssot_figure_compares_base_ssot_and_soft_on_one_model():
    (row,) = where(panels="ssot")
    prompts = [panel["prompt"] for panel in PAPER.config["evaluation"]["structured"]["qualitative"]]
    assert qualitative_panels(PAPER, "ssot") == [
        ["gpt_oss_20b", cond, prompt] for prompt in prompts for cond in ("base", "ssot", "soft")
    ]
    files = artifact_inputs(PAPER, row.name)["samples"]
    assert files[:3] == [
        "results/eval/gpt_oss_20b/base/structured/ood/samples.jsonl.gz",
        "results/eval/gpt_oss_20b/base/ssot/ood/samples.jsonl.gz",  # the baseline runs on the base model
        "results/eval/gpt_oss_20b/soft/structured/ood/samples.jsonl.gz",
    ]


def test_the_decimals_figure_names_each_recipe_by_its_space():
    (row,) = where(panels="decimals")
    settings = artifact_settings(PAPER, row.name)
    assert settings["condition_titles"] == {
        "soft_d2_b1001": "d = 2, 1001 bins",
        "soft_d3_b1001": "d = 3, 1001 bins",
        "soft": "d = 5, 1001 bins",
    }
    assert settings["panels"][:3] == [["qwen3_14b", recipe, "poisson-001"] for recipe in settings["condition_titles"]]


@pytest.mark.parametrize("objective", ["soft", "hard"])
def test_an_ablation_table_reads_its_recipes_of_the_ablation_models(objective):
    (row,) = where(objective=objective)
    settings = artifact_settings(PAPER, row.name)["ablation"]
    assert settings["final"] == objective and settings["models"] == ["qwen3_14b", "gemma3_12b_it"]
    recipes = PAPER.config["ablations"][objective]
    files = artifact_inputs(PAPER, row.name)["ablation"]
    assert len(files) == 2 * 2 * len(recipes)  # splits x models x recipes
    assert files[0] == f"results/eval/qwen3_14b/{recipes[0]}/structured/unseen/metrics.json"


TWO_SEEDS = Layout({**PAPER.config, "seeds": [11, 12]}, str(REPO))


def test_with_two_seeds_a_results_table_reads_each_seeds_runs_under_its_own_name():
    assert artifact_seeds(TWO_SEEDS, "main_ood") == [11, 12]
    inputs = artifact_inputs(TWO_SEEDS, "main_ood")
    assert list(inputs) == ["structured_seed11", "structured_seed12"]
    assert inputs["structured_seed12"][0] == "results/seeds/12/eval/qwen3_0p6b/base/structured/ood/metrics.json"
    per_seed = seed_inputs(inputs, "main_ood", [11, 12])
    assert [list(files) for files in per_seed] == [["structured"], ["structured"]]
    assert per_seed[0]["structured"] == [path.replace("/12/", "/11/") for path in per_seed[1]["structured"]]
    assert artifact_settings(TWO_SEEDS, "main_ood")["seeds"] == [11, 12]


@pytest.mark.parametrize("name", ["shared_hyperparams", "main_structured_sampling", "training_curves"])
def test_with_two_seeds_a_config_table_and_the_figures_read_one_seed(name):
    seeds = artifact_seeds(TWO_SEEDS, name)
    assert seeds == [11] and artifact_settings(TWO_SEEDS, name)["seeds"] == seeds
    assert list(artifact_inputs(TWO_SEEDS, name)) == list(where(name=name)[0].reads)
