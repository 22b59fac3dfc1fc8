import json
import math
import os
import re
import sys
from dataclasses import asdict
from pathlib import Path

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
# kernels of every x86-64 CPU, whatever the node (calibft.core.cpu). None of these modules imports torch.
from calibft.artifacts import inputs  # noqa: E402
from calibft.artifacts.registry import ARTIFACTS, artifact, planned  # noqa: E402
from calibft.pipeline.assets import (  # noqa: E402
    NOVELTYBENCH_PROMPTS,
    OPEN_ENDED_PROMPTS,
    SSOT_PROMPTS,
    TINYBENCHMARKS_PARAMS,
)
from calibft.pipeline.config import (  # noqa: E402
    base_of,
    check_config,
    hub_checkpoints,
    resolved,
    tokenizer_source,
    validate_config,
)
from calibft.evals.tinybench.tasks import TINYBENCH_TASKS  # noqa: E402
from calibft.data.grid import SPLITS  # noqa: E402
from calibft.pipeline.jobs import (  # noqa: E402
    exact_job,
    generation_job,
    mcq_job,
    open_ended_job,
    paloma_job,
    scoring_job,
    ssot_job,
    structured_job,
    tinybench_job,
    train_job,
)
from calibft.training.job import training_processes  # noqa: E402
from calibft.pipeline.layout import Layout  # noqa: E402
from calibft.core.protocol import protocol_name  # noqa: E402
from calibft.artifacts.reference import compared_rows, read_csv_file  # noqa: E402
from calibft.pipeline.slurm_states import watch_ended_jobs  # noqa: E402

# The slurm executor plugin would wait forever on a job that was cancelled, or preempted and not requeued: such a
# job is reported as failed instead, so that Snakemake resubmits it (`retries`) or stops with what happened.
watch_ended_jobs()

# A cluster job gets the --configfiles of the main process but not --replace-workflow-config, so it would read
# config.yaml under a configuration that the main process read alone (see the Snakefile). A configuration that
# names a base is standalone through it, but the option would discard the base as it discards config.yaml.
if workflow.config_settings.replace_workflow_config and not config.get(
    "standalone", False
):
    raise ValueError(
        "--replace-workflow-config is not passed on to cluster jobs, which would then read config.yaml under "
        f"{' and '.join(map(str, workflow.overwrite_configfiles))}: put `standalone: true` in a configuration "
        "that replaces config.yaml, and drop the option"
    )
# Snakemake skips a configfile that does not exist when --configfiles are given: the base that a configuration
# names must be there, and be a whole configuration.
if "base" in config and not config.get("standalone", False):
    _base = os.path.join(workflow.basedir, config["base"])
    raise ValueError(
        f"{' and '.join(map(str, workflow.overwrite_configfiles))}: base {config['base']!r} "
        + (
            "is no whole configuration: put `standalone: true` in it"
            if os.path.isfile(_base)
            else f"does not exist (looked for {_base})"
        )
    )
# a configuration over a base, its keys in one order whichever file holds them, and each model with what its
# family shares (model_families): calibft.pipeline.config.resolved. A config that does not match the schema
# stops here, before any job, naming the file, the key and the fix.
_resolved = resolved(config, base_of(config))
config.clear()
config.update(_resolved)
validate_config(
    config,
    os.path.join(workflow.basedir, "schemas", "config.schema.yaml"),
    " and ".join(map(str, workflow.configfiles)) or "the config",
)
check_config(config)

# ---------------------------------------------------------------------------------------------------------
# Where things go (calibft.pipeline.layout). Adapters, evaluations, tables and figures of a protocol (calibft.core.protocol)
# go under its own root (`results/` for release), its logs under logs/ or logs/protocols/{name}/; the data
# layer is shared. Every checkpoint and tokenizer given by a Hugging Face id, with its revision, is
# snapshotted once under resources/hf/models/ (rule checkpoint_snapshot) and every job loads it from there.
LAYOUT = Layout(config, workflow.basedir)
HUB_CHECKPOINTS = hub_checkpoints(config)
_LOGS = (
    "logs"
    if LAYOUT.root == "results"
    else f"logs/protocols/{protocol_name(config['protocol'])}"
)


# With several seeds, each seed's training runs and evaluations go under seeds/{seed}/ of the results and of
# the logs; the tables show the mean and spread over seeds (calibft.artifacts.seed_tables).
SEEDED = "" if len(LAYOUT.seeds) == 1 else "seeds/{seed}/"


def out(path):
    """A result of the protocol: results/{path}, or results/protocols/{name}/{path}."""
    return LAYOUT.out(path)


def run_out(path):
    """A result of one seed's runs (adapters, evaluations): `out(path)`, under seeds/{seed}/ with several."""
    return out(SEEDED + path)


def out_log(path):
    return f"{_LOGS}/{path}"


def run_log(path):
    return out_log(SEEDED + path)


def out_benchmark(path):
    """Snakemake's timing of a heavy job (`benchmark:`), beside the logs."""
    return f"{_LOGS}/benchmarks/{path}"


def run_benchmark(path):
    return out_benchmark(SEEDED + path)


def run_layout(wildcards):
    """The layout of the seed in a job's wildcards; LAYOUT where the config has one seed (no seed wildcard)."""
    seed = dict(wildcards.items()).get("seed")
    return LAYOUT if seed is None else LAYOUT.seeded(int(seed))


CONDITIONS = LAYOUT.conditions
STRUCTURED = config["evaluation"]["structured"]
NOVELTYBENCH = config["evaluation"]["noveltybench"]
EVALUATORS = NOVELTYBENCH["evaluators"]
TINYBENCH = config["evaluation"]["tinybenchmarks"]
PALOMA = config["evaluation"]["paloma"]
GRANULARITY = config["grid_granularity"]


wildcard_constraints:
    seed="|".join(map(str, LAYOUT.seeds)),
    split="|".join(SPLITS),
    space="|".join(config["output_spaces"]),
    tokenizer="|".join(config["tokenizers"]),
    name="|".join(config["tiny_models"]) or "(?!)",
    packaged_model="|".join(config.get("packaged_models", [])) or "(?!)",
    hf_repo="|".join(re.escape(repo) for repo in HUB_CHECKPOINTS) or "(?!)",
    packaged_tokenizer="|".join(config.get("packaged_tokenizers", [])) or "(?!)",
    model="|".join(config["models"]),
    recipe="|".join(config["recipes"]),
    cond="|".join(CONDITIONS + LAYOUT.ablation_recipes),
    eval_split="|".join(STRUCTURED["splits"]),
    metric="w1|kl",
    nb_split="|".join(NOVELTYBENCH["splits"]),
    evaluator="|".join(EVALUATORS),
    tb_task="|".join(TINYBENCH_TASKS),
    paloma_slice="|".join(re.escape(name) for name in PALOMA["slices"]),


# ---------------------------------------------------------------------------------------------------------
# The data layer: prompts, output spaces, tries (rules/data.smk) and the models the workflow builds
# (rules/models.smk).


def data_outputs():
    """Every artifact of the data layer: prompts, output spaces and tries."""
    prompts = [LAYOUT.prompts(split) for split in SPLITS]
    spaces = [
        LAYOUT.space(space, split)
        for space, settings in config["output_spaces"].items()
        for split in settings["splits"]
    ]
    tries = [
        LAYOUT.tries(tokenizer, space, split)
        for space, splits in config["tries"].items()
        for split in splits
        for tokenizer in LAYOUT.trie_tokenizers(space, split)
    ]
    return prompts + spaces + tries


def space_settings(wildcards):
    settings = config["output_spaces"][wildcards.space]
    return {"decimals": settings["decimals"], "max_bins": settings["max_bins"]}


def tokenizer_files(wildcards):
    """The tokenizer's folder (a snapshot, or one the workflow builds) is an input of the rules that use it."""
    return [LAYOUT.tokenizer_source(wildcards.tokenizer)]


def tokenizer_name_or_path(wildcards):
    return LAYOUT.tokenizer_source(wildcards.tokenizer)


def granularity_prompts(wildcards):
    return [LAYOUT.prompts(split) for split in GRANULARITY["splits"]]


def granularity_tokenizer_files(wildcards):
    return [LAYOUT.tokenizer_source(GRANULARITY["tokenizer"])]


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


def checkpoint_entry(wildcards):
    return {"hf_id": wildcards.hf_repo, "revision": HUB_CHECKPOINTS[wildcards.hf_repo]}


# ---------------------------------------------------------------------------------------------------------
# Training (rules/train.smk) and the jobs of every stage.


def job_params(build):
    """A rule's `job` param: the job that `build` (a builder of calibft.pipeline.jobs) makes of the config and
    the wildcards, as JSON. A function of the wildcards only, so that Snakemake records the resolved job
    and reruns the job when the config changes it (a function of input or output is not recorded).
    """

    def job(wildcards):
        named = {key: value for key, value in wildcards.items() if key != "seed"}
        return json.dumps(asdict(build(run_layout(wildcards), **named)))

    return job


def adapter_outputs(runs=None):
    """The run.json of these (model, recipe) runs of every seed; by default every adapter."""
    runs = runs or LAYOUT.training_runs
    return [
        f"{layout.adapter_folder(model, recipe)}/run.json"
        for layout in LAYOUT.per_seed()
        for model, recipe in runs
    ]


def train_data(wildcards):
    return LAYOUT.train_data(wildcards.model, wildcards.recipe)


def probe_tries(wildcards):
    return LAYOUT.probe_tries(wildcards.model)


def model_files(wildcards):
    """The model's folder (a snapshot, or one the workflow builds) is an input of its jobs."""
    return [LAYOUT.model_source(wildcards.model)]


def model_resource(name, section="resources"):
    """A resource of the model's training runs (`resources`) or evaluation jobs (`eval_resources`)."""

    def resource(wildcards):
        return config["models"][wildcards.model][section].get(
            name, 1 if name == "cpus" else None
        )

    return resource


def job_resources(resource):
    """The `resources:` of a job (gpu, gpu_model, mem_mb, runtime) by the config's names for them, and which
    attempt of the job it is (for `attempt_logged`)."""
    keys = ["gpu", "gpu_model", "mem_mb", "runtime"]
    resources = {key: resource("gpus" if key == "gpu" else key) for key in keys}
    return {**resources, "attempt": lambda wildcards, attempt: attempt}


def attempt_logged(command):
    """The shell command of a GPU job, its output in the rule's log through `python -m calibft.runlog`, so that the
    log keeps every attempt of the job (Snakemake's retries, Slurm's requeues), which Snakemake would otherwise
    empty before each. The rule's resources come from `job_resources`."""
    return f"python -m calibft.runlog {{log}} {{resources.attempt}} {command}"


def scoring_resource(name):
    return NOVELTYBENCH["scoring_resources"].get(name, 1 if name == "cpus" else None)


TRAIN_RESOURCES = job_resources(model_resource)
# Every job that loads the model under test: the model's `eval_resources`.
EVAL_RESOURCES = job_resources(lambda name: model_resource(name, "eval_resources"))
SCORING_RESOURCES = job_resources(scoring_resource)


def train_launcher(wildcards):
    """One process on the CPU or one GPU; `accelerate launch` with a process per GPU otherwise."""
    processes = training_processes(config["models"][wildcards.model])
    if processes == 1:
        return "python"
    return (
        f"accelerate launch --config_file {workflow.basedir}/launch/"
        f"{config['training']['distributed']}.yaml --num_processes {processes}"
    )


# ---------------------------------------------------------------------------------------------------------
# Evaluations (rules/eval.smk, their downloads in rules/assets.smk).


def adapter_files(wildcards):
    """The adapter of a fine-tuned condition; nothing for the base model."""
    if wildcards.cond == "base":
        return []
    folder = run_layout(wildcards).adapter_folder(wildcards.model, wildcards.cond)
    return f"{folder}/adapter_config.json"


def structured_tries(wildcards):
    return LAYOUT.structured_tries(wildcards.model, wildcards.eval_split)


def exact_inputs(wildcards):
    """The files its job reads: the split's tries and space, and the structured samples it is set against."""
    job = exact_job(
        run_layout(wildcards), wildcards.model, wildcards.cond, wildcards.eval_split
    )
    return {"tries": job.tries, "space": job.space, "samples": job.samples}


def ssot_prompts_files(wildcards):
    """The release's SSOT prompt file under `ssot_prompt: release`; nothing otherwise."""
    path = LAYOUT.ssot_release_prompts()
    return [] if path is None else [path]


def open_ended_prompts(wildcards):
    return LAYOUT.open_ended_prompts()


def noveltybench_prompts(wildcards):
    return LAYOUT.noveltybench_prompts(wildcards.nb_split)


def evaluator_entry(wildcards):
    return EVALUATORS[wildcards.evaluator]


def evaluator_folders(wildcards):
    """The evaluators of the scoring jobs (downloaded, or built by the workflow like the demo's)."""
    return sorted({LAYOUT.evaluator(name) for name in EVALUATORS})


def tinybench_inputs(wildcards):
    """Every task's items (configured files, or the exports of rule tinybenchmarks_items) and the IRT file."""
    return {
        "rows": list(LAYOUT.tinybench_items().values()),
        "params": LAYOUT.irt_params(),
    }


def tinybench_dataset(wildcards):
    """The task's dataset split (calibft.pipeline.assets.HubDataset fields), at the configured revision."""
    task = TINYBENCH_TASKS[wildcards.tb_task]
    return {
        "path": task.dataset,
        "name": task.config,
        "split": task.split,
        "revision": TINYBENCH["revision"],
    }


def synthetic_irt_settings(wildcards):
    return TINYBENCH["irt_params"]["synthetic"]


def paloma_files(wildcards):
    return list(LAYOUT.paloma_slices().values())


def paloma_dataset(wildcards):
    """A PALOMA slice (calibft.pipeline.assets.HubDataset fields): gated."""
    return {
        "path": "allenai/paloma",
        "name": wildcards.paloma_slice,
        "split": "test",
        "revision": PALOMA["revision"],
        "gated": True,
    }


def eval_outputs():
    """Every evaluation of every seed: structured sampling, its exact counterpart, SSOT, open-ended generation,
    MCQ, NoveltyBench, TinyBenchmarks and PALOMA."""
    return [path for layout in LAYOUT.per_seed() for path in seed_eval_outputs(layout)]


def seed_eval_outputs(layout):
    """The evaluations of one seed's layout."""
    structured = [
        path
        for split in STRUCTURED["splits"]
        for path in layout.structured_metrics(split)
        + layout.exact_metrics(split)
        + layout.ssot_metrics(split)
    ]
    structured += [
        path
        for split in STRUCTURED["splits"]
        for objective in ("soft", "hard")
        for path in layout.ablation_metrics(objective, split)
        if path not in structured
    ]
    noveltybench = [
        path.replace("scores.jsonl", "summary.json")
        for path in layout.noveltybench_scores()
    ]
    files = [
        ("open_ended", "metrics.json"),
        ("mcq", "metrics.json"),
        ("tinybench", "summary.json"),
        ("paloma", "summary.json"),
    ]
    others = [path for name in files for path in layout.eval_files(*name)]
    return structured + noveltybench + others


# ---------------------------------------------------------------------------------------------------------
# The paper's tables and figures (calibft.artifacts.registry): rules table and figure render one row each,
# reading what calibft.pipeline.artifact_inputs gives it.


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
    return inputs.artifact_inputs(LAYOUT, wildcards.artifact)


def artifact_settings(wildcards):
    return inputs.artifact_settings(LAYOUT, wildcards.artifact)


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
        path
        for layout in LAYOUT.per_seed()
        for split in STRUCTURED["splits"]
        for path in layout.structured_metrics(split)
    ]
    adapters = adapter_outputs(LAYOUT.main_runs)
    return adapters + metrics + artifact_files(structured_only=True)


# The reproduction report (calibft.artifacts.reproduction): each compared table against the configured reference.
REFERENCE = LAYOUT.workflow_file(config["reproduction"]["reference"])
REFERENCE_CELLS = read_csv_file(REFERENCE)
REPRODUCED = compared_rows(planned(STRUCTURED["splits"]), REFERENCE_CELLS)


def reproduction_files():
    names = [row.name for row in REPRODUCED] + ["reproduction", "compute"]
    return [out(f"reproduction/{name}.csv") for name in names]


def noveltybench_curated_scores(wildcards):
    """The first seed's: a qualitative table shows one run's generations."""
    return LAYOUT.per_seed()[0].noveltybench_curated_scores()


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
    names = [case["name"] for case in json.loads(Path(cases).read_text())]
    return [out(path) for name in names for path in row.files(name)]
