"""The files that the workflow's targets ask for (the Snakefile's `all`, `data`, `adapters`, `evaluations`,
`structured`, `tables` and `reproduce`), each a list of paths of one config's `Layout`.

    layout = Layout(config, basedir)
    eval_outputs(layout)  # every evaluation of every seed: what `snakemake evaluations` makes

Importing this module does not import torch: the workflow reads it to plan.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from calibft.artifacts.registry import ARTIFACTS, Artifact, planned
from calibft.data.grid import SPLITS
from calibft.pipeline.layout import Layout


def data_outputs(layout: Layout) -> list[str]:
    """Every artifact of the data layer: prompts, output spaces and tries."""
    config = layout.config
    prompts = [layout.prompts(split) for split in SPLITS]
    spaces = [
        layout.space(space, split)
        for space, settings in config["output_spaces"].items()
        for split in settings["splits"]
    ]
    tries = [
        layout.tries(tokenizer, space, split)
        for space, splits in config["tries"].items()
        for split in splits
        for tokenizer in layout.trie_tokenizers(space, split)
    ]
    return prompts + spaces + tries


def adapter_outputs(layout: Layout, runs: Sequence[tuple[str, str]] | None = None) -> list[str]:
    """The run.json of these (model, recipe) runs of every seed; by default every adapter."""
    runs = runs or layout.training_runs
    return [seeded.adapter_file(model, recipe, "run.json") for seeded in layout.per_seed() for model, recipe in runs]


def seed_eval_outputs(layout: Layout) -> list[str]:
    """The evaluations of one seed's layout: structured sampling, its exact counterpart, SSOT and the ablations
    (each file once), the NoveltyBench summaries, open-ended generation, MCQ, TinyBenchmarks and PALOMA."""
    splits = layout.config["evaluation"]["structured"]["splits"]
    structured = [
        path
        for split in splits
        for path in layout.structured_metrics(split) + layout.exact_metrics(split) + layout.ssot_metrics(split)
    ]
    # an ablation recipe that is also a final one is evaluated once, with the final recipes
    structured += [
        path
        for split in splits
        for objective in ("soft", "hard")
        for path in layout.ablation_metrics(objective, split)
        if path not in structured
    ]
    noveltybench = [layout.noveltybench_file(run, "summary.json") for run in layout.noveltybench_runs()]
    files = [
        ("open_ended", "metrics.json"),
        ("mcq", "metrics.json"),
        ("tinybench", "summary.json"),
        ("paloma", "summary.json"),
    ]
    others = [path for name in files for path in layout.eval_files(*name)]
    return structured + noveltybench + others


def eval_outputs(layout: Layout) -> list[str]:
    """Every evaluation of every seed (`seed_eval_outputs`)."""
    return [path for seeded in layout.per_seed() for path in seed_eval_outputs(seeded)]


def artifact_files(layout: Layout, structured_only: bool = False) -> list[str]:
    """The files of every table and figure that the config renders (the target `structured`'s only)."""
    rows = planned(layout.config["evaluation"]["structured"]["splits"], structured_only)
    return [path for row in rows for path in layout.artifact_files(row)]


def structured_outputs(layout: Layout) -> list[str]:
    """The structured-sampling part of the paper (target `structured`, what profiles/mini runs): the final
    recipes' adapters, the structured evaluations of every condition, and their tables and figures."""
    metrics = [
        path
        for seeded in layout.per_seed()
        for split in layout.config["evaluation"]["structured"]["splits"]
        for path in seeded.structured_metrics(split)
    ]
    return adapter_outputs(layout, layout.main_runs) + metrics + artifact_files(layout, structured_only=True)


def reproduction_files(layout: Layout, reproduced: Sequence[Artifact]) -> list[str]:
    """The reproduction report's CSV files: one per compared table, its summary and the compute report."""
    names = [row.name for row in reproduced] + ["reproduction", "compute"]
    return [f"{layout.reproduction_stem(name)}.csv" for name in names]


def plans_qualitative_tables(layout: Layout) -> bool:
    """Whether the config renders the NoveltyBench qualitative tables: they need the curated split and the base,
    soft and hard conditions that they compare."""
    noveltybench = layout.config["evaluation"]["noveltybench"]
    return "curated" in noveltybench["splits"] and {"base", "soft", "hard"} <= set(layout.conditions)


def qualitative_tables(layout: Layout, cases_file: str | Path) -> list[str]:
    """The files of the qualitative tables, one table per case of `cases_file` (what checkpoint
    noveltybench_qualitative_cases chose), each named after its case."""
    (row,) = [row for row in ARTIFACTS if row.chosen]
    names = [case["name"] for case in json.loads(Path(cases_file).read_text())]
    return [path for name in names for path in layout.artifact_files(row, name)]
