from calibft.core.runlog import log_to
from calibft.evals.tinybench.gpirt import write_synthetic_params

log = log_to(snakemake.log[0])
settings = snakemake.params.settings
write_synthetic_params(snakemake.output[0], seed=settings["seed"], n_seen=settings["anchors"])
log.info("synthetic tinyBenchmarks parameters (%s): %s", settings, snakemake.output[0])
