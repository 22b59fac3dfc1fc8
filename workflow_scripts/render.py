"""Rules table and figure: one artifact of calibft.artifacts.registry, rendered by its row's renderer (once per
seed that it shows, calibft.artifacts.seed_tables)."""

from pathlib import Path

from calibft.artifacts.figures import save_figure
from calibft.artifacts.registry import artifact
from calibft.artifacts.seed_tables import render_artifact
from calibft.artifacts.tables import write_table
from calibft.core.runlog import log_to
from calibft.pipeline.artifact_inputs import seed_inputs

log = log_to(snakemake.log[0])
name = snakemake.wildcards.artifact
row = artifact(name)
settings = snakemake.params.settings
per_seed = seed_inputs(dict(snakemake.input.items()), name, settings["seeds"])
rendered = render_artifact(row, per_seed, settings)
directory = Path(snakemake.output[0]).parent
if row.kind == "table":
    if rendered.name != name:
        raise ValueError(f"{row.renderer} labelled its table {rendered.label!r} ({rendered.name}), not {name}")
    written = write_table(rendered, directory)
else:
    written = save_figure(rendered, name, directory)
log.info("%s written: %s", name, ", ".join(map(str, written)))
