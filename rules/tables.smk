rule config_tables:
    output:
        report(
            expand(
                out("tables/{table}.{ext}"),
                table=CONFIG_TABLES,
                ext=["tex", "csv", "md"],
            ),
            category="Tables",
            subcategory="Configuration",
            caption="../report/caption.rst",
        ),
    log:
        out_log("tables/config_tables.log"),
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        caption=CAPTIONS["config_tables"],
        config=config_table_settings,
        recipes=MAIN_RECIPES,
    script:
        "../workflow_scripts/config_tables.py"


rule grid_granularity_table:
    input:
        "results/granularity/costs.json",
    output:
        report(
            expand(out("tables/grid_granularity.{ext}"), ext=["tex", "csv", "md"]),
            category="Tables",
            subcategory="Data",
            caption="../report/caption.rst",
        ),
    log:
        out_log("tables/grid_granularity.log"),
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        caption=report_caption,
        reference=evaluation_space,
    script:
        "../workflow_scripts/grid_granularity_table.py"


rule method_figure:
    input:
        tokenizer=method_tokenizer_files,
    output:
        pdf=report(
            out("figures/method.pdf"),
            category="Figures",
            subcategory="Method",
            caption="../report/caption.rst",
        ),
        png=out("figures/method.png"),
    log:
        out_log("figures/method.log"),
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        caption=report_caption,
        settings=config["method_figure"],
        tokenizer=tokenizer_source(config, config["method_figure"]["tokenizer"]),
        seed=config["seed"],
    script:
        "../workflow_scripts/method_figure.py"


rule training_curves:
    input:
        expand(
            out("adapters/{run}/train_log.jsonl"),
            run=[f"{model}/{recipe}" for model, recipe in MAIN_RUNS],
        ),
    output:
        pdf=report(
            out("figures/training_curves.pdf"),
            category="Figures",
            subcategory="Training",
            caption="../report/caption.rst",
        ),
        png=out("figures/training_curves.png"),
    log:
        out_log("figures/training_curves.log"),
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        caption=report_caption,
        runs=MAIN_RUNS,
        titles={name: model["display"] for name, model in config["models"].items()},
    script:
        "../workflow_scripts/training_curves.py"


rule structured_table:
    input:
        split_metrics,
    output:
        report(
            multiext(out("tables/main_{eval_split}"), ".tex", ".csv", ".md"),
            category="Tables",
            subcategory="Structured sampling",
            caption="../report/caption.rst",
        ),
    log:
        out_log("tables/main_{eval_split}.log"),
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        caption=report_caption,
        kind="structured_table",
        split="{eval_split}",
        runs=structured_runs(),
        model_titles=MODEL_TITLES,
        condition_titles=CONDITION_TITLES,
    script:
        "../workflow_scripts/structured_report.py"


rule ssot_table:
    input:
        unpack(ssot_table_inputs),
    output:
        report(
            multiext(
                out("tables/ssot_structured_{eval_split}"), ".tex", ".csv", ".md"
            ),
            category="Tables",
            subcategory="Structured sampling",
            caption="../report/caption.rst",
        ),
    log:
        out_log("tables/ssot_structured_{eval_split}.log"),
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        caption=report_caption,
        kind="ssot_table",
        split="{eval_split}",
        runs=structured_runs(SSOT_CONDITIONS),
        models=list(config["models"]),
        conditions=SSOT_CONDITIONS,
        model_titles=MODEL_TITLES,
        condition_titles=CONDITION_TITLES,
    script:
        "../workflow_scripts/structured_report.py"


rule structured_sampling_figure:
    input:
        unpack(figure_metrics),
    output:
        pdf=report(
            out("figures/main_structured_sampling.pdf"),
            category="Figures",
            subcategory="Structured sampling",
            caption="../report/caption.rst",
        ),
        png=out("figures/main_structured_sampling.png"),
    log:
        out_log("figures/main_structured_sampling.log"),
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        caption=report_caption,
        kind="structured_sampling_figure",
        splits=STRUCTURED["splits"],
        runs={split: structured_runs() for split in STRUCTURED["splits"]},
        model_titles=MODEL_TITLES,
        condition_titles=CONDITION_TITLES,
    script:
        "../workflow_scripts/structured_report.py"


rule per_distribution_figure:
    input:
        split_metrics,
    output:
        pdf=report(
            out("figures/appendix_{eval_split}_{metric}_per_dist.pdf"),
            category="Figures",
            subcategory="Structured sampling",
            caption="../report/caption.rst",
        ),
        png=out("figures/appendix_{eval_split}_{metric}_per_dist.png"),
    log:
        out_log("figures/appendix_{eval_split}_{metric}_per_dist.log"),
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        caption=report_caption,
        kind="per_distribution_figure",
        split="{eval_split}",
        key=metric_key,
        w1_within_family=PROTOCOL["w1_per_distribution"],
        runs=structured_runs(),
        model_titles=MODEL_TITLES,
        condition_titles=CONDITION_TITLES,
    script:
        "../workflow_scripts/structured_report.py"


rule qualitative_figure:
    input:
        qualitative_samples,
    output:
        pdf=report(
            out("figures/{figure}.pdf"),
            category="Figures",
            subcategory="Structured sampling",
            caption="../report/caption.rst",
        ),
        png=out("figures/{figure}.png"),
    log:
        out_log("figures/{figure}.log"),
    wildcard_constraints:
        figure="|".join(QUALITATIVE_FIGURES),
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        caption=report_caption,
        kind="qualitative_figure",
        name="{figure}",
        panels=qualitative_panels_of,
        model_titles=MODEL_TITLES,
        condition_titles=qualitative_condition_titles,
    script:
        "../workflow_scripts/structured_report.py"


rule ablation_table:
    input:
        unpack(ablation_inputs),
    output:
        report(
            multiext(out("tables/{table}."), "tex", "csv", "md"),
            category="Tables",
            subcategory="Ablations",
            caption="../report/caption.rst",
        ),
    log:
        out_log("tables/{table}.log"),
    wildcard_constraints:
        table="|".join(ABLATION_TABLES.values()),
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        caption=report_caption,
        settings=ablation_settings,
        splits=STRUCTURED["splits"],
        model_titles=MODEL_TITLES,
    script:
        "../workflow_scripts/ablation_table.py"


rule transfer_table:
    input:
        unpack(transfer_table_inputs),
    output:
        report(
            multiext(out("tables/{table}"), ".tex", ".csv", ".md"),
            category="Tables",
            subcategory="Transfer",
            caption="../report/caption.rst",
        ),
    log:
        out_log("tables/{table}.log"),
    wildcard_constraints:
        table="|".join(TRANSFER_TABLES),
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        caption=report_caption,
        kind="{table}",
        runs=structured_runs(),
        noveltybench_runs=noveltybench_runs(),
        model_titles=MODEL_TITLES,
        condition_titles=CONDITION_TITLES,
    script:
        "../workflow_scripts/transfer_report.py"


checkpoint noveltybench_qualitative_cases:
    input:
        qualitative_case_scores,
    output:
        out("tables/noveltybench_qualitative_cases.json"),
    log:
        out_log("tables/noveltybench_qualitative_cases.log"),
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        kind="qualitative_cases",
        models=NOVELTYBENCH["qualitative_models"],
        model_titles=MODEL_TITLES,
        condition_titles=CONDITION_TITLES,
    script:
        "../workflow_scripts/transfer_report.py"


rule noveltybench_qualitative_table:
    input:
        cases=out("tables/noveltybench_qualitative_cases.json"),
        scores=qualitative_case_scores,
    output:
        report(
            multiext(
                out("tables/noveltybench_qualitative_{case}"), ".tex", ".csv", ".md"
            ),
            category="Tables",
            subcategory="Transfer",
            caption="../report/caption.rst",
        ),
    log:
        out_log("tables/noveltybench_qualitative_{case}.log"),
    wildcard_constraints:
        case="(soft|hard|base)_.+",
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        caption=report_caption,
        kind="qualitative_table",
        name="noveltybench_qualitative_{case}",
        model_titles=MODEL_TITLES,
        condition_titles=CONDITION_TITLES,
    script:
        "../workflow_scripts/transfer_report.py"


rule open_ended_figure:
    input:
        open_ended_figure_inputs,
    output:
        pdf=report(
            out("figures/{figure}.pdf"),
            category="Figures",
            subcategory="Transfer",
            caption="../report/caption.rst",
        ),
        png=out("figures/{figure}.png"),
    log:
        out_log("figures/{figure}.log"),
    wildcard_constraints:
        figure="|".join(OPEN_ENDED_FIGURES),
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        caption=report_caption,
        kind="{figure}",
        runs=structured_runs(),
        qualitative=OPEN_ENDED["qualitative"],
        conditions=CONDITIONS,
        model_titles=MODEL_TITLES,
        model_families=MODEL_FAMILIES,
        model_sizes=MODEL_SIZES,
        condition_titles=CONDITION_TITLES,
    script:
        "../workflow_scripts/transfer_report.py"


rule retention_table:
    input:
        unpack(retention_inputs),
    output:
        report(
            multiext(out("tables/{table}"), ".tex", ".csv", ".md"),
            category="Tables",
            subcategory="Retention",
            caption="../report/caption.rst",
        ),
    log:
        out_log("tables/{table}.log"),
    wildcard_constraints:
        table="|".join(RETENTION_TABLES),
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        caption=report_caption,
        kind="{table}",
        runs=structured_runs(),
        model_titles=MODEL_TITLES,
        condition_titles=CONDITION_TITLES,
    script:
        "../workflow_scripts/retention_report.py"


rule retention_figure:
    input:
        unpack(retention_inputs),
    output:
        pdf=report(
            out("figures/{figure}.pdf"),
            category="Figures",
            subcategory="Retention",
            caption="../report/caption.rst",
        ),
        png=out("figures/{figure}.png"),
    log:
        out_log("figures/{figure}.log"),
    wildcard_constraints:
        figure="|".join(RETENTION_FIGURES),
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        caption=report_caption,
        kind="{figure}",
        runs=structured_runs(),
        model_titles=MODEL_TITLES,
        condition_titles=CONDITION_TITLES,
    script:
        "../workflow_scripts/retention_report.py"
