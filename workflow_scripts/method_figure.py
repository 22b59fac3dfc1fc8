from pathlib import Path

from calibft.artifacts.figures import save_figure
from calibft.artifacts.method_figure import method_figure
from calibft.grid import prompts, select
from calibft.models import load_tokenizer
from calibft.runlog import log_to

log = log_to(snakemake.log[0])
settings = snakemake.params.settings
prompt = select(prompts("train"), [settings["prompt"]])[0]
figure = method_figure(
    prompt,
    load_tokenizer(snakemake.params.tokenizer),
    settings["decimals"],
    settings["max_bins"],
    seed=snakemake.params.seed,
)
written = save_figure(figure, "method", Path(snakemake.output.pdf).parent)
log.info("wrote %s for %s (%s)", [str(p) for p in written], prompt.id, settings)
