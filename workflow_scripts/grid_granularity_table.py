from pathlib import Path

from calibft.artifacts.granularity import grid_granularity_table
from calibft.artifacts.tables import write_table
from calibft.granularity import read_costs
from calibft.runlog import log_to

log = log_to(snakemake.log[0])
costs, metadata = read_costs(snakemake.input[0])
table = grid_granularity_table(costs, tuple(snakemake.params.reference), metadata)
written = write_table(table, Path(snakemake.output[0]).parent)
log.info("wrote %s (%d rows, measured on %s)", [str(p) for p in written], len(costs), metadata["machine"])
