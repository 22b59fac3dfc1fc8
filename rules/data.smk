rule prompts:
    output:
        PATTERNS.prompts("{split}"),
    log:
        "logs/prompts/{split}.log",
    localrule: True
    conda:
        "../envs/calibft.yaml"
    script:
        "../workflow_scripts/prompts.py"


rule output_space:
    input:
        PATTERNS.prompts("{split}"),
    output:
        PATTERNS.space("{space}", "{split}"),
    log:
        "logs/output_spaces/{space}/{split}.log",
    benchmark:
        "logs/benchmarks/output_spaces/{space}/{split}.tsv"
    conda:
        "../envs/calibft.yaml"
    threads: data_resources("threads")
    resources:
        mem_mb=data_resources("mem_mb"),
        runtime=data_resources("runtime"),
    params:
        settings=space_settings,
    script:
        "../workflow_scripts/output_space.py"


rule trie:
    input:
        space=PATTERNS.space("{space}", "{split}"),
        tokenizer=tokenizer_files,
    output:
        PATTERNS.tries("{tokenizer}", "{space}", "{split}"),
    log:
        "logs/tries/{tokenizer}/{space}/{split}.log",
    benchmark:
        "logs/benchmarks/tries/{tokenizer}/{space}/{split}.tsv"
    conda:
        "../envs/calibft.yaml"
    threads: data_resources("threads")
    resources:
        mem_mb=trie_mem_mb,
        runtime=data_resources("runtime"),
    params:
        tokenizer=tokenizer_name_or_path,
    script:
        "../workflow_scripts/trie.py"


rule grid_granularity:
    input:
        prompts=granularity_prompts,
        tokenizer=granularity_tokenizer_files,
    output:
        PATTERNS.granularity_costs(),
    log:
        "logs/granularity/costs.log",
    benchmark:
        "logs/benchmarks/granularity/costs.tsv"
    conda:
        "../envs/calibft.yaml"
    threads: data_resources("threads")
    resources:
        mem_mb=data_resources("mem_mb"),
        runtime=data_resources("runtime"),
    params:
        settings=GRANULARITY,
        tokenizer=tokenizer_source(config, GRANULARITY["tokenizer"]),
    script:
        "../workflow_scripts/grid_granularity.py"
