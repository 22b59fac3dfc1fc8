import json
import os
import re
import sys
from dataclasses import asdict

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
from calibft.pipeline import artifact_inputs as inputs  # noqa: E402
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
    check_standalone,
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
from calibft.pipeline.layout import Layout  # noqa: E402
from calibft.pipeline.resources import (  # noqa: E402
    job_resources,
    resource_value,
    training_launcher,
    trie_job_mem_mb,
)
from calibft.pipeline.targets import (  # noqa: E402
    adapter_outputs,
    artifact_files,
    data_outputs,
    eval_outputs,
    plans_qualitative_tables,
    qualitative_tables,
    reproduction_files,
    structured_outputs,
)
from calibft.core.protocol import protocol_name  # noqa: E402
from calibft.artifacts.reference import compared_rows, read_csv_file  # noqa: E402
from calibft.pipeline.slurm_states import watch_ended_jobs  # noqa: E402

# The slurm executor plugin would wait forever on a job that was cancelled, or preempted and not requeued: such a
# job is reported as failed instead, so that Snakemake resubmits it (`retries`) or stops with what happened.
watch_ended_jobs()

# A cluster job gets the --configfiles of the main process but not --replace-workflow-config, so it would read
# config.yaml under a configuration that the main process read alone (see the Snakefile). A configuration that
# names a base is standalone through it, but the option would discard the base as it discards config.yaml.
# Snakemake skips a configfile that does not exist when --configfiles are given: the base that a configuration
# names must be there, and be a whole configuration.
check_standalone(
    config,
    workflow.config_settings.replace_workflow_config,
    workflow.overwrite_configfiles,
    workflow.basedir,
)
# a configuration over a base, its keys in one order whichever file holds them, and each model with what its
# family shares (model_families): calibft.pipeline.config.resolved. A config that does not match the schema
# stops here, before any job, naming the file, the key and the fix.
_resolved = resolved(config, base_of(config, workflow.basedir))
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
# The rules' inputs and outputs: LAYOUT's paths of the wildcards, e.g. PATTERNS.prompts("{split}").
PATTERNS = LAYOUT.pattern()


# With several seeds, each seed's training runs and evaluations go under seeds/{seed}/ of the results and of
# the logs (Layout.seed_folder); the tables show the mean and spread over seeds (calibft.artifacts.seed_tables).
# SEEDED: the seed's folder of the logs, "" with one seed.
SEEDED = os.path.join(PATTERNS.seed_folder, "")


def eval_out(evaluation, *path, cond="{cond}"):
    """A file of the evaluation of the job's model and condition (Layout.eval_file)."""
    return PATTERNS.eval_file("{model}", cond, evaluation, *path)


def out_log(path):
    return f"{LAYOUT.logs}/{path}"


def run_log(path):
    return out_log(SEEDED + path)


def out_benchmark(path):
    """Snakemake's timing of a heavy job (`benchmark:`), beside the logs."""
    return f"{LAYOUT.logs}/benchmarks/{path}"


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
    """A trie job's memory grows with its output-space file: unknown (<TBD>) until the space exists."""
    return trie_job_mem_mb(config["resources"]["data"], os.path.getsize(input.space))


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
        return resource_value(config["models"][wildcards.model][section], name)

    return resource


def attempt_logged(command):
    """The shell command of a GPU job, its output in the rule's log through `python -m calibft.core.runlog`, so that the
    log keeps every attempt of the job (Snakemake's retries, Slurm's requeues), which Snakemake would otherwise
    empty before each, and so that a copy of the job that a restarted Snakemake submits while the first still
    runs waits for it and adopts its outputs instead of writing beside it. The rule's resources come from
    `job_resources`."""
    return f"python -m calibft.core.runlog {{log}} {{resources.attempt}} --outputs {{output:q}} -- {command}"


def scoring_resource(name):
    return resource_value(NOVELTYBENCH["scoring_resources"], name)


TRAIN_RESOURCES = job_resources(model_resource)
# Every job that loads the model under test: the model's `eval_resources`.
EVAL_RESOURCES = job_resources(lambda name: model_resource(name, "eval_resources"))
SCORING_RESOURCES = job_resources(scoring_resource)


def train_launcher(wildcards):
    return training_launcher(config, wildcards.model, workflow.basedir)


# ---------------------------------------------------------------------------------------------------------
# Evaluations (rules/eval.smk, their downloads in rules/assets.smk).


def adapter_files(wildcards):
    """The adapter of a fine-tuned condition; nothing for the base model."""
    if wildcards.cond == "base":
        return []
    layout = run_layout(wildcards)
    return layout.adapter_file(wildcards.model, wildcards.cond, "adapter_config.json")


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
    return LAYOUT.tinybench_dataset(wildcards.tb_task)


def synthetic_irt_settings(wildcards):
    return TINYBENCH["irt_params"]["synthetic"]


def paloma_files(wildcards):
    return list(LAYOUT.paloma_slices().values())


def paloma_dataset(wildcards):
    return LAYOUT.paloma_dataset(wildcards.paloma_slice)


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


# The reproduction report (calibft.artifacts.reproduction): each compared table against the configured reference.
REFERENCE = LAYOUT.workflow_file(config["reproduction"]["reference"])
REFERENCE_CELLS = read_csv_file(REFERENCE)
REPRODUCED = compared_rows(planned(STRUCTURED["splits"]), REFERENCE_CELLS)


def noveltybench_curated_scores(wildcards):
    """The first seed's: a qualitative table shows one run's generations."""
    return LAYOUT.per_seed()[0].noveltybench_curated_scores()


def noveltybench_qualitative_tables(wildcards):
    """The qualitative tables, named after the cases that checkpoint noveltybench_qualitative_cases chose
    (none without the curated split or without the base, soft and hard conditions they compare).
    """
    if not plans_qualitative_tables(LAYOUT):
        return []
    cases = checkpoints.noveltybench_qualitative_cases.get().output[0]
    return qualitative_tables(LAYOUT, cases)
