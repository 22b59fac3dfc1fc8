from calibft.core.runlog import log_to
from calibft.data.grid import read_prompts
from calibft.data.output_space import SpaceSet, iter_spaces

log = log_to(snakemake.log[0])
settings = snakemake.params.settings
prompts = read_prompts(snakemake.input[0])
spaces = iter_spaces(prompts, settings["decimals"], settings["max_bins"], threads=snakemake.threads)
space_set = SpaceSet.from_spaces([p.id for p in prompts], spaces, **settings)
space_set.save(snakemake.output[0])
log.info("%d output spaces, %d values in all, %s", len(space_set), len(space_set.probs), settings)
