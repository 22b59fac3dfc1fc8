from calibft.core.runlog import log_to
from calibft.lm.gguf_checkpoint import CHECKPOINTS

log_to(snakemake.log[0])
CHECKPOINTS[snakemake.wildcards.packaged_model](snakemake.output[0])
