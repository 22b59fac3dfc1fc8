from pathlib import Path

from calibft.artifacts.config_tables import config_tables
from calibft.artifacts.tables import write_table
from calibft.runlog import log_to

log = log_to(snakemake.log[0])
directory = Path(snakemake.output[0]).parent
written = []
for table in config_tables(snakemake.params.config, snakemake.params.recipes):
    written += write_table(table, directory)
    log.info("wrote %s (%d rows)", table.name, len(table.frame))
missing = set(map(str, snakemake.output)) - set(map(str, written))
if missing:
    raise RuntimeError(f"declared outputs not written: {sorted(missing)}")
