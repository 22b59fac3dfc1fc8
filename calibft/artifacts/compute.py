"""What a run cost, per stage, from Snakemake's job timings (`benchmark:` files under logs/benchmarks/), next to
the paper's compute statement (`reference/paper.csv`, artifact `compute`).

The paper states the A100 GPU-hours of each objective's final training runs and the summed wall-clock hours of
each evaluation's runs; the report states ours the same way: a training run's wall time times the GPUs its
model's `resources` ask for, summed over the final recipes of one objective; an evaluation's wall times summed
over the jobs of the final conditions (the SSOT baseline's with structured sampling, NoveltyBench's generation
and scoring together; not the ablations').
A run on the CPU asks for no GPU and costs 0 GPU-hours; `runs` counts the timed jobs of a stage (a stage
without any reads `---`).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import pandas as pd

from calibft.artifacts.reference import COMPUTE, ReferenceCell
from calibft.artifacts.tables import Table

# the paper's stage names, and the folders of their evaluations' timings under benchmarks/eval/{model}/{cond}/
EVALUATION_STAGES = {
    "structured sampling": ("structured", "ssot"),
    "open-ended random generation": ("open_ended",),
    "MCQ generation": ("mcq",),
    "TinyBenchmarks": ("tinybench",),
    "PALOMA": ("paloma",),
    "NoveltyBench": ("noveltybench",),
}


def wall_seconds(path: str | Path) -> float:
    """The wall time of one job (the `s` column of its benchmark file's first row)."""
    with open(path, newline="") as f:
        return float(next(csv.DictReader(f, delimiter="\t"))["s"])


def evaluation_timings(benchmarks: Path, evaluation: str, conditions: Iterable[str]) -> list[Path]:
    """The timings of every job of one evaluation: `{evaluation}.tsv` or `{evaluation}/*.tsv` of each model in
    each of `conditions`."""
    patterns = [f"eval/*/{cond}/{evaluation}{tail}" for cond in conditions for tail in (".tsv", "/*.tsv")]
    return [path for pattern in patterns for path in sorted(benchmarks.glob(pattern))]


def stage_costs(
    benchmarks: Sequence[str | Path],
    train_runs: Iterable[tuple[str, str]],
    objective: Mapping[str, str],
    gpus: Mapping[str, int],
    conditions: Iterable[str],
) -> list[dict]:
    """One row per stage: its name, unit, our figure and the number of timed jobs. `benchmarks` are the timing
    folders of each seed's runs; `train_runs` the final (model, recipe) runs, `objective[recipe]` soft or hard,
    `gpus[model]` its training GPUs; the evaluations count the jobs of the final `conditions` (base and the final
    recipes), as the paper's final evaluation. With several seeds a stage's figure is the mean of the seeds'
    (the paper states one seed's runs) and `runs` counts the jobs of every seed."""
    per_seed = [_seed_costs(Path(folder), list(train_runs), objective, gpus, list(conditions)) for folder in benchmarks]
    rows = []
    for stage_rows in zip(*per_seed, strict=True):
        timed = [row["ours"] for row in stage_rows if row["runs"]]
        ours = sum(timed) / len(timed) if timed else math.nan
        rows.append({**stage_rows[0], "ours": ours, "runs": sum(row["runs"] for row in stage_rows)})
    return rows


def _seed_costs(
    benchmarks: Path,
    train_runs: list[tuple[str, str]],
    objective: Mapping[str, str],
    gpus: Mapping[str, int],
    conditions: list[str],
) -> list[dict]:
    """`stage_costs` of one seed's timings."""
    rows = []
    for kind in ("soft", "hard"):
        runs = [
            (model, benchmarks / "train" / model / f"{recipe}.tsv")
            for model, recipe in train_runs
            if objective[recipe] == kind
        ]
        timed = [(model, path) for model, path in runs if path.exists()]
        hours = sum(wall_seconds(path) * gpus[model] for model, path in timed) / 3600 if timed else math.nan
        rows.append({"stage": f"training {kind}", "unit": "GPU-hours", "ours": hours, "runs": len(timed)})
    for stage, folders in EVALUATION_STAGES.items():
        timed = [path for folder in folders for path in evaluation_timings(benchmarks, folder, conditions)]
        hours = sum(wall_seconds(path) for path in timed) / 3600 if timed else math.nan
        rows.append({"stage": stage, "unit": "wall-clock hours", "ours": hours, "runs": len(timed)})
    return rows


def compute_table(rows: list[dict], reference: Iterable[ReferenceCell], source: str) -> Table:
    """tab:compute: each stage's figure next to the reference's, with their ratio; `---` where either is
    missing."""
    stated = {cell.row: cell.value for cell in reference if cell.artifact == COMPUTE}
    frame = pd.DataFrame(rows, columns=["stage", "unit", "ours", "runs"])
    frame["reference"] = [stated.get(stage, math.nan) for stage in frame["stage"]]
    frame["ours / reference"] = frame["ours"] / frame["reference"]
    caption = (
        f"What this run cost per stage, next to {source}: training as GPU-hours (wall time times the GPUs of the "
        "run), evaluations as wall-clock hours summed over their jobs, from Snakemake's job timings."
    )
    formats = {"ours": ".3g", "reference": ".3g", "ours / reference": ".3g"}
    return Table(frame, "tab:compute", caption, formats=formats)
