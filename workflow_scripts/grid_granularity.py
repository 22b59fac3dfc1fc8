from calibft.core.runlog import log_to
from calibft.data.granularity import construction_costs, write_costs
from calibft.data.grid import evenly_spaced, read_prompts
from calibft.lm.models import load_tokenizer

log = log_to(snakemake.log[0])
settings = snakemake.params.settings
suite = [prompt for path in snakemake.input.prompts for prompt in read_prompts(path)]
chosen = evenly_spaced(suite, settings["prompts"])
log.info("%d of %d prompts: %s", len(chosen), len(suite), [p.id for p in chosen])
tokenizer = load_tokenizer(snakemake.params.tokenizer)
costs = construction_costs(tokenizer, chosen, settings["decimals"], settings["max_bins"])
for cost in costs:
    log.info("%s", cost)
write_costs(
    snakemake.output[0],
    costs,
    tokenizer=settings["tokenizer"],
    tokenizer_source=str(snakemake.params.tokenizer),
    vocabulary=len(tokenizer),
    splits=settings["splits"],
    prompt_ids=[p.id for p in chosen],
)
