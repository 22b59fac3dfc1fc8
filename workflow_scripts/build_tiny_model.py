from calibft.runlog import log_to
from calibft.tiny_model import TinyModelSettings, build_tiny_model

log_to(snakemake.log[0])
build_tiny_model(snakemake.output[0], TinyModelSettings.from_dict(snakemake.params.settings))
