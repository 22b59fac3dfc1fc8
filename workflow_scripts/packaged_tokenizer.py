from calibft.packaged_tokenizers import save_packaged_tokenizer
from calibft.runlog import log_to

log_to(snakemake.log[0])
save_packaged_tokenizer(snakemake.wildcards.packaged_tokenizer, snakemake.output[0])
