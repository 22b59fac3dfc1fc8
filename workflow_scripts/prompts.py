from dataclasses import asdict

from calibft.core.io import write_jsonl
from calibft.core.runlog import log_to
from calibft.data.grid import prompts

log = log_to(snakemake.log[0])
split_prompts = prompts(snakemake.wildcards.split)
write_jsonl(snakemake.output[0], (asdict(p) for p in split_prompts))
log.info("wrote %d %s prompts", len(split_prompts), snakemake.wildcards.split)
