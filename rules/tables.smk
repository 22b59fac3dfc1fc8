rule config_tables:
    output:
        report(
            expand(
                "results/tables/{table}.{ext}",
                table=CONFIG_TABLES,
                ext=["tex", "csv", "md"],
            ),
            category="Tables",
            subcategory="Configuration",
        ),
    log:
        "logs/tables/config_tables.log",
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        config=config_table_settings,
        recipes=list(config["recipes"]),
    script:
        "../workflow_scripts/config_tables.py"


rule training_curves:
    input:
        expand(
            "results/adapters/{run}/train_log.jsonl",
            run=[f"{model}/{recipe}" for model, recipe in TRAINING_RUNS],
        ),
    output:
        pdf=report(
            "results/figures/training_curves.pdf",
            category="Figures",
            subcategory="Training",
        ),
        png="results/figures/training_curves.png",
    log:
        "logs/figures/training_curves.log",
    localrule: True
    conda:
        "../envs/calibft.yaml"
    params:
        runs=TRAINING_RUNS,
        titles={name: model["display"] for name, model in config["models"].items()},
    script:
        "../workflow_scripts/training_curves.py"
