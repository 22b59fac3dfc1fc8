rule prompts:
    output:
        "results/prompts/{split}.jsonl",
    log:
        "logs/prompts/{split}.log",
    localrule: True
    conda:
        "../envs/calibft.yaml"
    script:
        "../workflow_scripts/prompts.py"


rule output_space:
    input:
        "results/prompts/{split}.jsonl",
    output:
        "results/output_spaces/{space}/{split}.npz",
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
        space="results/output_spaces/{space}/{split}.npz",
        tokenizer=tokenizer_files,
    output:
        "results/tries/{tokenizer}/{space}/{split}.npz",
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
        "results/granularity/costs.json",
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
