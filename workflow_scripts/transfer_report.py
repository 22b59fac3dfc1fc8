"""Tables and figures of the transfer evaluations: rules transfer_table, noveltybench_qualitative_cases,
noveltybench_qualitative_table and open_ended_figure (params.kind)."""

import json
from dataclasses import asdict
from pathlib import Path

from calibft.artifacts.figures import save_figure
from calibft.artifacts.open_ended import (
    answer_counts,
    open_multi_threshold_figure,
    open_qualitative_figure,
)
from calibft.artifacts.tables import table_name, write_table
from calibft.artifacts.transfer import (
    QualitativeCase,
    case_rows,
    generative_distribution_table,
    mcq_table,
    noveltybench_table,
    qualitative_cases,
    qualitative_table,
)
from calibft.io import read_jsonl, read_runs, write_json
from calibft.runlog import log_to

log = log_to(snakemake.log[0])
params = snakemake.params
titles = (
    dict(model_titles=params.model_titles, condition_titles=params.condition_titles)
    if "model_titles" in params.keys()
    else {}
)


def scores_of(paths):
    """{model: {condition: {split: rows of scores.jsonl}}}, from paths .../{model}/{cond}/noveltybench/{split}/."""
    scores = {}
    for path in paths:
        model, condition, _, split = Path(path).parts[-5:-1]
        scores.setdefault(model, {}).setdefault(condition, {})[split] = read_jsonl(path)
    return scores


out_dir = Path(snakemake.output[0]).parent
if params.kind == "mcq_summary":
    write_table(mcq_table(read_runs(snakemake.input.mcq, params.runs), **titles), out_dir)
elif params.kind == "noveltybench_summary":
    write_table(noveltybench_table(scores_of(snakemake.input.scores), **titles), out_dir)
elif params.kind == "generative_distribution_summary":
    table = generative_distribution_table(
        read_runs(snakemake.input.open_ended, params.runs),
        read_runs(snakemake.input.mcq, params.runs),
        scores_of(snakemake.input.scores),
        **titles,
    )
    write_table(table, out_dir)
elif params.kind == "qualitative_cases":
    cases = qualitative_cases(scores_of(snakemake.input), params.models)
    write_json(
        snakemake.output[0],
        [{"name": table_name(case.label), "label": case.label, **asdict(case)} for case in cases],
    )
elif params.kind == "qualitative_table":
    chosen = [c for c in json.loads(Path(snakemake.input.cases).read_text()) if c["name"] == params.name]
    if not chosen:
        raise ValueError(f"{params.name} is not one of the cases in {snakemake.input.cases}")
    case = QualitativeCase(**{k: v for k, v in chosen[0].items() if k not in ("name", "label")})
    rows = case_rows(scores_of(snakemake.input.scores), case)
    write_table(qualitative_table(case, rows, **titles), out_dir)
elif params.kind == "appendix_open_multi_threshold":
    figure = open_multi_threshold_figure(
        read_runs(snakemake.input, params.runs),
        **titles,
        model_families=params.model_families,
        model_sizes=params.model_sizes,
    )
    save_figure(figure, params.kind, out_dir)
elif params.kind == "appendix_open_qualitative":
    panels = []
    paths = iter(snakemake.input)
    for model in params.qualitative["models"]:
        records = {condition: read_jsonl(next(paths)) for condition in params.conditions}
        for prompt in params.qualitative["prompts"]:
            counts = {condition: answer_counts(records[condition], prompt) for condition in params.conditions}
            panels.append((params.model_titles[model], prompt, counts))
    save_figure(open_qualitative_figure(panels, params.condition_titles), params.kind, out_dir)
else:
    raise ValueError(f"unknown kind {params.kind!r}")
log.info("%s written: %s", params.kind, ", ".join(map(str, snakemake.output)))
