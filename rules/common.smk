import json
import os
import sys

from snakemake.utils import validate

# `calibft` is importable here and in every job, conda environments included (they pin its dependencies
# only), and shell commands find the `python` and `accelerate` that run Snakemake (a conda job's own
# environment comes first). A job on a cluster node parses this file again and so sets the same paths.
sys.path.insert(0, workflow.basedir)
os.environ.update(
    PYTHONPATH=os.pathsep.join(
        filter(None, [workflow.basedir, os.environ.get("PYTHONPATH")])
    ),
    PATH=os.pathsep.join(
        filter(None, [os.path.dirname(sys.executable), os.environ.get("PATH")])
    ),
)

from calibft.config import check_config, tokenizer_source  # noqa: E402

validate(config, "../schemas/config.schema.yaml")
check_config(config)

SPLITS = ["train", "unseen", "ood"]


wildcard_constraints:
    split="|".join(SPLITS),
    space="|".join(config["output_spaces"]),
    tokenizer="|".join(config["tokenizers"]),
    name="|".join(config["tiny_models"]) or "(?!)",
    model="|".join(config["models"]),
    recipe="|".join(config["recipes"]),


def used_tokenizers():
    """The tokenizer keys of the configured models: tries are built for these only."""
    return sorted({model["tokenizer"] for model in config["models"].values()})


def data_outputs():
    """Every artifact of the data layer: prompts, output spaces and tries."""
    prompts = expand("results/prompts/{split}.jsonl", split=SPLITS)
    spaces = [
        f"results/output_spaces/{space}/{split}.npz"
        for space, settings in config["output_spaces"].items()
        for split in settings["splits"]
    ]
    tries = [
        f"results/tries/{tokenizer}/{space}/{split}.npz"
        for tokenizer in used_tokenizers()
        for space, splits in config["tries"].items()
        for split in splits
    ]
    return prompts + spaces + tries


def space_settings(wildcards):
    settings = config["output_spaces"][wildcards.space]
    return {"decimals": settings["decimals"], "max_bins": settings["max_bins"]}


def tokenizer_files(wildcards):
    """A tokenizer kept in a local folder (one the workflow may build) is an input of the rule."""
    entry = config["tokenizers"][wildcards.tokenizer]
    return [entry["path"]] if "path" in entry else []


def tokenizer_name_or_path(wildcards):
    return tokenizer_source(config, wildcards.tokenizer)


def data_resources(name):
    return config["resources"]["data"].get(name)


def tiny_model_settings(wildcards):
    return config["tiny_models"][wildcards.name]


def tiny_model_threads(wildcards):
    """The build's torch threads are a setting of the model: its weights depend on them."""
    return config["tiny_models"][wildcards.name].get("num_threads", 1)


def adapter_outputs():
    """Every adapter of the configured models and recipes."""
    return expand(
        "results/adapters/{model}/{recipe}/run.json",
        model=config["models"],
        recipe=config["recipes"],
    )


def train_data(wildcards):
    """Soft recipes train on their space's trie, hard recipes sample their space's strings."""
    recipe = config["recipes"][wildcards.recipe]
    if recipe["objective"] == "soft":
        tokenizer = config["models"][wildcards.model]["tokenizer"]
        return f"results/tries/{tokenizer}/{recipe['space']}/train.npz"
    return f"results/output_spaces/{recipe['space']}/train.npz"


def probe_tries(wildcards):
    """The unseen-parameter tries on the evaluation target: the before/after KL of run.json."""
    return f"results/tries/{config['models'][wildcards.model]['tokenizer']}/eval/unseen.npz"


def model_files(wildcards):
    """A model kept in a local folder (one the workflow may build) is an input of its jobs."""
    entry = config["models"][wildcards.model]
    return [entry["path"]] if "path" in entry else []


def model_resource(name):
    def resource(wildcards):
        return config["models"][wildcards.model]["resources"].get(
            name, 1 if name == "cpus" else None
        )

    return resource


def train_job(wildcards, output):
    """The resolved TrainJob of calibft.train, as JSON."""
    entry = config["models"][wildcards.model]
    job = {
        "model": entry.get("path") or entry["hf_id"],
        "tokenizer": tokenizer_source(config, entry["tokenizer"]),
        "chat": entry["chat"],
        "recipe": config["recipes"][wildcards.recipe],
        "training": config["training"],
        "seed": config["seed"],
        "train_data": train_data(wildcards),
        "probe_tries": probe_tries(wildcards),
        "out_dir": os.path.dirname(output.run),
        "checkpoint_dir": f"results/checkpoints/{wildcards.model}/{wildcards.recipe}",
    }
    return json.dumps(job)


def train_launcher(wildcards, resources):
    """One process on the CPU or one GPU; `accelerate launch` with a process per GPU otherwise."""
    if resources.gpu <= 1:
        return "python"
    return (
        f"accelerate launch --config_file {workflow.basedir}/launch/"
        f"{config['training']['distributed']}.yaml --num_processes {resources.gpu}"
    )


CONFIG_TABLES = ["shared_hyperparams", "method_hyperparams", "benchmark_distributions"]


def config_table_settings(wildcards):
    """The configuration sections that the configuration tables show (a change re-renders them)."""
    return {
        key: config[key] for key in ("output_spaces", "training", "recipes", "models")
    }


TRAINING_RUNS = [
    (model, recipe) for model in config["models"] for recipe in config["recipes"]
]


def table_outputs():
    """The tables and figures rendered so far: configuration tables and training curves."""
    tables = expand(
        "results/tables/{table}.{ext}", table=CONFIG_TABLES, ext=["tex", "csv", "md"]
    )
    return tables + [
        "results/figures/training_curves.pdf",
        "results/figures/training_curves.png",
    ]
