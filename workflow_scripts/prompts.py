from dataclasses import asdict

from calibft.grid import prompts
from calibft.io import write_jsonl
from calibft.runlog import log_to

log = log_to(snakemake.log[0])
split_prompts = prompts(snakemake.wildcards.split)
write_jsonl(snakemake.output[0], (asdict(p) for p in split_prompts))
log.info("wrote %d %s prompts", len(split_prompts), snakemake.wildcards.split)
