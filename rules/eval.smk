# The evaluations share one way to run: `python -m RUNNER JOB` through attempt_logged (the job's output in the
# rule's log), RUNNER a module of calibft.evals and its subcommand if any (params.runner), JOB the rule's job as
# JSON (params.job), in calibft's conda environment with the threads and resources of the model's
# `eval_resources`. mcq_eval spells it out; each other evaluation uses it with its own files, runner and job.
rule mcq_eval:
    input:
        adapter=adapter_files,
        model=model_files,
    output:
        generations=eval_out("mcq", "generations.jsonl.gz"),
        metrics=eval_out("mcq", "metrics.json"),
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
        runner="calibft.evals.mcq",
        job=job_params(mcq_job),
    shell:
        attempt_logged("python -m {params.runner} {params.job:q}")


use rule mcq_eval as structured_eval with:
    input:
        tries=structured_tries,
        adapter=adapter_files,
        model=model_files,
    output:
        samples=eval_out("structured", "{eval_split}", "samples.jsonl.gz"),
        logit_kl=eval_out("structured", "{eval_split}", "logit_kl.jsonl"),
        metrics=eval_out("structured", "{eval_split}", "metrics.json"),
    log:
        run_log("eval/{model}/{cond}/structured/{eval_split}.log"),
    benchmark:
        run_benchmark("eval/{model}/{cond}/structured/{eval_split}.tsv")
    priority: 1  # its samples are what the exact pass, a long job, is set against
    params:
        runner="calibft.evals.structured",
        job=job_params(structured_job),


use rule mcq_eval as exact_eval with:
    input:
        unpack(exact_inputs),
        adapter=adapter_files,
        model=model_files,
    output:
        probabilities=eval_out("exact", "{eval_split}", "probabilities.npz"),
        metrics=eval_out("exact", "{eval_split}", "metrics.json"),
    log:
        run_log("eval/{model}/{cond}/exact/{eval_split}.log"),
    benchmark:
        run_benchmark("eval/{model}/{cond}/exact/{eval_split}.tsv")
    priority: 1  # the longest evaluations start first, and the short ones fill the slots beside them
    params:
        runner="calibft.evals.exact",
        job=job_params(exact_job),


use rule mcq_eval as ssot_eval with:
    input:
        prompts=ssot_prompts_files,
        model=model_files,
    output:
        samples=eval_out("ssot", "{eval_split}", "samples.jsonl.gz", cond="base"),
        metrics=eval_out("ssot", "{eval_split}", "metrics.json", cond="base"),
    log:
        run_log("eval/{model}/base/ssot/{eval_split}.log"),
    benchmark:
        run_benchmark("eval/{model}/base/ssot/{eval_split}.tsv")
    params:
        runner="calibft.evals.structured",
        job=job_params(ssot_job),


use rule mcq_eval as open_ended_eval with:
    input:
        prompts=open_ended_prompts,
        adapter=adapter_files,
        model=model_files,
    output:
        samples=eval_out("open_ended", "samples.jsonl.gz"),
        support=eval_out("open_ended", "support.jsonl"),
        metrics=eval_out("open_ended", "metrics.json"),
    log:
        run_log("eval/{model}/{cond}/open_ended.log"),
    benchmark:
        run_benchmark("eval/{model}/{cond}/open_ended.tsv")
    params:
        runner="calibft.evals.open_ended",
        job=job_params(open_ended_job),


use rule mcq_eval as noveltybench_generate with:
    input:
        prompts=noveltybench_prompts,
        adapter=adapter_files,
        model=model_files,
    output:
        generations=eval_out("noveltybench", "{nb_split}", "generations.jsonl.gz"),
    log:
        run_log("eval/{model}/{cond}/noveltybench/{nb_split}_generate.log"),
    benchmark:
        run_benchmark("eval/{model}/{cond}/noveltybench/{nb_split}_generate.tsv")
    params:
        runner="calibft.evals.noveltybench generate",
        job=job_params(generation_job),


# NoveltyBench's evaluators score the generations: no model under test, NoveltyBench's `scoring_resources`.
use rule mcq_eval as noveltybench_score with:
    input:
        generations=eval_out("noveltybench", "{nb_split}", "generations.jsonl.gz"),
        evaluators=evaluator_folders,
    output:
        partitions=eval_out("noveltybench", "{nb_split}", "partitions.jsonl"),
        scores=eval_out("noveltybench", "{nb_split}", "scores.jsonl"),
        summary=eval_out("noveltybench", "{nb_split}", "summary.json"),
    log:
        run_log("eval/{model}/{cond}/noveltybench/{nb_split}_score.log"),
    benchmark:
        run_benchmark("eval/{model}/{cond}/noveltybench/{nb_split}_score.tsv")
    threads: scoring_resource("cpus")
    resources:
        **SCORING_RESOURCES,
    params:
        runner="calibft.evals.noveltybench score",
        job=job_params(scoring_job),


use rule mcq_eval as tinybench_eval with:
    input:
        unpack(tinybench_inputs),
        adapter=adapter_files,
        model=model_files,
    output:
        summary=eval_out("tinybench", "summary.json"),
        scores=[
            eval_out("tinybench", task, "scores.json") for task in TINYBENCH["tasks"]
        ],
    log:
        run_log("eval/{model}/{cond}/tinybench.log"),
    benchmark:
        run_benchmark("eval/{model}/{cond}/tinybench.tsv")
    priority: 1  # as exact_eval
    params:
        runner="calibft.evals.tinybench",
        job=job_params(tinybench_job),


use rule mcq_eval as paloma_eval with:
    input:
        slices=paloma_files,
        adapter=adapter_files,
        model=model_files,
    output:
        documents=eval_out("paloma", "documents.jsonl.gz"),
        summary=eval_out("paloma", "summary.json"),
    log:
        run_log("eval/{model}/{cond}/paloma.log"),
    benchmark:
        run_benchmark("eval/{model}/{cond}/paloma.tsv")
    params:
        runner="calibft.evals.paloma",
        job=job_params(paloma_job),
