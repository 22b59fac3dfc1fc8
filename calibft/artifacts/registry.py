"""Every table and figure of the paper, one row each: its file name, its label in the paper, the results it
reads, the function that renders it and its caption.

The workflow plans one job per row (rules `table` and `figure`), the HTML report files each under its
section with its caption, and the tests check the demo's outputs against this table. Adding an artifact is
one renderer and one row:

    Artifact("main_ood", "table", "tab:main-ood", "Structured sampling", ("structured",),
             "calibft.artifacts.structured:render_structured_table", "Structured sampling on ...", split="ood")

A renderer takes `(inputs, settings)`: `inputs` maps each name of `reads` to the result files the workflow
gives for it (`calibft.pipeline.artifact_inputs.RESULT_SETS`), `settings` holds what the artifact needs of the
config (the models' and conditions' titles, the runs in table order, the row's `split` and `options`, and
what each of its reads adds). It returns a `calibft.artifacts.tables.Table` or a matplotlib figure. Table
renderers label their table with the row's label, so that the file name follows from it.

This module imports nothing heavy: the workflow reads it when it parses.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

KINDS = {"table": ("tex", "csv", "md"), "figure": ("pdf", "png")}
FOLDERS = {"table": "tables", "figure": "figures"}  # each kind's folder under the results' root
# The result sets a row may read; calibft.pipeline.artifact_inputs.RESULT_SETS gives each its files and settings.
READS = (
    "config",
    "granularity",
    "tokenizer",
    "train_logs",
    "structured",
    "exact",
    "ssot",
    "samples",
    "ablation",
    "open_ended",
    "open_ended_samples",
    "mcq",
    "noveltybench",
    "noveltybench_cases",
    "noveltybench_curated",
    "tinybench",
    "paloma",
)


@dataclass(frozen=True)
class Artifact:
    """One table or figure.

    name: the file name without extension, under results/tables/ or results/figures/.
    kind: "table" (.tex, .csv, .md) or "figure" (.pdf, .png).
    label: the paper's LaTeX label; None for an artifact of this pipeline only.
    section: the report's subcategory (its category is the kind: Tables or Figures).
    reads: the result sets it reads (keys of `calibft.pipeline.artifact_inputs.RESULT_SETS`).
    renderer: "module:function" of its renderer.
    caption: what it shows, for the report.
    split: the evaluation split it shows; it is planned only where the config evaluates that split.
    structured: part of the structured-sampling target (`structured`, what profiles/mini runs).
    options: settings of this row that its renderer reads (e.g. which metric a figure plots).
    chosen: its file names are chosen by a run (the NoveltyBench cases): `{name}_{case}`.
    """

    name: str
    kind: str
    label: str | None
    section: str
    reads: tuple[str, ...]
    renderer: str
    caption: str
    split: str | None = None
    structured: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)
    chosen: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.name}: kind must be one of {list(KINDS)}, not {self.kind!r}")
        unknown = [read for read in self.reads if read not in READS]
        if unknown:
            raise ValueError(f"{self.name}: reads {unknown}, which are not result sets; READS lists them")

    @property
    def folder(self) -> str:
        """The folder of its files under the results root: tables or figures."""
        return FOLDERS[self.kind]

    @property
    def extensions(self) -> tuple[str, ...]:
        return KINDS[self.kind]

    def files(self, name: str | None = None) -> list[str]:
        """Its files under the results root (of `name`, for a row whose names a run chooses)."""
        return [f"{self.folder}/{name or self.name}.{ext}" for ext in self.extensions]

    @property
    def combines_seeds(self) -> bool:
        """With several seeds, a table of numbers shows their mean and spread; a figure, or a table of one run's
        generations (`chosen`), shows the first seed's runs."""
        return self.kind == "table" and not self.chosen

    def render_function(self) -> Callable[[Mapping[str, list[str]], Mapping[str, Any]], Any]:
        module, function = self.renderer.split(":")
        return getattr(importlib.import_module(module), function)


STRUCTURED = "calibft.artifacts.structured"
TRANSFER = "calibft.artifacts.transfer"
OPEN_ENDED = "calibft.artifacts.open_ended"
RETENTION = "calibft.artifacts.retention"
EXACT = "calibft.artifacts.exact"

_PER_DISTRIBUTION = {
    ("ood", "w1"): "Normalized W1 per held-out family, for every model and condition.",
    ("ood", "kl"): "Logit KL per held-out family, for every model and condition.",
    ("unseen", "w1"): "Normalized W1 per unseen parameter setting, for every model and condition.",
    ("unseen", "kl"): "Logit KL per unseen parameter setting, for every model and condition.",
}

ARTIFACTS: tuple[Artifact, ...] = (
    # configuration and data
    *(
        Artifact(
            name,
            "table",
            f"tab:{name.replace('_', '-')}",
            "Configuration",
            ("config",),
            "calibft.artifacts.config_tables:render_config_table",
            caption,
            structured=True,
        )
        for name, caption in (
            ("shared_hyperparams", "The training settings that both objectives share, rendered from the config."),
            ("method_hyperparams", "The soft-target and hard-target recipes, rendered from the config."),
            (
                "benchmark_distributions",
                "The 30 distribution families with their tiers, SciPy laws, training regions and evaluation "
                "configurations.",
            ),
        )
    ),
    Artifact(
        "grid_granularity",
        "table",
        "tab:grid-granularity",
        "Data",
        ("granularity",),
        "calibft.artifacts.granularity:render_grid_granularity",
        "Construction cost of the canonical output space and of its token trie for decimals d = 2..6 and max "
        "bins 1001..16384: mean time per prompt and worst tracemalloc peak over the measured prompts. The "
        "evaluation target's setting is shaded in the LaTeX table.",
    ),
    Artifact(
        "method",
        "figure",
        "fig:method",
        "Method",
        ("tokenizer",),
        "calibft.artifacts.method_figure:render_method_figure",
        "The method on one real prompt: the target law, its canonical output space, the token trie with the "
        "targets q(v | prefix) and a sampled path in bold, the soft target at one prefix of that path, and the "
        "tokens a hard target trains on.",
    ),
    Artifact(
        "training_curves",
        "figure",
        None,
        "Training",
        ("train_logs",),
        "calibft.artifacts.figures:render_training_curves",
        "Training loss per optimizer step of each model's soft-target and hard-target adapters (the final "
        "recipes), one panel per model, on a log axis; faint: every step, solid: a moving average.",
        structured=True,
    ),
    # structured sampling
    Artifact(
        "main_ood",
        "table",
        "tab:main-ood",
        "Structured sampling",
        ("structured",),
        f"{STRUCTURED}:render_structured_table",
        "Structured sampling on the held-out families: normalized W1 (W1 over the target's Q95 - Q05, averaged "
        "within each family, then the median across families), logit KL against the shared evaluation target, "
        "and valid rate, per model and condition. Best per model in bold; --- where a family has no valid sample.",
        split="ood",
        structured=True,
    ),
    Artifact(
        "main_unseen",
        "table",
        "tab:main-unseen",
        "Structured sampling",
        ("structured",),
        f"{STRUCTURED}:render_structured_table",
        "Structured sampling on the unseen parameter settings of the training families: normalized W1, logit KL "
        "and valid rate per model and condition, aggregated as in the held-out table.",
        split="unseen",
        structured=True,
    ),
    Artifact(
        "main_structured_sampling",
        "figure",
        "fig:main-structured-sampling",
        "Structured sampling",
        ("structured",),
        f"{STRUCTURED}:render_structured_sampling_figure",
        "Family-median normalized W1 per model and condition: held-out families left, unseen parameter settings "
        "right. Hatched bars: undefined, a family had no valid sample.",
        structured=True,
    ),
    *(
        Artifact(
            f"appendix_{split}_{metric}_per_dist",
            "figure",
            f"fig:appendix-{split}-{metric}-per-dist",
            "Structured sampling",
            ("structured",),
            f"{STRUCTURED}:render_per_distribution_figure",
            caption,
            split=split,
            structured=True,
            options={"metric": {"w1": "w1_norm", "kl": "logit_kl"}[metric]},
        )
        for (split, metric), caption in _PER_DISTRIBUTION.items()
    ),
    Artifact(
        "main_ood_qualitative",
        "figure",
        "fig:main-ood-qualitative",
        "Structured sampling",
        ("samples",),
        f"{STRUCTURED}:render_qualitative_figure",
        "The target law of held-out configurations (one panel per entry of evaluation.structured.qualitative), "
        "overlaid with histograms of the base and fine-tuned models' valid samples. A corner note counts the "
        "samples outside the plotted range.",
        split="ood",
        structured=True,
        options={"panels": "conditions"},
    ),
    *(
        Artifact(
            f"exact_structured_{split}",
            "table",
            None,
            "Structured sampling",
            ("exact",),
            f"{EXACT}:render_exact_table",
            f"The exact structured evaluation on {what}: the model's probability of every value of the evaluation "
            "space from its token trie, with no sampling. Exact normalized W1 (family median), KL(target || model) "
            "on the space and over sequences, and the mass on the space, per model and condition.",
            split=split,
        )
        for split, what in (("ood", "the held-out families"), ("unseen", "the unseen parameter settings"))
    ),
    Artifact(
        "exact_vs_sampled_w1",
        "figure",
        None,
        "Structured sampling",
        ("exact",),
        f"{EXACT}:render_exact_figure",
        "Each prompt's sampled normalized W1 against its exact value, one panel per split and condition: filled, "
        "the answers that are canonical strings of the space (the exact distribution's event), with the 99% spread "
        "that as many draws from the exact distribution give; hollow, every valid answer (the paper's W1). The "
        "title counts the prompts whose filled point lies within its spread.",
    ),
    Artifact(
        "ssot_structured_ood",
        "table",
        "tab:ssot-structured-ood",
        "Structured sampling",
        ("structured", "ssot"),
        f"{STRUCTURED}:render_ssot_table",
        "The String Seed of Thought baseline on the held-out families: normalized W1 and valid rate of the base "
        "model, the soft-target adapter and the base model prompted with SSOT.",
        split="ood",
    ),
    Artifact(
        "ssot_structured_unseen",
        "table",
        "tab:ssot-structured-unseen",
        "Structured sampling",
        ("structured", "ssot"),
        f"{STRUCTURED}:render_ssot_table",
        "The String Seed of Thought baseline on the unseen parameter settings.",
        split="unseen",
    ),
    Artifact(
        "appendix_ssot_qualitative",
        "figure",
        "fig:appendix-ssot-qualitative",
        "Structured sampling",
        ("samples",),
        f"{STRUCTURED}:render_qualitative_figure",
        "Target law with the samples of the base model, the SSOT baseline and the soft-target adapter on a few "
        "prompts of one model.",
        split="ood",
        options={"panels": "ssot"},
    ),
    # ablations
    Artifact(
        "grid_ablation",
        "table",
        "tab:grid-ablation",
        "Ablations",
        ("ablation",),
        "calibft.artifacts.ablations:render_ablation_table",
        "Soft-target ablation over the training output space (decimals and max bins): held-out-family and "
        "unseen-parameter normalized W1 per ablation model. Bold: the best setting per model and split; the "
        "final recipe is shaded in the LaTeX table.",
        options={"objective": "soft"},
    ),
    Artifact(
        "hard_label_ablation",
        "table",
        "tab:hard-label-ablation",
        "Ablations",
        ("ablation",),
        "calibft.artifacts.ablations:render_ablation_table",
        "Hard-target ablation over the output space, samples per prompt and epochs. The final recipe is shaded "
        "in the LaTeX table.",
        options={"objective": "hard"},
    ),
    Artifact(
        "appendix_num_decimals_qualitative",
        "figure",
        "fig:appendix-num-decimals-qualitative",
        "Ablations",
        ("samples",),
        f"{STRUCTURED}:render_qualitative_figure",
        "Held-out-family samples of soft-target adapters trained on output spaces with different decimals.",
        split="ood",
        options={"panels": "decimals"},
    ),
    # transfer
    Artifact(
        "generative_distribution_summary",
        "table",
        "tab:generative-distribution-summary",
        "Transfer",
        ("open_ended", "mcq", "noveltybench"),
        f"{TRANSFER}:render_generative_distribution_table",
        "Transfer beyond numbers: top-90% first-token support size and unique output rate of open-ended random "
        "generation, MCQ answer-position TV, and NoveltyBench utility.",
    ),
    Artifact(
        "noveltybench_summary",
        "table",
        "tab:noveltybench-summary",
        "Transfer",
        ("noveltybench",),
        f"{TRANSFER}:render_noveltybench_table",
        "NoveltyBench distinct (number of equivalence classes among the answers) and utility per split.",
    ),
    Artifact(
        "mcq_summary",
        "table",
        "tab:mcq-summary",
        "Transfer",
        ("mcq",),
        f"{TRANSFER}:render_mcq_table",
        "MCQ generation: the share of generations that parse as a question with four options, a correct answer "
        "and an explanation, and the TV distance of the correct answers' positions from uniform (--- when none "
        "parse).",
    ),
    Artifact(
        "noveltybench_qualitative",
        "table",
        "tab:noveltybench-qualitative",
        "Transfer",
        ("noveltybench_cases", "noveltybench_curated"),
        f"{TRANSFER}:render_qualitative_table",
        "A curated NoveltyBench prompt chosen for a regime (soft: soft-target training raises utility the most "
        "over the base model; hard: the hard-target adapter is competitive or best; base: fine-tuning lowers "
        "utility): the top class representatives of each condition with their ratings.",
        chosen=True,
    ),
    Artifact(
        "appendix_open_multi_threshold",
        "figure",
        "fig:appendix-open-multi-threshold",
        "Transfer",
        ("open_ended",),
        f"{OPEN_ENDED}:render_open_multi_threshold_figure",
        "Open-ended random generation, one point per prompt and model: the fine-tuned model's top-90% "
        "first-token support (top) and unique output rate (bottom) against the base model's, soft left and hard "
        "right; points above the diagonal are more diverse than the base. Colour: model family; marker: model "
        "size.",
    ),
    Artifact(
        "appendix_open_qualitative",
        "figure",
        "fig:appendix-open-qualitative",
        "Transfer",
        ("open_ended_samples",),
        f"{OPEN_ENDED}:render_open_qualitative_figure",
        "Empirical answer frequencies of a few open-ended prompts, base against fine-tuned.",
    ),
    # retention
    Artifact(
        "retention_transfer_summary",
        "table",
        "tab:retention-transfer-summary",
        "Retention",
        ("tinybench", "paloma"),
        f"{RETENTION}:render_retention_transfer_table",
        "Retention: TinyBenchmarks gp-IRT accuracy averaged over the five tasks, and PALOMA perplexity, per "
        "model and condition.",
    ),
    Artifact(
        "retention_summary",
        "table",
        "tab:retention-summary",
        "Retention",
        ("tinybench",),
        f"{RETENTION}:render_retention_table",
        "TinyBenchmarks gp-IRT per model, with its five tasks below it.",
    ),
    Artifact(
        "paloma_model_summary",
        "table",
        "tab:paloma-model-summary",
        "Retention",
        ("paloma",),
        f"{RETENTION}:render_paloma_model_table",
        "PALOMA perplexity and bits per byte per model, pooled over the slices.",
    ),
    Artifact(
        "paloma_slice_summary",
        "table",
        "tab:paloma-slice-summary",
        "Retention",
        ("paloma",),
        f"{RETENTION}:render_paloma_slice_table",
        "PALOMA perplexity and bits per byte per slice, the mean over models.",
    ),
    Artifact(
        "appendix_retention_gpirt_per_task",
        "figure",
        "fig:appendix-retention-gpirt-per-task",
        "Retention",
        ("tinybench",),
        f"{RETENTION}:render_gpirt_per_task_figure",
        "TinyBenchmarks gp-IRT per task, per model and condition.",
    ),
    Artifact(
        "appendix_paloma_perplexity",
        "figure",
        "fig:appendix-paloma-perplexity",
        "Retention",
        ("paloma",),
        f"{RETENTION}:render_paloma_figure",
        "PALOMA perplexity per slice and model.",
        options={"metric": "perplexity"},
    ),
    Artifact(
        "appendix_paloma_bpb",
        "figure",
        "fig:appendix-paloma-bpb",
        "Retention",
        ("paloma",),
        f"{RETENTION}:render_paloma_figure",
        "PALOMA bits per byte per slice and model.",
        options={"metric": "bits_per_byte"},
    ),
)


def table_name(label: str) -> str:
    """The file name of a table: its LaTeX label without `tab:`, hyphens turned into underscores."""
    if not label.startswith("tab:") or len(label) == 4:
        raise ValueError(f"a table label looks like 'tab:main-ood', not {label!r}")
    return label[4:].replace("-", "_")


BY_NAME: dict[str, Artifact] = {artifact.name: artifact for artifact in ARTIFACTS}


def artifact(name: str) -> Artifact:
    """The row of an artifact by its file name; a chosen table (`noveltybench_qualitative_soft_...`) by its
    row's name."""
    if name in BY_NAME:
        return BY_NAME[name]
    chosen = [a for a in ARTIFACTS if a.chosen and name.startswith(f"{a.name}_")]
    if not chosen:
        raise KeyError(f"no artifact named {name!r}; the registry has {sorted(BY_NAME)}")
    return chosen[0]


def where(**criteria: Any) -> list[Artifact]:
    """The rows whose fields, or else options, have these values: `where(kind="table", split="ood")`,
    `where(objective="soft")`."""

    def value(row: Artifact, key: str) -> Any:
        return getattr(row, key) if key in Artifact.__dataclass_fields__ else row.options.get(key)

    return [row for row in ARTIFACTS if all(value(row, key) == wanted for key, wanted in criteria.items())]


def planned(splits: list[str], structured_only: bool = False) -> list[Artifact]:
    """The rows that a config with these evaluation splits renders (the target `structured`'s only, or
    every row), in the registry's order; the chosen tables are planned by the run that chooses them."""
    return [
        a
        for a in ARTIFACTS
        if not a.chosen and (a.split is None or a.split in splits) and (a.structured or not structured_only)
    ]


def markdown_table() -> str:
    """The registry as a markdown table: what docs/artifacts.md lists (a test keeps the two equal)."""
    lines = ["| file | label in the paper | section | reads | caption |", "|---|---|---|---|---|"]
    for row in ARTIFACTS:
        name = f"{row.name}_{{case}}" if row.chosen else row.name
        files = f"`{row.folder}/{name}.{{{','.join(row.extensions)}}}`"
        label = f"`{row.label}`" if row.label else "(this pipeline's)"
        reads = ", ".join(f"`{read}`" for read in row.reads)
        caption = row.caption.replace("|", "\\|")
        lines.append(f"| {files} | {label} | {row.section} | {reads} | {caption} |")
    return "\n".join(lines) + "\n"
