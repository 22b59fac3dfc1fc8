"""What a job asks of the machine that runs it, from the config: the rules' `threads:` and `resources:`, the
memory of a trie job and how a training run is launched.

    scoring = config["evaluation"]["noveltybench"]["scoring_resources"]
    job_resources(lambda name: resource_value(scoring, name))
    # {"gpu": ..., "gpu_model": ..., "mem_mb": ..., "runtime": ..., "attempt": <function of the attempt>}

Importing this module does not import torch: the workflow reads it to plan.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from calibft.training.job import training_processes

# a job's `resources:` by Snakemake's names; the config calls `gpu` `gpus`
JOB_RESOURCES = ("gpu", "gpu_model", "mem_mb", "runtime")


def resource_value(settings: Mapping[str, Any], name: str) -> Any:
    """A resource of a job's settings (a model's `resources` or `eval_resources`, the scoring jobs'): its value, or
    one CPU and no limit on anything else when the config gives none."""
    return settings.get(name, 1 if name == "cpus" else None)


def job_resources(resource: Callable[[str], Any]) -> dict[str, Any]:
    """The `resources:` of a job (gpu, gpu_model, mem_mb, runtime), each `resource(name)` of the config's name for
    it (a value, or a function of the wildcards), and `attempt`: which attempt of the job it is (Snakemake's
    retries), which the job's log records."""
    resources = {key: resource("gpus" if key == "gpu" else key) for key in JOB_RESOURCES}
    return {**resources, "attempt": lambda wildcards, attempt: attempt}


def training_launcher(config: Mapping[str, Any], model: str, basedir: str) -> str:
    """What runs a model's training: `python`, one process on the CPU or one GPU; `accelerate launch` with a
    process per GPU otherwise, with the configured distributed setup (launch/{ddp,fsdp}.yaml under `basedir`)."""
    processes = training_processes(config["models"][model])
    if processes == 1:
        return "python"
    return (
        f"accelerate launch --config_file {basedir}/launch/"
        f"{config['training']['distributed']}.yaml --num_processes {processes}"
    )


def trie_job_mem_mb(data: Mapping[str, Any], space_bytes: int) -> int:
    """The memory of a trie job: the data jobs' `mem_mb` plus `trie_mem_mb_per_space_mb` per MB of the output-space
    file (`data`: the config's `resources.data`). The tries of a space take 10 to 18 times its file (measured; 5.4 GB
    at the peak for 1988 prompts at 16384 bins)."""
    per_space_mb = data.get("trie_mem_mb_per_space_mb", 0)
    return data["mem_mb"] + math.ceil(per_space_mb * space_bytes / 2**20)
