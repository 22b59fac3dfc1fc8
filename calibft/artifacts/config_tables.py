"""The tables that follow from the configuration and the family registry alone: the shared and the
method-specific training settings (tab:shared-hyperparams, tab:method-hyperparams) and the benchmark's 30
distribution families (tab:benchmark-distributions).

Every function takes the configuration as a plain dict with (at least) its `output_spaces`, `training`,
`recipes` and `models` sections, so the demo configuration renders its own values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from calibft.artifacts.formats import format_number
from calibft.artifacts.tables import Table
from calibft.data.families import FAMILIES
from calibft.data.grid import OOD_PARAMS, TRAIN_AXES, UNSEEN_PARAMS, prompts
from calibft.data.output_space import QUANTILE_RANGE
from calibft.training.batching import total_steps

# What each objective optimizes (calibft.training.objectives), in the paper's words.
OBJECTIVES = {"soft": "Trie-induced KL", "hard": "Completion CE"}
TIERS = {1: "I", 2: "II", 3: "III"}

# Prompt parameter and grid axis names as the paper's tables write them: spelled-out Greek letters, indices,
# and the names of tab:benchmark-distributions (Maxwell's scale σ, Chi's ν, TruncNorm's bounds a and b, the
# uniform and triangular width w, the mode fraction, the hypergeometric K/M).
SYMBOLS = {
    "mu": "μ",
    "sigma": "σ",
    "alpha": "α",
    "beta": "β",
    "gamma": "γ",
    "lambda": "λ",
    "nu": "ν",
    "mu1": "μ₁",
    "mu2": "μ₂",
    "x0": "x₀",
    "d1": "d₁",
    "d2": "d₂",
    "xm": "xₘ",
    "scale": "σ",
    "df": "ν",
    "lower": "a",
    "upper": "b",
    "width": "w",
    "mode_fraction": "f_mode",
    "success_fraction": "K/M",
}

# Prompt parameters -> training-grid axes, for the families whose prompt parameters are derived from the
# axes (calibft.data.grid.TRAIN_AXES): the test configurations are shown in the coordinates of the grid.
AXES_OF_PARAMS: dict[str, Callable[[Mapping[str, float]], dict[str, float]]] = {
    "uniform": lambda p: {"a": p["a"], "width": p["b"] - p["a"]},
    "triangular": lambda p: {
        "a": p["a"],
        "width": p["b"] - p["a"],
        "mode_fraction": (p["c"] - p["a"]) / (p["b"] - p["a"]),
    },
    "hypergeometric": lambda p: {"M": p["M"], "N": p["N"], "success_fraction": p["K"] / p["M"]},
}

SHARED_CAPTION = (
    "Shared training and data-construction settings for both Calibration Fine-Tuning variants. These values "
    "are held fixed across model families with no per-model tuning."
)
METHOD_CAPTION = (
    "Method-specific training hyperparameters. Hard-target fine-tuning uses more optimizer steps because each "
    "completion provides sparse sampled-path supervision rather than dense prefix-level targets. Optimizer "
    "steps = epochs × ceil(ceil(training prompts × completions per prompt / GPUs) / per-device batch size)."
)
BENCHMARK_CAPTION = (
    "Calibration Fine-Tuning benchmark distributions. The SciPy name is the scipy.stats distribution that "
    "defines each target law. Training region: the axes of the training grid, whose Cartesian product gives "
    "the training prompts; [lo, hi] (n) is n evenly spaced values (log: geometrically spaced), {...} the "
    "listed values. Test configurations: the unseen-parameter configuration of each training family, and the "
    "three configurations of each held-out family. Shaded rows are the held-out (OOD) families, excluded from "
    "training and evaluated only at test time."
)


def _recipe_names(config: Mapping, recipes: Sequence[str] | None) -> list[str]:
    """The given recipes; by default the final ones, the evaluation's conditions (the ablations' are not shown)."""
    if recipes is None:
        recipes = [c for c in config["evaluation"]["conditions"] if c != "base"]
    names = list(recipes)
    unknown = [name for name in names if name not in config["recipes"]]
    if unknown:
        raise KeyError(f"unknown recipe(s) {unknown}; configured: {list(config['recipes'])}")
    return names


def _same_or_each(values: Mapping[str, Any]) -> Any:
    """The value when every key has the same one, otherwise `key: value; key: value` in order."""
    distinct = list(dict.fromkeys(values.values()))
    if len(distinct) == 1:
        return distinct[0]
    return "; ".join(f"{key}: {_text(value)}" for key, value in values.items())


def _text(value: Any) -> str:
    return format_number(value) if isinstance(value, int | float) and not isinstance(value, bool) else str(value)


def world_size(resources: Mapping) -> int:
    """Training processes of one run: one per GPU, one on the CPU."""
    return max(1, int(resources["gpus"]))


def training_hardware(resources: Mapping, distributed: str) -> str:
    """`4 A100 GPUs with FSDP`, `1 GPU`, or `CPU`, from a model's resources."""
    gpus = int(resources["gpus"])
    if gpus == 0:
        return "CPU"
    kind = str(resources.get("gpu_model", "")).upper()
    text = f"{gpus} {kind + ' ' if kind else ''}GPU{'s' if gpus > 1 else ''}"
    return f"{text} with {distributed.upper()}" if gpus > 1 else text


def optimizer_steps(num_prompts: int, recipe: Mapping, training: Mapping, world: int) -> int:
    """Optimizer steps of one training run, as the training loop counts them (`batching.total_steps`)."""
    epochs, samples, cap = recipe["epochs"], recipe["samples_per_prompt"], recipe.get("max_steps")
    return total_steps(num_prompts, epochs, samples, cap, training["per_device_batch_size"], world)


def steps_cell(num_prompts: int, recipe: Mapping, training: Mapping, world: int) -> int | str:
    """The optimizer steps of a run, and, when the recipe's `max_steps` cuts them (the demo's), the epochs'
    count beside them: the caption's formula gives that one."""
    steps = optimizer_steps(num_prompts, recipe, training, world)
    epochs_only = {key: value for key, value in recipe.items() if key != "max_steps"}
    uncapped = optimizer_steps(num_prompts, epochs_only, training, world)
    return steps if steps == uncapped else f"{steps} (max_steps; {uncapped} uncapped)"


def shared_hyperparams(config: Mapping, recipes: Sequence[str] | None = None) -> pd.DataFrame:
    """Parameter | Value: the settings shared by every recipe (tab:shared-hyperparams)."""
    training, lora = config["training"], config["training"]["lora"]
    names = _recipe_names(config, recipes)
    decimals = _same_or_each(
        {name: config["output_spaces"][config["recipes"][name]["space"]]["decimals"] for name in names}
    )
    hardware = _same_or_each(
        {
            model["display"]: training_hardware(model["resources"], training["distributed"])
            for model in config["models"].values()
        }
    )
    warmup = format_number(round(100 * training["warmup_fraction"], 10))
    rows = [
        ("Fine-tuning method", "LoRA"),
        ("Training prompts", len(prompts("train"))),
        ("Canonical decimals", decimals),
        ("Continuous quantile range", f"[{', '.join(map(format_number, QUANTILE_RANGE))}]"),
        ("Tail mass outside range", "Clipped to edge bins"),  # calibft.data.output_space: added to the edge bins
        ("LoRA rank / alpha / dropout", " / ".join(format_number(lora[k]) for k in ("r", "alpha", "dropout"))),
        ("LoRA target modules", ", ".join(lora["target_modules"])),
        ("Optimizer", "AdamW"),  # calibft.training.train
        ("Learning rate", float(training["learning_rate"])),
        ("Weight decay", float(training["weight_decay"])),
        ("LR schedule", f"Cosine with {warmup}% linear warmup"),
        ("Per-device batch size", int(training["per_device_batch_size"])),
        ("Gradient accumulation", int(training["gradient_accumulation"])),
        ("Training GPUs", hardware),
        ("Max sequence length", f"{training['max_seq_len']} tokens"),
        ("Model/load precision", training["precision"]),
        ("Batching", "Family-balanced"),  # calibft.training.batching
    ]
    return pd.DataFrame(rows, columns=["Parameter", "Value"])


def recipe_title(name: str) -> str:
    """A recipe's column title: `soft` -> `Soft`, `soft_d3` -> `Soft d3`."""
    return name.replace("_", " ").capitalize()


def method_hyperparams(config: Mapping, recipes: Sequence[str] | None = None) -> pd.DataFrame:
    """Parameter | one column per recipe: the recipe-specific settings (tab:method-hyperparams)."""
    training, names = config["training"], _recipe_names(config, recipes)
    num_prompts = len(prompts("train"))
    columns = {}
    for name in names:
        recipe = config["recipes"][name]
        soft = recipe["objective"] == "soft"
        steps = _same_or_each(
            {
                model["display"]: steps_cell(num_prompts, recipe, training, world_size(model["resources"]))
                for model in config["models"].values()
            }
        )
        columns[recipe_title(name)] = [
            OBJECTIVES[recipe["objective"]],
            int(config["output_spaces"][recipe["space"]]["max_bins"]),
            int(recipe["epochs"]),
            int(recipe["samples_per_prompt"]),
            steps,
            f"τ={float(recipe.get('temperature', 1.0))!r}" if soft else "N/A",
        ]
    parameters = [
        "Objective",
        "Maximum output-space bins",
        "Epochs",
        "Sampled completions per prompt per epoch",
        "Optimizer steps per model",
        "Loss temperature",
    ]
    return pd.DataFrame({"Parameter": parameters, **columns}, dtype=object)


def _symbol(name: str) -> str:
    return SYMBOLS.get(name, name)


def _axis_text(name: str, values: Sequence[float]) -> str:
    """`a ∈ [-5, 2] (11)` for an evenly spaced axis, `σ ∈ [0.5, 2] (11, log)` for a geometric one,
    `n ∈ {5, 10, 15, 20}` for a short or irregular list."""
    array, n = np.asarray(values, dtype=float), len(values)
    span = f"{_symbol(name)} ∈ [{format_number(array[0])}, {format_number(array[-1])}] ({n}"
    if n >= 5 and np.array_equal(np.linspace(array[0], array[-1], n), array):
        return span + ")"
    if n >= 5 and array[0] > 0 and np.array_equal(np.geomspace(array[0], array[-1], n), array):
        return span + ", log)"
    return f"{_symbol(name)} ∈ {{{', '.join(format_number(v) for v in array)}}}"


def training_region(family_id: str) -> str:
    """The training grid of a family, axis by axis; `held out` for a family that is never trained on."""
    if family_id not in TRAIN_AXES:
        return "held out"
    axes, _ = TRAIN_AXES[family_id]
    return " × ".join(_axis_text(name, values) for name, values in axes)


def _configuration_text(family_id: str, params: Mapping[str, float]) -> str:
    shown = AXES_OF_PARAMS[family_id](params) if family_id in AXES_OF_PARAMS else params
    return ", ".join(f"{_symbol(name)}={format_number(value)}" for name, value in shown.items())


def evaluation_configurations(family_id: str) -> str:
    """The evaluation configurations of a family (unseen parameters or held-out family), `; `-separated."""
    settings = [params for family, params in [*UNSEEN_PARAMS, *OOD_PARAMS] if family == family_id]
    return "; ".join(_configuration_text(family_id, params) for params in settings)


# The rows of the paper's tab:benchmark-distributions, in its order, which is not the registry's: Chi comes
# before Chi-Square, and TruncNorm (tier II) sits among the tier-III rows, after Weibull.
BENCHMARK_ROWS = (
    "uniform", "gaussian", "bernoulli", "beta", "binomial", "exponential", "geometric", "negative_binomial",
    "lognormal", "triangular", "rayleigh", "poisson", "maxwell", "cauchy", "student_t", "chi", "chi_square",
    "f_distribution", "gamma", "weibull", "truncnorm", "laplace", "logistic", "pareto", "hypergeometric", "gumbel",
    "skellam", "beta_binomial", "lomax", "inverse_gaussian",
)  # fmt: skip


def benchmark_distributions() -> pd.DataFrame:
    """One row per family, in the paper's order: Tier, Distribution, SciPy name, Training region, Test
    configurations, Held out."""
    families = [FAMILIES[family_id] for family_id in BENCHMARK_ROWS]
    return pd.DataFrame(
        {
            "Tier": [f.tier for f in families],
            "Distribution": [f.display for f in families],
            "SciPy name": [f.scipy_name for f in families],
            "Training region": [training_region(f.id) for f in families],
            "Test configurations": [evaluation_configurations(f.id) for f in families],
            "Held out": [f.held_out for f in families],
        }
    )


def config_tables(config: Mapping, recipes: Sequence[str] | None = None) -> list[Table]:
    """The three tables, ready for calibft.artifacts.tables.write_table."""
    families = benchmark_distributions()
    return [
        Table(shared_hyperparams(config, recipes), "tab:shared-hyperparams", SHARED_CAPTION),
        Table(method_hyperparams(config, recipes), "tab:method-hyperparams", METHOD_CAPTION),
        Table(
            families.drop(columns="Held out"),
            "tab:benchmark-distributions",
            BENCHMARK_CAPTION,
            formats={"Tier": TIERS.__getitem__},
            code=["SciPy name"],
            shaded=families["Held out"].tolist(),
            column_format=r"@{}p{0.04\linewidth}p{0.12\linewidth}p{0.1\linewidth}p{0.4\linewidth}p{0.28\linewidth}@{}",
            wide=True,
            font_size="scriptsize",
        ),
    ]


def render_config_table(inputs: Mapping[str, Sequence[str]], settings: Mapping[str, Any]) -> Table:
    """The registry's renderer (calibft.artifacts.registry) of each of the three tables, by its name."""
    (table,) = [t for t in config_tables(settings["config"], settings["recipes"]) if t.name == settings["name"]]
    return table
