"""Rule reproduction_summary: the verdicts of every compared table, counted per table."""

from pathlib import Path

import pandas as pd

from calibft.artifacts.reproduction import summary_table
from calibft.artifacts.tables import write_table
from calibft.core.runlog import log_to

log = log_to(snakemake.log[0])
comparisons = {name: pd.read_csv(path) for name, path in zip(snakemake.params.names, snakemake.input, strict=True)}
table = summary_table(comparisons, snakemake.params.reference, snakemake.params.protocol)
written = write_table(table, Path(snakemake.output[0]).parent)
log.info("verdicts of %d tables: %s", len(comparisons), ", ".join(map(str, written)))
