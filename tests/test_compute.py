"""The compute report (calibft.artifacts.compute) on job timings written as Snakemake writes them."""

import math

import pytest

from calibft.artifacts.compute import compute_table, stage_costs
from calibft.artifacts.reference import ReferenceCell

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def timing(path, seconds):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + f"{seconds}\t0:00:00\t1\t1\t1\t1\t0\t0\t0\t0\n")


def test_stages_sum_the_timed_jobs_of_the_final_runs(tmp_path):
    timing(tmp_path / "train/a/soft.tsv", 1800)  # 4 GPUs: 2 GPU-hours
    timing(tmp_path / "train/b/soft.tsv", 3600)  # 1 GPU: 1 GPU-hour
    timing(tmp_path / "train/a/soft_d2.tsv", 3600)  # an ablation recipe: not a final run
    timing(tmp_path / "eval/a/base/structured/ood.tsv", 1800)
    timing(tmp_path / "eval/a/base/ssot/ood.tsv", 900)
    timing(tmp_path / "eval/a/soft_d2/structured/ood.tsv", 3600)  # an ablation condition: not counted
    timing(tmp_path / "eval/a/soft/noveltybench/curated_generate.tsv", 360)
    timing(tmp_path / "eval/a/soft/noveltybench/curated_score.tsv", 360)
    timing(tmp_path / "eval/a/hard/mcq.tsv", 36)
    runs = [("a", "soft"), ("b", "soft"), ("a", "hard")]
    objective = {"soft": "soft", "hard": "hard", "soft_d2": "soft"}
    costs = stage_costs([tmp_path], runs, objective, {"a": 4, "b": 1}, ["base", "soft", "hard"])
    rows = {row["stage"]: row for row in costs}
    assert (rows["training soft"]["ours"], rows["training soft"]["runs"]) == (3.0, 2)
    assert math.isnan(rows["training hard"]["ours"]) and rows["training hard"]["runs"] == 0
    assert (rows["structured sampling"]["ours"], rows["structured sampling"]["runs"]) == (0.75, 2)
    assert rows["NoveltyBench"]["ours"] == pytest.approx(0.2) and rows["NoveltyBench"]["runs"] == 2
    assert rows["MCQ generation"]["ours"] == pytest.approx(0.01)
    assert math.isnan(rows["PALOMA"]["ours"])

    stated = [ReferenceCell("compute", "", "", "training soft", "A100 GPU-hours", "2.6", 2.6, 0.05, False)]
    frame = compute_table(list(rows.values()), stated, "the paper").frame.set_index("stage")
    assert frame.loc["training soft", "ours / reference"] == pytest.approx(3.0 / 2.6)
    assert math.isnan(frame.loc["PALOMA", "reference"])


def test_several_seeds_report_the_mean_of_the_seeds_and_count_every_job(tmp_path):
    seed_11, seed_12 = tmp_path / "seeds/11", tmp_path / "seeds/12"
    timing(seed_11 / "train/a/soft.tsv", 3600)
    timing(seed_12 / "train/a/soft.tsv", 7200)
    timing(seed_11 / "eval/a/base/mcq.tsv", 360)  # seed 12 has no timed MCQ job: the mean is seed 11's
    costs = stage_costs([seed_11, seed_12], [("a", "soft")], {"soft": "soft"}, {"a": 2}, ["base"])
    rows = {row["stage"]: row for row in costs}
    assert (rows["training soft"]["ours"], rows["training soft"]["runs"]) == (3.0, 2)
    assert (rows["MCQ generation"]["ours"], rows["MCQ generation"]["runs"]) == (pytest.approx(0.1), 1)
    assert math.isnan(rows["PALOMA"]["ours"]) and rows["PALOMA"]["runs"] == 0
