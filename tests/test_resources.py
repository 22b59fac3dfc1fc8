"""What a job asks of its machine, from the config (calibft.pipeline.resources)."""

from __future__ import annotations

from calibft.pipeline.resources import job_resources, resource_value, training_launcher, trie_job_mem_mb


def test_a_resource_the_config_leaves_out_is_one_cpu_and_no_limit():
    settings = {"gpus": 4, "cpus": 16, "mem_mb": 64000}
    assert resource_value(settings, "cpus") == 16 and resource_value(settings, "gpus") == 4
    assert resource_value({}, "cpus") == 1
    assert resource_value({}, "runtime") is None and resource_value({}, "gpu_model") is None


def test_job_resources_name_the_gpus_as_snakemake_does_and_pass_the_attempt():
    settings = {"gpus": 2, "gpu_model": "a100", "mem_mb": 1000, "runtime": 60, "cpus": 8}
    resources = job_resources(lambda name: resource_value(settings, name))
    assert list(resources) == ["gpu", "gpu_model", "mem_mb", "runtime", "attempt"]
    assert [resources[key] for key in ("gpu", "gpu_model", "mem_mb", "runtime")] == [2, "a100", 1000, 60]
    assert resources["attempt"](wildcards={}, attempt=3) == 3


def test_a_training_run_on_several_gpus_is_launched_with_a_process_per_gpu():
    config = {
        "models": {
            "one": {"resources": {"gpus": 1}},
            "cpu": {"resources": {"gpus": 0}},
            "four": {"resources": {"gpus": 4}},
        }
    }
    config["training"] = {"distributed": "fsdp"}
    assert training_launcher(config, "one", "/repo") == "python"
    assert training_launcher(config, "cpu", "/repo") == "python"
    assert training_launcher(config, "four", "/repo") == (
        "accelerate launch --config_file /repo/launch/fsdp.yaml --num_processes 4"
    )


def test_a_trie_jobs_memory_grows_with_its_output_space_file():
    data = {"mem_mb": 4000, "trie_mem_mb_per_space_mb": 16}
    assert trie_job_mem_mb(data, 0) == 4000
    assert trie_job_mem_mb(data, 2**20) == 4016
    assert trie_job_mem_mb(data, 2**20 + 1) == 4017  # rounded up: a job asks for whole MB
    assert trie_job_mem_mb({"mem_mb": 4000}, 10 * 2**20) == 4000  # no growth configured
