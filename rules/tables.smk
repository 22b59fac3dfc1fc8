rule table:
    input:
        unpack(artifact_inputs),
    output:
        report(
            multiext(
                PATTERNS.artifact_stem("table", "{artifact}"), ".tex", ".csv", ".md"
            ),
            category="Tables",
            subcategory=artifact_section,
            caption="../report/caption.rst",
        ),
    log:
        out_log("tables/{artifact}.log"),
    wildcard_constraints:
        artifact=artifact_names("table"),
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        caption=artifact_caption,
        settings=artifact_settings,
    script:
        "../workflow_scripts/render.py"


rule figure:
    input:
        unpack(artifact_inputs),
    output:
        pdf=report(
            PATTERNS.artifact_stem("figure", "{artifact}") + ".pdf",
            category="Figures",
            subcategory=artifact_section,
            caption="../report/caption.rst",
        ),
        png=PATTERNS.artifact_stem("figure", "{artifact}") + ".png",
    log:
        out_log("figures/{artifact}.log"),
    wildcard_constraints:
        artifact=artifact_names("figure"),
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        caption=artifact_caption,
        settings=artifact_settings,
    script:
        "../workflow_scripts/render.py"


checkpoint noveltybench_qualitative_cases:
    input:
        noveltybench_curated_scores,
    output:
        PATTERNS.noveltybench_cases(),
    log:
        out_log("tables/noveltybench_qualitative_cases.log"),
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        models=NOVELTYBENCH["qualitative_models"],
        runs=LAYOUT.per_seed()[0].noveltybench_curated_runs(),
    script:
        "../workflow_scripts/noveltybench_cases.py"
