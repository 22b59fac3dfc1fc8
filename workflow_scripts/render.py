"""Rules table and figure: one artifact of calibft.artifacts.registry, rendered by its row's renderer."""

from pathlib import Path

from calibft.artifacts.figures import save_figure
from calibft.artifacts.registry import artifact
from calibft.artifacts.tables import write_table
from calibft.runlog import log_to

log = log_to(snakemake.log[0])
name = snakemake.wildcards.artifact
row = artifact(name)
inputs = {read: list(getattr(snakemake.input, read)) for read in row.reads}
rendered = row.render_function()(inputs, snakemake.params.settings)
directory = Path(snakemake.output[0]).parent
if row.kind == "table":
    if rendered.name != name:
        raise ValueError(f"{row.renderer} labelled its table {rendered.label!r} ({rendered.name}), not {name}")
    written = write_table(rendered, directory)
else:
    written = save_figure(rendered, name, directory)
log.info("%s written: %s", name, ", ".join(map(str, written)))
