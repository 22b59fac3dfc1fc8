"""Rule ablation_table: tab:grid-ablation (soft recipes) or tab:hard-label-ablation (hard recipes)."""

from pathlib import Path

from calibft.artifacts.ablations import ablation_table, recipe_columns
from calibft.artifacts.tables import write_table
from calibft.io import read_runs
from calibft.runlog import log_to

log = log_to(snakemake.log[0])
settings = snakemake.params.settings
runs = [[model, recipe] for model in settings["models"] for recipe in settings["recipes"]]
metrics_by_split = {split: read_runs(snakemake.input[split], runs) for split in snakemake.params.splits}
columns = {
    recipe: recipe_columns(entry, settings["spaces"][recipe], settings["objective"])
    for recipe, entry in settings["recipes"].items()
}
table = ablation_table(
    metrics_by_split,
    list(settings["recipes"]),
    columns,
    settings["objective"],
    settings["final"],
    snakemake.params.model_titles,
    {"decimals": settings["reference"]["decimals"], "max_bins": settings["reference"]["max_bins"]},
)
written = write_table(table, Path(snakemake.output[0]).parent)
log.info("wrote %s (%d rows)", [str(p) for p in written], len(table.frame))
