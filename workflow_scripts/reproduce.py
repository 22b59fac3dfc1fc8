"""Rule reproduction: one table of calibft.artifacts.registry against the configured reference."""

from pathlib import Path

from calibft.artifacts.registry import artifact
from calibft.reference import read_csv
from calibft.reproduction import reproduce
from calibft.runlog import log_to

log = log_to(snakemake.log[0])
row = artifact(snakemake.wildcards.artifact)
inputs = {read: list(getattr(snakemake.input, read)) for read in row.reads}
reference = list(read_csv(Path(snakemake.input.reference).read_text()))
source = snakemake.config["reproduction"]["reference"]
directory = Path(snakemake.output[0]).parent
written = reproduce(row, inputs, snakemake.params.settings, reference, source, snakemake.params.protocol, directory)
log.info("%s compared with %s: %s", row.name, source, ", ".join(map(str, written)))
