"""Rule compute_report: what the run cost per stage, next to the reference's compute statement."""

from pathlib import Path

from calibft.artifacts.compute import compute_table, stage_costs
from calibft.artifacts.reference import read_csv_file
from calibft.artifacts.tables import write_table
from calibft.core.runlog import log_to

log = log_to(snakemake.log[0])
params = snakemake.params
runs = [tuple(run) for run in params.train_runs]
rows = stage_costs(params.benchmarks, runs, params.objective, params.gpus, params.conditions)
reference = read_csv_file(snakemake.input.reference)
written = write_table(compute_table(rows, reference, params.reference), Path(snakemake.output[0]).parent)
log.info("compute per stage: %s", ", ".join(map(str, written)))
