from calibft.gguf_checkpoint import CHECKPOINTS
from calibft.runlog import log_to

log_to(snakemake.log[0])
CHECKPOINTS[snakemake.wildcards.packaged_model](snakemake.output[0])
