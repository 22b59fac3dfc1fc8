# Calibration Fine-Tuning: the reproducible pipeline of
# "Probabilistic Calibration Is a Trainable Capability in Language Models".
#
#   snakemake --profile profiles/demo            # the whole DAG on a laptop CPU, tiny model
#   snakemake --profile profiles/slurm all       # the paper on a SLURM cluster with A100 nodes
#   snakemake --profile profiles/mini structured # its structured-sampling part, two real small models, CPU

import os

from snakemake.utils import min_version

min_version("9.0")  # as pyproject.toml's `workflow` extra


# config.yaml is the paper's configuration. A file given with --configfile extends it, or the base that the file
# names with `base:`, a path in this repository (the demo, smoke and mini configurations name profiles/cpu.yaml):
# the --configfiles win, a mapping key by key. A base is a whole configuration of its own (`standalone: true`, as
# profiles/cpu.yaml is), which replaces config.yaml. The configuration says so itself, so that a cluster job, which
# Snakemake starts with the --configfiles but without --replace-workflow-config, reads the same configuration as
# the main process.
if not config.get("standalone", False):

    configfile: os.path.join(workflow.basedir, config["base"]) if "base" in config else "config.yaml"


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/models.smk"
include: "rules/assets.smk"
include: "rules/data.smk"
include: "rules/train.smk"
include: "rules/eval.smk"
include: "rules/tables.smk"
include: "rules/reproduction.smk"


rule all:
    default_target: True
    input:
        data_outputs(LAYOUT),
        adapter_outputs(LAYOUT),
        eval_outputs(LAYOUT),
        artifact_files(LAYOUT),
        noveltybench_qualitative_tables,
        reproduction_files(LAYOUT, REPRODUCED),
    localrule: True


rule data:
    input:
        data_outputs(LAYOUT),
    localrule: True


rule adapters:
    input:
        adapter_outputs(LAYOUT),
    localrule: True


rule evaluations:
    input:
        eval_outputs(LAYOUT),
    localrule: True


rule structured:
    input:
        structured_outputs(LAYOUT),
    localrule: True


rule tables:
    input:
        artifact_files(LAYOUT),
        noveltybench_qualitative_tables,
    localrule: True


rule reproduce:
    input:
        reproduction_files(LAYOUT, REPRODUCED),
    localrule: True
