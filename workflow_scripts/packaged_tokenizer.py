from calibft.core.runlog import log_to
from calibft.lm.packaged_tokenizers import save_packaged_tokenizer

log_to(snakemake.log[0])
save_packaged_tokenizer(snakemake.wildcards.packaged_tokenizer, snakemake.output[0])
