rule train:
    input:
        data=train_data,
        probe=probe_tries,
        model=model_files,
    output:
        adapter=multiext(
            out("adapters/{model}/{recipe}/"),
            "adapter_config.json",
            "adapter_model.safetensors",
        ),
        log=out("adapters/{model}/{recipe}/train_log.jsonl"),
        run=out("adapters/{model}/{recipe}/run.json"),
    log:
        out_log("train/{model}/{recipe}.log"),
    benchmark:
        out_benchmark("train/{model}/{recipe}.tsv")
    conda:
        "../envs/calibft.yaml"
    threads: model_resource("cpus")
    resources:
        **TRAIN_RESOURCES,
    params:
        job=job_params(TrainJob.from_config),
        launcher=train_launcher,
    shell:
        "{params.launcher} -m calibft.train {params.job:q} > {log} 2>&1"
