rule reproduction:
    input:
        unpack(artifact_inputs),
        reference=REFERENCE,
    output:
        report(
            multiext(PATTERNS.reproduction_stem("{artifact}"), ".csv", ".md", ".tex"),
            category="Reproduction",
            caption="../report/reproduction.rst",
        ),
        multiext(PATTERNS.reproduction_stem("{artifact}"), ".pdf", ".png"),
    log:
        out_log("reproduction/{artifact}.log"),
    wildcard_constraints:
        artifact="|".join(re.escape(row.name) for row in REPRODUCED) or "(?!)",
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        settings=artifact_settings,
        protocol=protocol_name(config["protocol"]),
    script:
        "../workflow_scripts/reproduce.py"


rule reproduction_summary:
    input:
        [f"{PATTERNS.reproduction_stem(row.name)}.csv" for row in REPRODUCED],
    output:
        report(
            multiext(
                PATTERNS.reproduction_stem("reproduction"), ".csv", ".md", ".tex"
            ),
            category="Reproduction",
            subcategory="Summary",
            caption="../report/reproduction.rst",
        ),
    log:
        out_log("reproduction/reproduction.log"),
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        names=[row.name for row in REPRODUCED],
        reference=config["reproduction"]["reference"],
        protocol=protocol_name(config["protocol"]),
    script:
        "../workflow_scripts/reproduction_summary.py"


rule compute_report:
    input:
        adapter_outputs(LAYOUT, LAYOUT.main_runs),
        eval_outputs(LAYOUT),
        reference=REFERENCE,
    output:
        report(
            multiext(PATTERNS.reproduction_stem("compute"), ".csv", ".md", ".tex"),
            category="Reproduction",
            subcategory="Compute",
            caption="../report/compute.rst",
        ),
    log:
        out_log("reproduction/compute.log"),
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        benchmarks=[out_benchmark(SEEDED.format(seed=seed)) for seed in LAYOUT.seeds],
        train_runs=LAYOUT.main_runs,
        objective={
            name: recipe["objective"] for name, recipe in config["recipes"].items()
        },
        gpus={
            name: model["resources"].get("gpus", 0)
            for name, model in config["models"].items()
        },
        conditions=CONDITIONS,
        reference=config["reproduction"]["reference"],
    script:
        "../workflow_scripts/compute_report.py"
