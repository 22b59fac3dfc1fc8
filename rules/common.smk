import json
import math
import os
import re
import sys

import yaml
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

# Importing calibft sets NPY_DISABLE_CPU_FEATURES, which every job inherits: the jobs compute with the numpy
# kernels of every x86-64 CPU, whatever the node (calibft.cpu).
from calibft.assets import (  # noqa: E402
    NOVELTYBENCH_PROMPTS,
    OPEN_ENDED_PROMPTS,
    SSOT_PROMPTS,
    TINYBENCHMARKS_PARAMS,
    cache_path,
)
from calibft.evals.tinybench_tasks import TASKS as TINYBENCH_TASKS  # noqa: E402
from calibft.grid import evaluated_ids  # noqa: E402
from calibft.config import (  # noqa: E402
    check_config,
    hub_checkpoints,
    model_source,
    tokenizer_source,
)
from calibft.protocol import protocol_name, protocol_root, resolve  # noqa: E402
from calibft.artifacts.registry import ARTIFACTS, READS, artifact, planned  # noqa: E402

validate(config, "../schemas/config.schema.yaml")
check_config(config)

# The protocol (calibft.protocol): the value of every switch. Adapters, evaluations, tables and figures of a
# protocol go under its own root (`results/` for release), logs and benchmarks likewise; the data layer is shared.
# Every checkpoint and tokenizer given by a Hugging Face id, with its revision: each is snapshotted once under
# resources/hf/models/ (rule checkpoint_snapshot) and every job loads it from there.
HUB_CHECKPOINTS = hub_checkpoints(config)
PROTOCOL = resolve(config["protocol"])
OUT = protocol_root(config["protocol"])
# logs/ of release, logs/protocols/{name}/ of any other protocol
_PROTOCOL_FOLDER = (
    ""
    if OUT == "results"
    else os.path.join("protocols", protocol_name(config["protocol"]))
)


def out(path):
    """A result of the protocol: results/{path}, or results/protocols/{name}/{path}."""
    return f"{OUT}/{path}"


def out_log(path):
    return os.path.join("logs", _PROTOCOL_FOLDER, path)


def out_benchmark(path):
    """Snakemake's timing of a heavy job (`benchmark:`), beside the logs."""
    return out_log(os.path.join("benchmarks", path))


SPLITS = ["train", "unseen", "ood"]
CONDITIONS = config["evaluation"]["conditions"]
STRUCTURED = config["evaluation"]["structured"]
SSOT = config["evaluation"]["ssot"]
OPEN_ENDED = config["evaluation"]["open_ended"]
MCQ = config["evaluation"]["mcq"]
NOVELTYBENCH = config["evaluation"]["noveltybench"]
EVALUATORS = NOVELTYBENCH["evaluators"]
TINYBENCH = config["evaluation"]["tinybenchmarks"]
PALOMA = config["evaluation"]["paloma"]
ABLATIONS = config["ablations"]

# The final recipes (the evaluation's conditions) are trained for every model; the ablations' other recipes
# for the ablation models only.
MAIN_RECIPES = [cond for cond in CONDITIONS if cond != "base"]
ABLATION_RECIPES = [
    recipe
    for recipe in dict.fromkeys(ABLATIONS["soft"] + ABLATIONS["hard"])
    if recipe not in MAIN_RECIPES
]
MAIN_RUNS = [(model, recipe) for model in config["models"] for recipe in MAIN_RECIPES]
TRAINING_RUNS = MAIN_RUNS + [
    (model, recipe) for model in ABLATIONS["models"] for recipe in ABLATION_RECIPES
]


wildcard_constraints:
    split="|".join(SPLITS),
    space="|".join(config["output_spaces"]),
    tokenizer="|".join(config["tokenizers"]),
    name="|".join(config["tiny_models"]) or "(?!)",
    packaged_model="|".join(config.get("packaged_models", [])) or "(?!)",
    hf_repo="|".join(re.escape(repo) for repo in HUB_CHECKPOINTS) or "(?!)",
    packaged_tokenizer="|".join(config.get("packaged_tokenizers", [])) or "(?!)",
    model="|".join(config["models"]),
    recipe="|".join(config["recipes"]),
    cond="|".join(CONDITIONS + ABLATION_RECIPES),
    eval_split="|".join(STRUCTURED["splits"]),
    metric="w1|kl",
    nb_split="|".join(NOVELTYBENCH["splits"]),
    evaluator="|".join(EVALUATORS),
    tb_task="|".join(TINYBENCH_TASKS),
    paloma_slice="|".join(re.escape(name) for name in PALOMA["slices"]),


def trie_tokenizers(space, split):
    """The tokenizers of the models that read the tries of (space, split): every model's for the evaluation
    target's evaluation splits (logit KL, training probe), the soft-trained models' for a train split. A trie
    that no job reads is built for every model's tokenizer, since the config asks for it.
    """
    if split == "train":
        models = {
            model
            for model, recipe in TRAINING_RUNS
            if config["recipes"][recipe]["objective"] == "soft"
            and config["recipes"][recipe]["space"] == space
        }
    else:
        models = set(config["models"]) if space == STRUCTURED["space"] else set()
    return sorted(
        {config["models"][model]["tokenizer"] for model in models or config["models"]}
    )


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
        for space, splits in config["tries"].items()
        for split in splits
        for tokenizer in trie_tokenizers(space, split)
    ]
    return prompts + spaces + tries


def space_settings(wildcards):
    settings = config["output_spaces"][wildcards.space]
    return {"decimals": settings["decimals"], "max_bins": settings["max_bins"]}


def local_tokenizer(key):
    """The tokenizer's folder (a snapshot, or one the workflow builds) is an input of the rules that use it."""
    return [tokenizer_source(config, key)]


def tokenizer_files(wildcards):
    return local_tokenizer(wildcards.tokenizer)


def tokenizer_name_or_path(wildcards):
    return tokenizer_source(config, wildcards.tokenizer)


GRANULARITY = config["grid_granularity"]


def granularity_prompts(wildcards):
    return expand("results/prompts/{split}.jsonl", split=GRANULARITY["splits"])


def granularity_tokenizer_files(wildcards):
    return local_tokenizer(GRANULARITY["tokenizer"])


def evaluation_space():
    """(decimals, max bins) of the shared evaluation target: the reference row of tab:grid-granularity."""
    space = config["output_spaces"][STRUCTURED["space"]]
    return [space["decimals"], space["max_bins"]]


def data_resources(name):
    return config["resources"]["data"].get(name)


def trie_mem_mb(wildcards, input):
    """The data jobs' memory plus `trie_mem_mb_per_space_mb` per MB of the output-space file:
    the tries of a space take 10 to 18 times its file (measured; 5.4 GB at the peak for
    1988 prompts at 16384 bins). Unknown (<TBD>) until the space exists."""
    data = config["resources"]["data"]
    per_space_mb = data.get("trie_mem_mb_per_space_mb", 0)
    return data["mem_mb"] + math.ceil(
        per_space_mb * os.path.getsize(input.space) / 2**20
    )


def tiny_model_settings(wildcards):
    return config["tiny_models"][wildcards.name]


def tiny_model_threads(wildcards):
    """The build's torch threads are a setting of the model: its weights depend on them."""
    return config["tiny_models"][wildcards.name].get("num_threads", 1)


def adapter_folder(model, recipe):
    """Where a recipe's adapter of a model is saved, with its training log and run.json."""
    return f"{OUT}/adapters/{model}/{recipe}"


def adapter_outputs(runs=None):
    """The run.json of these (model, recipe) runs; by default every adapter: the final recipes for every model,
    the ablations' for the ablation models."""
    return [
        f"{adapter_folder(model, recipe)}/run.json"
        for model, recipe in runs or TRAINING_RUNS
    ]


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
    """The model's folder (a snapshot, or one the workflow builds) is an input of its jobs."""
    return [model_source(config, wildcards.model)]


def checkpoint_entry(wildcards):
    return {"hf_id": wildcards.hf_repo, "revision": HUB_CHECKPOINTS[wildcards.hf_repo]}


def model_resource(name, section="resources"):
    """A resource of the model's training runs (`resources`) or evaluation jobs (`eval_resources`)."""

    def resource(wildcards):
        return config["models"][wildcards.model][section].get(
            name, 1 if name == "cpus" else None
        )

    return resource


# The job functions below take the wildcards only, so that Snakemake records the resolved job as the rule's
# params and reruns the job when the config changes it (a function of input or output is not recorded).


def train_job(wildcards):
    """The resolved TrainJob of calibft.train, as JSON."""
    entry = config["models"][wildcards.model]
    job = {
        "model": model_source(config, wildcards.model),
        "tokenizer": tokenizer_source(config, entry["tokenizer"]),
        "chat": entry["chat"],
        "recipe": config["recipes"][wildcards.recipe],
        "training": config["training"],
        "seed": config["seed"],
        "protocol": PROTOCOL,
        "train_data": train_data(wildcards),
        "probe_tries": probe_tries(wildcards),
        "out_dir": adapter_folder(wildcards.model, wildcards.recipe),
        "checkpoint_dir": f"{OUT}/checkpoints/{wildcards.model}/{wildcards.recipe}",
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


def adapter_files(wildcards):
    """The adapter of a fine-tuned condition; nothing for the base model."""
    if wildcards.cond == "base":
        return []
    return f"{adapter_folder(wildcards.model, wildcards.cond)}/adapter_config.json"


def structured_tries(wildcards):
    """The logit-KL target: the split's tries of the evaluation space, for the model's tokenizer."""
    tokenizer = config["models"][wildcards.model]["tokenizer"]
    return f"results/tries/{tokenizer}/{STRUCTURED['space']}/{wildcards.eval_split}.npz"


def eval_folder(wildcards, root, evaluation, *parts):
    """{OUT}/{root}/{model}/{condition}/{evaluation}/{parts}: an evaluation's outputs (root `eval`) or the
    per-prompt checkpoints of an interrupted attempt (root `checkpoints/eval`)."""
    cond = getattr(wildcards, "cond", "base")
    return "/".join([OUT, root, wildcards.model, cond, evaluation, *parts])


def model_under_test(wildcards, settings, evaluation, *parts):
    """The fields every evaluation job shares: the model, its condition, the sampling, the output folder
    (eval_folder of the evaluation and parts)."""
    entry = config["models"][wildcards.model]
    cond = getattr(wildcards, "cond", "base")
    return {
        "model": model_source(config, wildcards.model),
        "model_key": wildcards.model,
        "tokenizer": tokenizer_source(config, entry["tokenizer"]),
        "chat": entry["chat"],
        "condition": cond,
        "adapter": (None if cond == "base" else adapter_folder(wildcards.model, cond)),
        "seed": config["seed"],
        "protocol": PROTOCOL,
        "precision": config["evaluation"]["precision"],
        "sampling": settings["sampling"],
        "out_dir": eval_folder(wildcards, "eval", evaluation, *parts),
    }


def structured_prompt_ids(split):
    """The prompts that the structured and SSOT jobs of a split sample: every one (None), or `max_prompts`
    of them and those that the qualitative figures draw."""
    drawn = [panel["prompt"] for panel in STRUCTURED["qualitative"]]
    drawn += ABLATIONS["qualitative"]["prompts"]
    return evaluated_ids(split, STRUCTURED.get("max_prompts"), drawn)


def eval_job(wildcards, evaluation, settings, **extra):
    """The resolved StructuredJob of calibft.evals.structured, as JSON."""
    split = wildcards.eval_split
    job = model_under_test(wildcards, settings, evaluation, split)
    job.update(
        evaluation=evaluation,
        split=split,
        prompt_ids=structured_prompt_ids(split),
        checkpoint_dir=eval_folder(wildcards, "checkpoints/eval", evaluation, split),
        **extra,
    )
    return json.dumps(job)


def open_ended_job(wildcards):
    """The resolved OpenEndedJob of calibft.evals.open_ended, as JSON."""
    job = model_under_test(wildcards, OPEN_ENDED, "open_ended")
    return json.dumps({**job, "prompts_file": str(open_ended_prompts(wildcards))})


def open_ended_prompts(wildcards):
    """The configured prompts file (a relative path is in the workflow's folder, as the demo's fixture), or
    the authors' file that rule open_ended_prompts downloads."""
    if OPEN_ENDED["prompts_file"] is None:
        return cache_path(OPEN_ENDED_PROMPTS, "resources")
    return os.path.join(workflow.basedir, OPEN_ENDED["prompts_file"])


def mcq_job(wildcards):
    """The resolved MCQJob of calibft.evals.mcq, as JSON."""
    return json.dumps(model_under_test(wildcards, MCQ, "mcq"))


def noveltybench_prompts(wildcards):
    """A split's prompts: the configured file (relative to the workflow's folder, as the demo's fixtures), or
    the benchmark's pinned file that rule noveltybench_prompts downloads."""
    return local_or_download(
        NOVELTYBENCH["prompts_files"],
        wildcards.nb_split,
        cache_path(NOVELTYBENCH_PROMPTS[wildcards.nb_split], "resources"),
    )


def noveltybench_generation_job(wildcards):
    """The resolved GenerationJob of calibft.evals.noveltybench_run, as JSON."""
    split = wildcards.nb_split
    job = model_under_test(wildcards, NOVELTYBENCH, "noveltybench", split)
    return json.dumps(
        {
            **job,
            "split": split,
            "prompts_file": str(noveltybench_prompts(wildcards)),
            "max_prompts": NOVELTYBENCH.get("max_prompts"),
            "checkpoint_dir": eval_folder(
                wildcards, "checkpoints/eval", "noveltybench", split
            ),
        }
    )


def evaluator_entry(wildcards):
    return EVALUATORS[wildcards.evaluator]


def evaluator_source(name):
    """Where an evaluator loads from: its download under resources/hf/, or its configured folder."""
    entry = EVALUATORS[name]
    return f"resources/hf/{name}" if "hf_id" in entry else entry["path"]


def evaluator_folders(wildcards):
    """The evaluators of the scoring jobs (downloaded, or built by the workflow like the demo's)."""
    return sorted({evaluator_source(name) for name in EVALUATORS})


def noveltybench_scoring_job(wildcards):
    """The resolved ScoringJob of calibft.evals.noveltybench_run, as JSON."""
    split = wildcards.nb_split
    out_dir = eval_folder(wildcards, "eval", "noveltybench", split)
    job = {
        "model_key": wildcards.model,
        "condition": wildcards.cond,
        "split": split,
        "generations": f"{out_dir}/generations.jsonl.gz",
        "classifier": evaluator_source("classifier"),
        "classifier_tokenizer": evaluator_source("classifier_tokenizer"),
        "reward_model": evaluator_source("reward_model"),
        "precision": config["evaluation"]["precision"],
        "out_dir": out_dir,
        "reward_batch_size": NOVELTYBENCH["reward_batch_size"],
        "protocol": PROTOCOL,
        "checkpoint_dir": eval_folder(
            wildcards, "checkpoints/eval", "noveltybench_scores", split
        ),
    }
    return json.dumps(job)


def scoring_resource(name):
    return NOVELTYBENCH["scoring_resources"].get(name, 1 if name == "cpus" else None)


def local_or_download(files, key, download):
    """A configured file (relative to the workflow's folder, as the demo's fixtures), or what a rule downloads."""
    if files is None:
        return download
    return os.path.join(workflow.basedir, files[key])


def tinybench_inputs(wildcards):
    """Every task's items (configured files, or the exports of rule tinybenchmarks_items) and the IRT file."""
    items = [
        local_or_download(
            TINYBENCH["items_files"], task, f"resources/tinybenchmarks/{task}.jsonl"
        )
        for task in TINYBENCH["tasks"]
    ]
    return {"rows": items, "params": irt_params_file()}


def tinybench_dataset(wildcards):
    """The task's dataset split (calibft.assets.HubDataset fields), at the configured revision."""
    task = TINYBENCH_TASKS[wildcards.tb_task]
    return {
        "path": task.dataset,
        "name": task.config,
        "split": task.split,
        "revision": TINYBENCH["revision"],
    }


def irt_params_file(wildcards=None):
    """The tinyBenchmarks parameters: the pinned download, a configured pickle, or the synthetic one built here."""
    source = TINYBENCH["irt_params"]
    if source is None:
        return cache_path(TINYBENCHMARKS_PARAMS, "resources")
    if "path" in source:
        return source["path"]
    return "results/irt/synthetic.pkl"


def synthetic_irt_settings(wildcards):
    return TINYBENCH["irt_params"]["synthetic"]


def tinybench_job(wildcards):
    """The resolved TinyBenchJob of calibft.evals.tinybench, as JSON: every task, then gp-IRT."""
    job = model_under_test(wildcards, {"sampling": {}}, "tinybench")
    inputs = tinybench_inputs(wildcards)
    job.update(
        tasks=dict(zip(TINYBENCH["tasks"], inputs["rows"])),
        irt_params=str(inputs["params"]),
        batch_size=TINYBENCH["batch_size"],
        max_new_tokens=TINYBENCH["max_new_tokens"],
        checkpoint_dir=eval_folder(wildcards, "checkpoints/eval", "tinybench"),
    )
    return json.dumps(job)


def paloma_files(wildcards):
    """The slices' documents, in the order of the tables."""
    return [
        local_or_download(PALOMA["slice_files"], name, f"resources/paloma/{name}.jsonl")
        for name in PALOMA["slices"]
    ]


def paloma_dataset(wildcards):
    """A PALOMA slice (calibft.assets.HubDataset fields): gated."""
    return {
        "path": "allenai/paloma",
        "name": wildcards.paloma_slice,
        "split": "test",
        "revision": PALOMA["revision"],
        "gated": True,
    }


def paloma_job(wildcards):
    """The resolved PalomaJob of calibft.evals.paloma, as JSON."""
    job = model_under_test(wildcards, {"sampling": {}}, "paloma")
    job.update(
        slices=dict(zip(PALOMA["slices"], paloma_files(wildcards))),
        window=PALOMA["window"],
        stride=PALOMA["stride"],
        batch_size=PALOMA["batch_size"],
        max_documents=PALOMA["max_documents"],
        checkpoint_dir=eval_folder(wildcards, "checkpoints/eval", "paloma"),
    )
    return json.dumps(job)


def structured_job(wildcards):
    return eval_job(
        wildcards,
        "structured",
        STRUCTURED,
        tries=structured_tries(wildcards),
        logit_kl_paths=STRUCTURED["logit_kl_paths"],
        logit_kl_batch_size=STRUCTURED["logit_kl_batch_size"],
    )


def ssot_prompts_files(wildcards):
    """protocol ssot_prompt release: the release's prompt file (configured, or downloaded by rule ssot_prompts)."""
    if PROTOCOL["ssot_prompt"] != "release":
        return []
    if SSOT["release_prompts_file"] is None:
        return [cache_path(SSOT_PROMPTS, "resources")]
    return [os.path.join(workflow.basedir, SSOT["release_prompts_file"])]


def ssot_job(wildcards):
    """The SSOT job of a model: the release's prompts and answer rules (protocol ssot_prompt release), or the
    config's instruction and answer pattern, the model's own where it has them (GPT-OSS).
    """
    model = config["models"][wildcards.model]
    if PROTOCOL["ssot_prompt"] == "release":
        prompt = {
            "release_prompts": str(ssot_prompts_files(wildcards)[0]),
            "release_style": model.get("ssot_release_style", "default"),
        }
    else:
        prompt = {
            "system": model.get("ssot_instruction", SSOT["instruction"]),
            "answer_pattern": model.get("ssot_answer_pattern", SSOT["answer_pattern"]),
        }
    return eval_job(
        wildcards,
        "ssot",
        SSOT,
        chat_overrides=model.get("ssot_chat", {}),
        **prompt,
    )


def eval_files(evaluation, name):
    """A file of every model and condition's run of an evaluation, in table order."""
    return [
        f"{OUT}/eval/{model}/{cond}/{evaluation}/{name}"
        for model, cond in structured_runs()
    ]


def structured_metrics(split):
    """metrics.json of every model and condition on one split, in the order of structured_runs."""
    return eval_files(f"structured/{split}", "metrics.json")


def ssot_metrics(split):
    return [
        f"{OUT}/eval/{model}/base/ssot/{split}/metrics.json"
        for model in config["models"]
    ]


def structured_runs():
    """[model, condition] pairs in table order: the models of the config, each with its conditions."""
    return [[model, cond] for model in config["models"] for cond in CONDITIONS]


# The SSOT tables put the baseline next to the base model and the soft-target adapter.
SSOT_CONDITIONS = [c for c in ("base", "soft") if c in CONDITIONS]


def samples_file(model, cond, split):
    evaluation = "ssot" if cond == "ssot" else "structured"
    return f"{OUT}/eval/{model}/{'base' if cond == 'ssot' else cond}/{evaluation}/{split}/samples.jsonl.gz"


def qualitative_panels(panels):
    """[model, condition, prompt] of every histogram of a qualitative figure, in drawing order: the main
    conditions of the configured panels, the SSOT comparison, or the decimals ablation's recipes.
    """
    if panels == "decimals":
        return [
            [model, recipe, prompt]
            for model in ABLATIONS["models"]
            for prompt in ABLATIONS["qualitative"]["prompts"]
            for recipe in ABLATIONS["qualitative"]["recipes"]
        ]
    if panels == "conditions":
        return [
            [panel["model"], cond, panel["prompt"]]
            for panel in STRUCTURED["qualitative"]
            for cond in CONDITIONS
        ]
    return [
        [SSOT["qualitative_model"], cond, panel["prompt"]]
        for panel in STRUCTURED["qualitative"]
        for cond in ["base", "ssot", *SSOT_CONDITIONS[1:]]
    ]


def samples_read(split, panels):
    """The samples files of a qualitative figure's panels, with the panels (and the decimals ablation's legend)."""
    drawn = qualitative_panels(panels)
    settings = {"panels": drawn}
    if panels == "decimals":
        settings["condition_titles"] = decimals_titles()
    return [samples_file(model, cond, split) for model, cond, _ in drawn], settings


def decimals_titles():
    """The legend of the decimals ablation: each recipe by its space."""
    titles = {}
    for recipe in ABLATIONS["qualitative"]["recipes"]:
        space = config["output_spaces"][config["recipes"][recipe]["space"]]
        titles[recipe] = f"d = {space['decimals']}, {space['max_bins']} bins"
    return titles


def ablation_metrics(objective, split):
    """metrics.json of every ablation model and recipe of one objective, models outer."""
    return [
        f"{OUT}/eval/{model}/{recipe}/structured/{split}/metrics.json"
        for model in ABLATIONS["models"]
        for recipe in ABLATIONS[objective]
    ]


def ablation_settings(objective):
    """What an ablation table needs of the config: its rows' settings, the final recipe, the reference."""
    recipes = {recipe: config["recipes"][recipe] for recipe in ABLATIONS[objective]}
    return {
        "objective": objective,
        "models": ABLATIONS["models"],
        "recipes": recipes,
        "spaces": {
            recipe: config["output_spaces"][entry["space"]]
            for recipe, entry in recipes.items()
        },
        "final": next(
            r for r in MAIN_RECIPES if config["recipes"][r]["objective"] == objective
        ),
        "reference": config["output_spaces"][STRUCTURED["space"]],
    }


def noveltybench_scores():
    return [
        f"{OUT}/eval/{model}/{cond}/noveltybench/{split}/scores.jsonl"
        for model, cond in structured_runs()
        for split in NOVELTYBENCH["splits"]
    ]


def noveltybench_curated_scores(wildcards=None):
    """The curated scores of the qualitative models, every condition."""
    return [
        f"{OUT}/eval/{model}/{cond}/noveltybench/curated/scores.jsonl"
        for model in NOVELTYBENCH["qualitative_models"]
        for cond in CONDITIONS
    ]


def eval_outputs():
    """Every evaluation: structured sampling, SSOT, open-ended generation, MCQ, NoveltyBench, TinyBenchmarks
    and PALOMA."""
    structured = [
        path
        for split in STRUCTURED["splits"]
        for path in structured_metrics(split) + ssot_metrics(split)
    ]
    structured += [
        path
        for split in STRUCTURED["splits"]
        for objective in ("soft", "hard")
        for path in ablation_metrics(objective, split)
        if path not in structured
    ]
    noveltybench = [
        path.replace("scores.jsonl", "summary.json") for path in noveltybench_scores()
    ]
    transfer = eval_files("open_ended", "metrics.json") + eval_files(
        "mcq", "metrics.json"
    )
    retention = eval_files("tinybench", "summary.json") + eval_files(
        "paloma", "summary.json"
    )
    return structured + transfer + noveltybench + retention


# ---------------------------------------------------------------------------------------------------------
# The paper's tables and figures (calibft.artifacts.registry): rules table and figure render one row each.

CONDITION_TITLES = {
    "base": "Base",
    **{recipe: recipe.replace("_", " ").capitalize() for recipe in config["recipes"]},
    "ssot": "SSOT",
}
MODEL_TITLES = {name: model["display"] for name, model in config["models"].items()}


def artifact_splits(row):
    return [row.split] if row.split else STRUCTURED["splits"]


# What each result set that an artifact reads gives it: (its files, the settings it adds).
ARTIFACT_READS = {
    "config": lambda row: (
        [],
        {
            "config": {
                key: config[key]
                for key in ("output_spaces", "training", "recipes", "models")
            },
            "recipes": MAIN_RECIPES,
        },
    ),
    "granularity": lambda row: (
        ["results/granularity/costs.json"],
        {"reference": evaluation_space()},
    ),
    "tokenizer": lambda row: (
        local_tokenizer(config["method_figure"]["tokenizer"]),
        {
            "method": config["method_figure"],
            "tokenizer": tokenizer_source(config, config["method_figure"]["tokenizer"]),
            "seed": config["seed"],
        },
    ),
    "train_logs": lambda row: (
        [f"{adapter_folder(m, r)}/train_log.jsonl" for m, r in MAIN_RUNS],
        {"train_runs": MAIN_RUNS},
    ),
    "structured": lambda row: (
        [p for split in artifact_splits(row) for p in structured_metrics(split)],
        {"w1_within_family": PROTOCOL["w1_per_distribution"]},
    ),
    "ssot": lambda row: (
        ssot_metrics(row.split),
        {"ssot_conditions": SSOT_CONDITIONS, "models": list(config["models"])},
    ),
    "samples": lambda row: samples_read(row.split, row.options["panels"]),
    "ablation": lambda row: (
        [
            p
            for split in STRUCTURED["splits"]
            for p in ablation_metrics(row.options["objective"], split)
        ],
        {"ablation": ablation_settings(row.options["objective"])},
    ),
    "open_ended": lambda row: (
        eval_files("open_ended", "metrics.json"),
        {
            "model_families": {
                name: model.get("family", model["display"])
                for name, model in config["models"].items()
            },
            "model_sizes": {
                name: model.get("params_b") for name, model in config["models"].items()
            },
        },
    ),
    "open_ended_samples": lambda row: (
        [
            f"{OUT}/eval/{model}/{cond}/open_ended/samples.jsonl.gz"
            for model in OPEN_ENDED["qualitative"]["models"]
            for cond in CONDITIONS
        ],
        {"qualitative": OPEN_ENDED["qualitative"], "conditions": CONDITIONS},
    ),
    "mcq": lambda row: (eval_files("mcq", "metrics.json"), {}),
    "noveltybench": lambda row: (noveltybench_scores(), {}),
    "noveltybench_cases": lambda row: (
        [out("tables/noveltybench_qualitative_cases.json")],
        {},
    ),
    "noveltybench_curated": lambda row: (noveltybench_curated_scores(), {}),
    "tinybench": lambda row: (eval_files("tinybench", "summary.json"), {}),
    "paloma": lambda row: (eval_files("paloma", "summary.json"), {}),
}


if set(ARTIFACT_READS) != set(READS):
    raise ValueError(
        f"ARTIFACT_READS gives {sorted(ARTIFACT_READS)}, the registry's READS {sorted(READS)}"
    )


def artifact_names(kind):
    """A wildcard constraint: the names of the registry's tables or figures."""
    names = [re.escape(row.name) for row in ARTIFACTS if row.kind == kind]
    names += [
        f"{re.escape(row.name)}_.+"
        for row in ARTIFACTS
        if row.kind == kind and row.chosen
    ]
    return "|".join(names)


def artifact_inputs(wildcards):
    row = artifact(wildcards.artifact)
    return {read: ARTIFACT_READS[read](row)[0] for read in row.reads}


def artifact_settings(wildcards):
    """What the artifact's renderer reads of the config: its row's split and options, the runs and titles in
    table order, and what each of its result sets adds."""
    row = artifact(wildcards.artifact)
    settings = {
        "name": wildcards.artifact,
        "split": row.split,
        "splits": STRUCTURED["splits"],
        "runs": structured_runs(),
        "model_titles": MODEL_TITLES,
        "condition_titles": CONDITION_TITLES,
        **row.options,
    }
    for read in row.reads:
        settings.update(ARTIFACT_READS[read](row)[1])
    return settings


def artifact_section(wildcards):
    return artifact(wildcards.artifact).section


def artifact_caption(wildcards):
    """The report's caption: the row's, with the artifact's label in the paper."""
    row = artifact(wildcards.artifact)
    return f"{row.caption} ({row.label})" if row.label else row.caption


def artifact_files(structured_only=False):
    """The files of every table and figure that the config renders (the target `structured`'s only)."""
    rows = planned(STRUCTURED["splits"], structured_only)
    return [out(path) for row in rows for path in row.files()]


def structured_outputs():
    """The structured-sampling part of the paper (target `structured`, what profiles/mini runs): the final
    recipes' adapters, the structured evaluations of every condition, and their tables and figures.
    """
    metrics = [
        path for split in STRUCTURED["splits"] for path in structured_metrics(split)
    ]
    return adapter_outputs(MAIN_RUNS) + metrics + artifact_files(structured_only=True)


def noveltybench_qualitative_tables(wildcards):
    """The qualitative tables, named after the cases that checkpoint noveltybench_qualitative_cases chose
    (none without the curated split or without the base, soft and hard conditions they compare).
    """
    if "curated" not in NOVELTYBENCH["splits"] or not {"base", "soft", "hard"} <= set(
        CONDITIONS
    ):
        return []
    cases = checkpoints.noveltybench_qualitative_cases.get().output[0]
    (row,) = [row for row in ARTIFACTS if row.chosen]
    names = [case["name"] for case in json.loads(open(cases).read())]
    return [out(path) for name in names for path in row.files(name)]
