"""Rule reproduction: one table of calibft.artifacts.registry against the configured reference."""

from pathlib import Path

from calibft.artifacts.reference import read_csv_file
from calibft.artifacts.registry import artifact
from calibft.artifacts.reproduction import reproduce
from calibft.core.runlog import log_to
from calibft.pipeline.artifact_inputs import seed_inputs

log = log_to(snakemake.log[0])
row = artifact(snakemake.wildcards.artifact)
settings = snakemake.params.settings
per_seed = seed_inputs(dict(snakemake.input.items()), row.name, settings["seeds"])
reference = read_csv_file(snakemake.input.reference)
source = snakemake.config["reproduction"]["reference"]
directory = Path(snakemake.output[0]).parent
written = reproduce(row, per_seed, settings, reference, source, snakemake.params.protocol, directory)
log.info("%s compared with %s: %s", row.name, source, ", ".join(map(str, written)))
