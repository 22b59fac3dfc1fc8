import os
import sys

from snakemake.utils import validate

# `calibft` is importable here and in every job, conda environments included (they pin its dependencies
# only); a job on a cluster node parses this file again and so sets the same path.
sys.path.insert(0, workflow.basedir)
os.environ.update(
    PYTHONPATH=os.pathsep.join(
        filter(None, [workflow.basedir, os.environ.get("PYTHONPATH")])
    )
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
