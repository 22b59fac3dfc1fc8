# Downloads from pinned URLs, checked against their sha256 or git blob id (calibft.pipeline.assets) and cached under
# resources/; Hugging Face snapshots and datasets at a commit (a branch through resources/locks/), each file
# checked against it. They are local rules: on a cluster they run where Snakemake runs (a login node), which
# is where the network is.


rule open_ended_prompts:
    output:
        f"resources/{OPEN_ENDED_PROMPTS.filename}",
    log:
        "logs/assets/open_ended_prompts.log",
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        asset="OPEN_ENDED_PROMPTS",
    script:
        "../workflow_scripts/fetch_asset.py"


rule noveltybench_prompts:
    output:
        "resources/noveltybench_{nb_split}.jsonl",
    log:
        "logs/assets/noveltybench_{nb_split}.log",
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        asset="NOVELTYBENCH_PROMPTS",
        key="{nb_split}",
    script:
        "../workflow_scripts/fetch_asset.py"


rule evaluator_snapshot:
    output:
        directory("resources/hf/{evaluator}"),
    log:
        "logs/assets/hf_{evaluator}.log",
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        entry=evaluator_entry,
    script:
        "../workflow_scripts/fetch_snapshot.py"


rule checkpoint_snapshot:
    output:
        directory("resources/hf/models/{hf_repo}"),
    log:
        "logs/assets/hf_models/{hf_repo}.log",
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        entry=checkpoint_entry,
    script:
        "../workflow_scripts/fetch_snapshot.py"


rule tinybenchmarks_items:
    output:
        "resources/tinybenchmarks/{tb_task}.jsonl",
    log:
        "logs/assets/tinybenchmarks_{tb_task}.log",
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        dataset=tinybench_dataset,
    script:
        "../workflow_scripts/fetch_dataset.py"


rule paloma_slice:
    output:
        "resources/paloma/{paloma_slice}.jsonl",
    log:
        "logs/assets/paloma_{paloma_slice}.log",
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        dataset=paloma_dataset,
    script:
        "../workflow_scripts/fetch_dataset.py"


rule irt_params:
    output:
        f"resources/{TINYBENCHMARKS_PARAMS.filename}",
    log:
        "logs/assets/irt_params.log",
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        asset="TINYBENCHMARKS_PARAMS",
    script:
        "../workflow_scripts/fetch_asset.py"


rule synthetic_irt_params:
    output:
        PATTERNS.synthetic_irt_params(),
    log:
        "logs/irt/synthetic.log",
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        settings=synthetic_irt_settings,
    script:
        "../workflow_scripts/synthetic_irt_params.py"


rule ssot_prompts:
    output:
        f"resources/{SSOT_PROMPTS.filename}",
    log:
        "logs/assets/ssot_prompts.log",
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        asset="SSOT_PROMPTS",
    script:
        "../workflow_scripts/fetch_asset.py"
