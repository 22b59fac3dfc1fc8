rule train:
    input:
        data=train_data,
        probe=probe_tries,
        model=model_files,
    output:
        adapter=[
            PATTERNS.adapter_file("{model}", "{recipe}", "adapter_config.json"),
            PATTERNS.adapter_file("{model}", "{recipe}", "adapter_model.safetensors"),
        ],
        log=PATTERNS.adapter_file("{model}", "{recipe}", "train_log.jsonl"),
        run=PATTERNS.adapter_file("{model}", "{recipe}", "run.json"),
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
