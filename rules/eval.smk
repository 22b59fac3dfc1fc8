rule structured_eval:
    input:
        tries=structured_tries,
        adapter=adapter_files,
        model=model_files,
    output:
        samples=run_out("eval/{model}/{cond}/structured/{eval_split}/samples.jsonl.gz"),
        logit_kl=run_out("eval/{model}/{cond}/structured/{eval_split}/logit_kl.jsonl"),
        metrics=run_out("eval/{model}/{cond}/structured/{eval_split}/metrics.json"),
    log:
        run_log("eval/{model}/{cond}/structured/{eval_split}.log"),
    benchmark:
        run_benchmark("eval/{model}/{cond}/structured/{eval_split}.tsv")
    priority: 1  # its samples are what the exact pass, a long job, is set against
    conda:
        "../envs/calibft.yaml"
    threads: model_resource("cpus", "eval_resources")
    resources:
        **EVAL_RESOURCES,
    params:
        job=job_params(structured_job),
    shell:
        attempt_logged("python -m calibft.evals.structured {params.job:q}")


rule exact_eval:
    input:
        unpack(exact_inputs),
        adapter=adapter_files,
        model=model_files,
    output:
        probabilities=run_out(
            "eval/{model}/{cond}/exact/{eval_split}/probabilities.npz"
        ),
        metrics=run_out("eval/{model}/{cond}/exact/{eval_split}/metrics.json"),
    log:
        run_log("eval/{model}/{cond}/exact/{eval_split}.log"),
    benchmark:
        run_benchmark("eval/{model}/{cond}/exact/{eval_split}.tsv")
    priority: 1  # the longest evaluations start first, and the short ones fill the slots beside them
    conda:
        "../envs/calibft.yaml"
    threads: model_resource("cpus", "eval_resources")
    resources:
        **EVAL_RESOURCES,
    params:
        job=job_params(exact_job),
    shell:
        attempt_logged("python -m calibft.evals.exact_structured {params.job:q}")


rule ssot_eval:
    input:
        prompts=ssot_prompts_files,
        model=model_files,
    output:
        samples=run_out("eval/{model}/base/ssot/{eval_split}/samples.jsonl.gz"),
        metrics=run_out("eval/{model}/base/ssot/{eval_split}/metrics.json"),
    log:
        run_log("eval/{model}/base/ssot/{eval_split}.log"),
    benchmark:
        run_benchmark("eval/{model}/base/ssot/{eval_split}.tsv")
    conda:
        "../envs/calibft.yaml"
    threads: model_resource("cpus", "eval_resources")
    resources:
        **EVAL_RESOURCES,
    params:
        job=job_params(ssot_job),
    shell:
        attempt_logged("python -m calibft.evals.structured {params.job:q}")


rule open_ended_eval:
    input:
        prompts=open_ended_prompts,
        adapter=adapter_files,
        model=model_files,
    output:
        samples=run_out("eval/{model}/{cond}/open_ended/samples.jsonl.gz"),
        support=run_out("eval/{model}/{cond}/open_ended/support.jsonl"),
        metrics=run_out("eval/{model}/{cond}/open_ended/metrics.json"),
    log:
        run_log("eval/{model}/{cond}/open_ended.log"),
    benchmark:
        run_benchmark("eval/{model}/{cond}/open_ended.tsv")
    conda:
        "../envs/calibft.yaml"
    threads: model_resource("cpus", "eval_resources")
    resources:
        **EVAL_RESOURCES,
    params:
        job=job_params(open_ended_job),
    shell:
        attempt_logged("python -m calibft.evals.open_ended {params.job:q}")


rule mcq_eval:
    input:
        adapter=adapter_files,
        model=model_files,
    output:
        generations=run_out("eval/{model}/{cond}/mcq/generations.jsonl.gz"),
        metrics=run_out("eval/{model}/{cond}/mcq/metrics.json"),
    log:
        run_log("eval/{model}/{cond}/mcq.log"),
    benchmark:
        run_benchmark("eval/{model}/{cond}/mcq.tsv")
    conda:
        "../envs/calibft.yaml"
    threads: model_resource("cpus", "eval_resources")
    resources:
        **EVAL_RESOURCES,
    params:
        job=job_params(mcq_job),
    shell:
        attempt_logged("python -m calibft.evals.mcq {params.job:q}")


rule noveltybench_generate:
    input:
        prompts=noveltybench_prompts,
        adapter=adapter_files,
        model=model_files,
    output:
        generations=run_out(
            "eval/{model}/{cond}/noveltybench/{nb_split}/generations.jsonl.gz"
        ),
    log:
        run_log("eval/{model}/{cond}/noveltybench/{nb_split}_generate.log"),
    benchmark:
        run_benchmark("eval/{model}/{cond}/noveltybench/{nb_split}_generate.tsv")
    conda:
        "../envs/calibft.yaml"
    threads: model_resource("cpus", "eval_resources")
    resources:
        **EVAL_RESOURCES,
    params:
        job=job_params(generation_job),
    shell:
        attempt_logged(
            "python -m calibft.evals.noveltybench_run generate {params.job:q}"
        )


rule noveltybench_score:
    input:
        generations=run_out(
            "eval/{model}/{cond}/noveltybench/{nb_split}/generations.jsonl.gz"
        ),
        evaluators=evaluator_folders,
    output:
        partitions=run_out(
            "eval/{model}/{cond}/noveltybench/{nb_split}/partitions.jsonl"
        ),
        scores=run_out("eval/{model}/{cond}/noveltybench/{nb_split}/scores.jsonl"),
        summary=run_out("eval/{model}/{cond}/noveltybench/{nb_split}/summary.json"),
    log:
        run_log("eval/{model}/{cond}/noveltybench/{nb_split}_score.log"),
    benchmark:
        run_benchmark("eval/{model}/{cond}/noveltybench/{nb_split}_score.tsv")
    conda:
        "../envs/calibft.yaml"
    threads: scoring_resource("cpus")
    resources:
        **SCORING_RESOURCES,
    params:
        job=job_params(scoring_job),
    shell:
        attempt_logged("python -m calibft.evals.noveltybench_run score {params.job:q}")


rule tinybench_eval:
    input:
        unpack(tinybench_inputs),
        adapter=adapter_files,
        model=model_files,
    output:
        summary=run_out("eval/{model}/{cond}/tinybench/summary.json"),
        scores=expand(
            run_out("eval/{model}/{cond}/tinybench/{task}/scores.json"),
            task=TINYBENCH["tasks"],
            allow_missing=True,
        ),
    log:
        run_log("eval/{model}/{cond}/tinybench.log"),
    benchmark:
        run_benchmark("eval/{model}/{cond}/tinybench.tsv")
    priority: 1  # as exact_eval
    conda:
        "../envs/calibft.yaml"
    threads: model_resource("cpus", "eval_resources")
    resources:
        **EVAL_RESOURCES,
    params:
        job=job_params(tinybench_job),
    shell:
        attempt_logged("python -m calibft.evals.tinybench {params.job:q}")


rule paloma_eval:
    input:
        slices=paloma_files,
        adapter=adapter_files,
        model=model_files,
    output:
        documents=run_out("eval/{model}/{cond}/paloma/documents.jsonl.gz"),
        summary=run_out("eval/{model}/{cond}/paloma/summary.json"),
    log:
        run_log("eval/{model}/{cond}/paloma.log"),
    benchmark:
        run_benchmark("eval/{model}/{cond}/paloma.tsv")
    conda:
        "../envs/calibft.yaml"
    threads: model_resource("cpus", "eval_resources")
    resources:
        **EVAL_RESOURCES,
    params:
        job=job_params(paloma_job),
    shell:
        attempt_logged("python -m calibft.evals.paloma {params.job:q}")
