"""What a table or figure reads for one config: the files of each result set its registry row names, and the
settings its renderer takes (`calibft.artifacts.registry`).

`RESULT_SETS` gives each result set (the registry's `READS`) its files and the settings it adds; rules `table`
and `figure` take a job's inputs from `artifact_inputs` and its settings from `artifact_settings`. With several
seeds a table of numbers reads the files of every seed (`artifact_seeds`), named per seed (`input_name`), and
its renderer runs once per seed (`seed_inputs`); `calibft.artifacts.seed_tables` combines the tables. Importing
this module does not import torch or matplotlib: the workflow reads it to plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from calibft.artifacts.registry import Artifact, artifact
from calibft.pipeline.layout import Layout

ResultSet = Callable[[Layout, Artifact], tuple[list[str], dict[str, Any]]]


def condition_titles(config: dict) -> dict[str, str]:
    """How the tables name a condition: Base, each recipe capitalized with spaces, SSOT."""
    recipes = {recipe: recipe.replace("_", " ").capitalize() for recipe in config["recipes"]}
    return {"base": "Base", **recipes, "ssot": "SSOT"}


def evaluation_space(config: dict) -> list[int]:
    """[decimals, max bins] of the shared evaluation target: the reference row of tab:grid-granularity."""
    space = config["output_spaces"][config["evaluation"]["structured"]["space"]]
    return [space["decimals"], space["max_bins"]]


def qualitative_panels(layout: Layout, panels: str) -> list[list[str]]:
    """[model, condition, prompt] of every histogram of a qualitative figure, in drawing order: the conditions
    of the configured panels (`conditions`), the SSOT comparison (`ssot`), or the decimals ablation's recipes
    (`decimals`)."""
    structured, ablations = layout.config["evaluation"]["structured"], layout.config["ablations"]
    if panels == "decimals":
        qualitative = ablations["qualitative"]
        return [
            [model, recipe, prompt]
            for model in ablations["models"]
            for prompt in qualitative["prompts"]
            for recipe in qualitative["recipes"]
        ]
    if panels == "conditions":
        panels = structured["qualitative"]
        return [[panel["model"], cond, panel["prompt"]] for panel in panels for cond in layout.conditions]
    model, conditions = layout.config["evaluation"]["ssot"]["qualitative_model"], ["base", "ssot"]
    conditions += ssot_conditions(layout)[1:]
    return [[model, cond, panel["prompt"]] for panel in structured["qualitative"] for cond in conditions]


def ssot_conditions(layout: Layout) -> list[str]:
    """The SSOT tables put the baseline next to the base model and the soft-target adapter."""
    return [cond for cond in ("base", "soft") if cond in layout.conditions]


def decimals_titles(config: dict) -> dict[str, str]:
    """The legend of the decimals ablation: each recipe by its space."""
    titles = {}
    for recipe in config["ablations"]["qualitative"]["recipes"]:
        space = config["output_spaces"][config["recipes"][recipe]["space"]]
        titles[recipe] = f"d = {space['decimals']}, {space['max_bins']} bins"
    return titles


def ablation_settings(layout: Layout, objective: str) -> dict[str, Any]:
    """What an ablation table needs of the config: its rows' settings, the final recipe, the reference."""
    config = layout.config
    recipes = {recipe: config["recipes"][recipe] for recipe in config["ablations"][objective]}
    return {
        "objective": objective,
        "models": config["ablations"]["models"],
        "recipes": recipes,
        "spaces": {recipe: config["output_spaces"][entry["space"]] for recipe, entry in recipes.items()},
        "final": next(r for r in layout.main_recipes if config["recipes"][r]["objective"] == objective),
        "reference": config["output_spaces"][config["evaluation"]["structured"]["space"]],
    }


def _splits(layout: Layout, row: Artifact) -> list[str]:
    return [row.split] if row.split else layout.config["evaluation"]["structured"]["splits"]


def _config(layout: Layout, row: Artifact):
    config = layout.config
    sections = {key: config[key] for key in ("output_spaces", "training", "recipes", "models")}
    return [], {"config": sections, "recipes": layout.main_recipes}


def _granularity(layout: Layout, row: Artifact):
    return [layout.granularity_costs()], {"reference": evaluation_space(layout.config)}


def _tokenizer(layout: Layout, row: Artifact):
    method = layout.config["method_figure"]
    folder = layout.tokenizer_source(method["tokenizer"])
    return [folder], {"method": method, "tokenizer": folder}


def _train_logs(layout: Layout, row: Artifact):
    files = [layout.adapter_file(model, recipe, "train_log.jsonl") for model, recipe in layout.main_runs]
    return files, {"train_runs": layout.main_runs}


def _structured(layout: Layout, row: Artifact):
    files = [path for split in _splits(layout, row) for path in layout.structured_metrics(split)]
    return files, {"w1_within_family": layout.protocol["w1_per_distribution"]}


def _exact(layout: Layout, row: Artifact):
    return [path for split in _splits(layout, row) for path in layout.exact_metrics(split)], {}


def _ssot(layout: Layout, row: Artifact):
    settings = {"ssot_conditions": ssot_conditions(layout), "models": list(layout.config["models"])}
    return layout.ssot_metrics(row.split), settings


def _samples(layout: Layout, row: Artifact):
    """The samples files of a qualitative figure's panels, with the panels (and the decimals ablation's legend)."""
    panels = qualitative_panels(layout, row.options["panels"])
    settings: dict[str, Any] = {"panels": panels}
    if row.options["panels"] == "decimals":
        settings["condition_titles"] = decimals_titles(layout.config)
    return [layout.samples_file(model, cond, row.split) for model, cond, _ in panels], settings


def _ablation(layout: Layout, row: Artifact):
    objective = row.options["objective"]
    splits = layout.config["evaluation"]["structured"]["splits"]
    files = [path for split in splits for path in layout.ablation_metrics(objective, split)]
    return files, {"ablation": ablation_settings(layout, objective)}


def _open_ended(layout: Layout, row: Artifact):
    models = layout.config["models"]
    return layout.eval_files("open_ended", "metrics.json"), {
        "model_families": {name: model.get("family", model["display"]) for name, model in models.items()},
        "model_sizes": {name: model.get("params_b") for name, model in models.items()},
    }


def _open_ended_samples(layout: Layout, row: Artifact):
    qualitative = layout.config["evaluation"]["open_ended"]["qualitative"]
    files = [
        layout.eval_file(model, cond, "open_ended", "samples.jsonl.gz")
        for model in qualitative["models"]
        for cond in layout.conditions
    ]
    return files, {"qualitative": qualitative, "conditions": layout.conditions}


def _noveltybench(layout: Layout, row: Artifact):
    return layout.noveltybench_scores(), {"noveltybench_runs": layout.noveltybench_runs()}


def _noveltybench_curated(layout: Layout, row: Artifact):
    return layout.noveltybench_curated_scores(), {"noveltybench_curated_runs": layout.noveltybench_curated_runs()}


def _files_only(files: Callable[[Layout], list[str]]) -> ResultSet:
    return lambda layout, row: (files(layout), {})


RESULT_SETS: dict[str, ResultSet] = {
    "config": _config,
    "granularity": _granularity,
    "tokenizer": _tokenizer,
    "train_logs": _train_logs,
    "structured": _structured,
    "exact": _exact,
    "ssot": _ssot,
    "samples": _samples,
    "ablation": _ablation,
    "open_ended": _open_ended,
    "open_ended_samples": _open_ended_samples,
    "mcq": _files_only(lambda layout: layout.eval_files("mcq", "metrics.json")),
    "noveltybench": _noveltybench,
    "noveltybench_cases": _files_only(lambda layout: [layout.noveltybench_cases()]),
    "noveltybench_curated": _noveltybench_curated,
    "tinybench": _files_only(lambda layout: layout.eval_files("tinybench", "summary.json")),
    "paloma": _files_only(lambda layout: layout.eval_files("paloma", "summary.json")),
}


def artifact_seeds(layout: Layout, name: str) -> list[int]:
    """The seeds whose runs artifact `name` shows: every seed for a table of numbers whose files depend on the
    seed (`Artifact.combines_seeds`), the first seed otherwise."""
    row, layouts = artifact(name), layout.per_seed()
    if not row.combines_seeds:
        return layouts[0].seeds[:1]
    files = [_files(seeded, row) for seeded in layouts]
    return [seeded.run_seed for seeded in layouts] if any(f != files[0] for f in files) else layouts[0].seeds[:1]


def _files(layout: Layout, row: Artifact) -> dict[str, list[str]]:
    return {read: RESULT_SETS[read](layout, row)[0] for read in row.reads}


def input_name(read: str, seed: int, seeds: list[int]) -> str:
    """The name of a result set's files among a job's inputs: the result set's, suffixed with the seed where
    the artifact shows several."""
    return read if len(seeds) == 1 else f"{read}_seed{seed}"


def artifact_inputs(layout: Layout, name: str) -> dict[str, list[str]]:
    """The files of each result set that artifact `name` reads, of each seed it shows (`input_name`)."""
    row, seeds = artifact(name), artifact_seeds(layout, name)
    return {
        input_name(read, seed, seeds): files
        for seed in seeds
        for read, files in _files(layout.seeded(seed), row).items()
    }


def seed_inputs(named: Mapping[str, Sequence[str]], name: str, seeds: list[int]) -> list[dict[str, list[str]]]:
    """A job's named inputs (`artifact_inputs`) as one mapping of result sets to files per seed, as the
    artifact's renderer takes them."""
    reads = artifact(name).reads
    return [{read: list(named[input_name(read, seed, seeds)]) for read in reads} for seed in seeds]


def artifact_settings(layout: Layout, name: str) -> dict[str, Any]:
    """What artifact `name`'s renderer reads of the config: its row's split and options, the runs and titles in
    table order, and what each of its result sets adds."""
    row, config = artifact(name), layout.config
    seeds = artifact_seeds(layout, name)
    layout = layout.seeded(seeds[0])  # what a result set adds of the config is the same for every seed
    settings = {
        "name": name,
        "seeds": seeds,
        "split": row.split,
        "splits": config["evaluation"]["structured"]["splits"],
        "runs": layout.structured_runs(),
        "model_titles": {model: entry["display"] for model, entry in config["models"].items()},
        "condition_titles": condition_titles(config),
        **row.options,
    }
    for read in row.reads:
        settings.update(RESULT_SETS[read](layout, row)[1])
    return settings
