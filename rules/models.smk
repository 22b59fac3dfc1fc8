rule build_tiny_model:
    output:
        directory("results/models/{name}"),
    log:
        "logs/models/{name}.log",
    benchmark:
        "benchmarks/results/models/{name}.tsv"
    conda:
        "../envs/calibft.yaml"
    threads: tiny_model_threads
    resources:
        mem_mb=data_resources("mem_mb"),
        runtime=data_resources("runtime"),
    params:
        settings=tiny_model_settings,
    script:
        "../workflow_scripts/build_tiny_model.py"
