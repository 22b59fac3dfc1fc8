from pathlib import Path

from calibft.artifacts.figures import save_figure, training_curves
from calibft.runlog import log_to

log = log_to(snakemake.log[0])
logs = dict(zip(snakemake.params.runs, snakemake.input, strict=True))
figure = training_curves(logs, snakemake.params.titles)
save_figure(figure, "training_curves", Path(snakemake.output.pdf).parent)
log.info("training curves of %d runs", len(logs))
