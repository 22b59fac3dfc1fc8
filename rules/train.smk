rule train:
    input:
        data=train_data,
        probe=probe_tries,
        model=model_files,
    output:
        adapter=multiext(
            run_out("adapters/{model}/{recipe}/"),
            "adapter_config.json",
            "adapter_model.safetensors",
        ),
        log=run_out("adapters/{model}/{recipe}/train_log.jsonl"),
        run=run_out("adapters/{model}/{recipe}/run.json"),
    log:
        run_log("train/{model}/{recipe}.log"),
    benchmark:
        run_benchmark("train/{model}/{recipe}.tsv")
    priority: 2  # before the evaluations: most of them read an adapter
    conda:
        "../envs/calibft.yaml"
    threads: model_resource("cpus")
    resources:
        **TRAIN_RESOURCES,
    params:
        job=job_params(train_job),
        launcher=train_launcher,
    shell:
        attempt_logged("{params.launcher} -m calibft.training.train {params.job:q}")
