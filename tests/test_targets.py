"""The files that the workflow's targets ask for (calibft.pipeline.targets), of the paper's config: as many as the
dry run of the paper plans jobs of each kind (tests/workflow/test_plans.py), each once."""

from __future__ import annotations

import json

from calibft.artifacts.registry import artifact, planned
from calibft.data.grid import SPLITS
from calibft.pipeline.layout import Layout
from calibft.pipeline.targets import (
    adapter_outputs,
    artifact_files,
    data_outputs,
    eval_outputs,
    plans_qualitative_tables,
    qualitative_tables,
    reproduction_files,
    seed_eval_outputs,
    structured_outputs,
)
from tests.test_jobs import load

PAPER = Layout(load("config.yaml"), "/repo")
TWO_SEEDS = Layout({**PAPER.config, "seeds": [11, 12]}, "/repo")


def test_the_data_layer_is_every_prompt_file_output_space_and_trie():
    files = data_outputs(PAPER)
    assert len(files) == len(set(files)) == 3 + 11 + 28  # prompts, output spaces, tries
    assert files[:3] == [f"results/prompts/{split}.jsonl" for split in SPLITS]
    assert "results/output_spaces/eval/train.npz" in files and "results/tries/qwen3/soft/train.npz" in files


def test_adapters_are_every_training_run_of_every_seed():
    assert len(adapter_outputs(PAPER)) == 58
    main = adapter_outputs(PAPER, PAPER.main_runs)
    assert len(main) == 24 and main[0] == "results/adapters/qwen3_0p6b/soft/run.json"
    two = adapter_outputs(TWO_SEEDS, TWO_SEEDS.main_runs)
    assert two[:1] + two[24:25] == [
        "results/seeds/11/adapters/qwen3_0p6b/soft/run.json",
        "results/seeds/12/adapters/qwen3_0p6b/soft/run.json",
    ]


def test_evaluations_are_every_evaluation_job_once():
    files = eval_outputs(PAPER)
    # structured 140, exact 72, SSOT 24, NoveltyBench 72, open-ended, MCQ, TinyBenchmarks and PALOMA 36 each
    assert len(files) == len(set(files)) == 140 + 72 + 24 + 72 + 4 * 36
    assert "results/eval/qwen3_0p6b/base/noveltybench/curated/summary.json" in files
    assert "results/eval/qwen3_0p6b/base/ssot/ood/metrics.json" in files
    # an ablation recipe that is also a final one is evaluated once
    assert sum(path.endswith("/soft/structured/ood/metrics.json") for path in files) == len(PAPER.config["models"])
    two = eval_outputs(TWO_SEEDS)
    assert two == seed_eval_outputs(TWO_SEEDS.seeded(11)) + seed_eval_outputs(TWO_SEEDS.seeded(12))
    assert len(two) == 2 * len(files) and two[0].startswith("results/seeds/11/eval/")


def test_the_structured_target_is_a_part_of_the_paper():
    files = structured_outputs(PAPER)
    assert set(files) <= set(adapter_outputs(PAPER) + eval_outputs(PAPER) + artifact_files(PAPER))
    assert set(adapter_outputs(PAPER, PAPER.main_runs)) <= set(files)
    assert set(artifact_files(PAPER, structured_only=True)) < set(artifact_files(PAPER))
    assert "results/eval/qwen3_0p6b/hard/structured/unseen/metrics.json" in files
    assert not any("/mcq/" in path or "/exact/" in path for path in files)


def test_tables_and_figures_go_under_the_protocols_root():
    files = artifact_files(Layout(load("config.yaml", preset="as_written"), "/repo"))
    assert files and all(path.startswith("results/protocols/as_written/") for path in files)
    assert len(files) == sum(len(row.files()) for row in planned(PAPER.config["evaluation"]["structured"]["splits"]))


def test_the_reproduction_report_is_each_compared_table_its_summary_and_the_compute_report():
    assert reproduction_files(PAPER, [artifact("main_ood")]) == [
        "results/reproduction/main_ood.csv",
        "results/reproduction/reproduction.csv",
        "results/reproduction/compute.csv",
    ]


def test_the_qualitative_tables_are_named_after_the_chosen_cases(tmp_path):
    assert plans_qualitative_tables(PAPER)
    without_curated = json.loads(json.dumps(PAPER.config))
    without_curated["evaluation"]["noveltybench"]["splits"] = ["wildchat"]
    assert not plans_qualitative_tables(Layout(without_curated, "/repo"))
    base_only = json.loads(json.dumps(PAPER.config))
    base_only["evaluation"]["conditions"] = ["base", "soft"]
    assert not plans_qualitative_tables(Layout(base_only, "/repo"))
    cases = tmp_path / "cases.json"
    names = [
        "noveltybench_qualitative_soft_a",
        "noveltybench_qualitative_base_b",
    ]  # as transfer.case_records names them
    cases.write_text(json.dumps([{"name": name, "label": name[-1]} for name in names]))
    files = qualitative_tables(PAPER, cases)
    assert files == [f"results/{path}" for name in names for path in artifact(name).files(name)]
    assert files[0] == "results/tables/noveltybench_qualitative_soft_a.tex"
