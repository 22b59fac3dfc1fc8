"""Checkpoint noveltybench_qualitative_cases: the curated prompts that the qualitative tables show, per regime."""

from calibft.artifacts.transfer import case_records, qualitative_cases, read_scores
from calibft.core.io import write_json
from calibft.core.runlog import log_to

log = log_to(snakemake.log[0])
scores = read_scores(snakemake.input, snakemake.params.runs)
cases = qualitative_cases(scores, snakemake.params.models)
write_json(snakemake.output[0], case_records(cases))
log.info("%d cases chosen: %s", len(cases), ", ".join(case.label for case in cases))
