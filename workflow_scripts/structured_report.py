"""Tables and figures of the structured-sampling evaluation: rules structured_table, ssot_table,
structured_sampling_figure, per_distribution_figure and the two qualitative figures (params.kind)."""

import json
from pathlib import Path

from calibft.artifacts.figures import save_figure
from calibft.artifacts.structured import (
    per_distribution_figure,
    per_distribution_name,
    qualitative_figure,
    ssot_table,
    structured_sampling_figure,
    structured_table,
    valid_values,
)
from calibft.artifacts.tables import write_table
from calibft.grid import prompts, select
from calibft.io import read_runs
from calibft.runlog import log_to

log = log_to(snakemake.log[0])
params = snakemake.params


def qualitative_panels(paths, panels):
    """(title, prompt, {condition: valid values}) per [model, condition, prompt id] triple of `panels`."""
    grouped = {}
    for path, (model, condition, prompt_id) in zip(paths, panels, strict=True):
        key = (model, prompt_id)
        grouped.setdefault(key, {})[condition] = valid_values(path).get(prompt_id, [])
    ood = prompts("ood")
    return [
        (params.model_titles[model], select(ood, [prompt_id])[0], samples)
        for (model, prompt_id), samples in grouped.items()
    ]


titles = dict(model_titles=params.model_titles, condition_titles=params.condition_titles)
if params.kind == "structured_table":
    table = structured_table(read_runs(snakemake.input, params.runs), params.split, **titles)
    write_table(table, Path(snakemake.output[0]).parent)
elif params.kind == "ssot_table":
    metrics = read_runs(snakemake.input.structured, params.runs)
    ssot = {
        model: json.loads(Path(path).read_text())
        for model, path in zip(params.models, snakemake.input.ssot, strict=True)
    }
    write_table(
        ssot_table(metrics, ssot, params.split, **titles, conditions=params.conditions),
        Path(snakemake.output[0]).parent,
    )
elif params.kind == "structured_sampling_figure":
    by_split = {split: read_runs(snakemake.input[split], params.runs[split]) for split in params.splits}
    save_figure(
        structured_sampling_figure(by_split, **titles), "main_structured_sampling", Path(snakemake.output.pdf).parent
    )
elif params.kind == "per_distribution_figure":
    metrics = read_runs(snakemake.input, params.runs)
    figure = per_distribution_figure(
        metrics, params.split, params.key, **titles, w1_within_family=params.w1_within_family
    )
    save_figure(figure, per_distribution_name(params.split, params.key), Path(snakemake.output.pdf).parent)
elif params.kind == "qualitative_figure":
    figure = qualitative_figure(qualitative_panels(snakemake.input, params.panels), params.condition_titles)
    save_figure(figure, params.name, Path(snakemake.output.pdf).parent)
else:
    raise ValueError(f"unknown kind {params.kind!r}")
log.info("%s written: %s", params.kind, ", ".join(map(str, snakemake.output)))
