from calibft.core.runlog import log_to
from calibft.demo.tiny_evaluators import TinyEvaluatorSettings, build_tiny_evaluator
from calibft.demo.tiny_model import TinyModelSettings, build_tiny_model

log_to(snakemake.log[0])
settings = dict(snakemake.params.settings)
if "kind" in settings:  # a NoveltyBench evaluator
    build_tiny_evaluator(snakemake.output[0], TinyEvaluatorSettings.from_dict(settings))
else:
    build_tiny_model(snakemake.output[0], TinyModelSettings.from_dict(settings))
