"""Tables and figures of the retention evaluations: rules retention_table and retention_figure (params.kind)."""

from pathlib import Path

from calibft.artifacts.figures import save_figure
from calibft.artifacts.retention import (
    gpirt_per_task_figure,
    paloma_figure,
    paloma_figure_name,
    paloma_model_table,
    paloma_slice_table,
    retention_table,
    retention_transfer_table,
)
from calibft.artifacts.tables import write_table
from calibft.io import read_runs
from calibft.runlog import log_to

log = log_to(snakemake.log[0])
params = snakemake.params
titles = dict(model_titles=params.model_titles, condition_titles=params.condition_titles)
inputs = snakemake.input
tinybench = read_runs(inputs.tinybench, params.runs) if "tinybench" in inputs.keys() else None
paloma = read_runs(inputs.paloma, params.runs) if "paloma" in inputs.keys() else None
out_dir = Path(snakemake.output[0]).parent

if params.kind == "retention_transfer_summary":
    write_table(retention_transfer_table(tinybench, paloma, **titles), out_dir)
elif params.kind == "retention_summary":
    write_table(retention_table(tinybench, **titles), out_dir)
elif params.kind == "paloma_model_summary":
    write_table(paloma_model_table(paloma, **titles), out_dir)
elif params.kind == "paloma_slice_summary":
    write_table(paloma_slice_table(paloma, **titles), out_dir)
elif params.kind == "appendix_retention_gpirt_per_task":
    save_figure(gpirt_per_task_figure(tinybench, **titles), params.kind, out_dir)
elif params.kind in (paloma_figure_name("perplexity"), paloma_figure_name("bits_per_byte")):
    metric = "perplexity" if params.kind == paloma_figure_name("perplexity") else "bits_per_byte"
    save_figure(paloma_figure(paloma, metric, **titles), params.kind, out_dir)
else:
    raise ValueError(f"unknown kind {params.kind!r}")
log.info("%s written: %s", params.kind, ", ".join(map(str, snakemake.output)))
