"""Model families (calibft.pipeline.config.resolve_model_families): what a model inherits, and what it overrides; and a
configuration over the base it names (calibft.pipeline.config.read_config, check_standalone)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from calibft.pipeline.config import check_standalone, in_written_order, merged, read_config, resolve_model_families

ROOT = Path(__file__).resolve().parents[1]

FAMILY = {
    "tokenizer": "qwen3",
    "chat": {"template_kwargs": {"enable_thinking": False}, "date": "2025-08-05"},
    "resources": {"gpus": 4, "runtime": 360},
}


def test_a_model_takes_its_familys_settings_and_its_own_win_key_by_key():
    config = {
        "model_families": {"Qwen3": FAMILY},
        "models": {
            "plain": {"display": "Qwen3-0.6B", "family": "Qwen3"},
            "own": {
                "display": "Qwen3-8B",
                "family": "Qwen3",
                "tokenizer": "mine",
                "chat": {"template_kwargs": {"enable_thinking": True}},
                "resources": {"gpus": 2},
            },
            "by_display": {"display": "Qwen3"},  # no family: its display names it
            "other": {"display": "Other", "family": "Other", "tokenizer": "x"},
        },
    }
    models = resolve_model_families(copy.deepcopy(config))["models"]
    assert models["plain"] == {"display": "Qwen3-0.6B", "family": "Qwen3", **FAMILY}
    assert models["own"] == {
        "display": "Qwen3-8B",
        "family": "Qwen3",
        "tokenizer": "mine",
        "chat": {"template_kwargs": {"enable_thinking": True}, "date": "2025-08-05"},
        "resources": {"gpus": 2, "runtime": 360},
    }
    assert models["by_display"] == {"display": "Qwen3", **FAMILY}
    assert models["other"] == config["models"]["other"]
    # nothing is shared between models or with the family, and resolving again changes nothing
    models["plain"]["resources"]["gpus"] = 1
    assert models["by_display"]["resources"]["gpus"] == 4 and FAMILY["resources"]["gpus"] == 4
    resolved = resolve_model_families(copy.deepcopy(config))
    assert resolve_model_families(copy.deepcopy(resolved)) == resolved


def test_a_value_that_is_no_mapping_replaces_the_default_whole():
    assert merged({"chat": {"date": "x"}, "pattern": "a"}, {"chat": {}, "pattern": None}) == {
        "chat": {"date": "x"},
        "pattern": None,
    }
    assert merged({"kwargs": {"a": 1}}, {"kwargs": "text"}) == {"kwargs": "text"}
    assert list(merged({"a": 1, "b": 2}, {"b": 3, "c": 4})) == ["b", "c", "a"]  # the model's own keys first


def test_the_paper_models_are_the_families_settings_written_out():
    """config.yaml's twelve models, resolved, against their settings written out model by model."""
    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    models = read_config(ROOT / "config.yaml")["models"]
    assert list(models) == list(raw["models"])
    for name, model in models.items():
        family = raw["model_families"][model["family"]]
        assert model["tokenizer"] == family["tokenizer"]
        assert model["chat"] == family["chat"] and model.get("ssot_chat") == family.get("ssot_chat")
        assert model["resources"] == {"gpus": 4, "gpu_model": "a100", "cpus": 24, "mem_mb": 256000, "runtime": 360}
        gpus = 2 if name == "gemma3_27b_it" else 1
        assert model["eval_resources"] == {
            "gpus": gpus,
            "gpu_model": "a100",
            "cpus": 8,
            "mem_mb": 64000,
            "runtime": 480,
        }
    assert models["gpt_oss_20b"]["ssot_release_style"] == "gpt_oss" and "ssot_instruction" in models["gpt_oss_20b"]
    assert "ssot_instruction" not in models["qwen3_8b"]


@pytest.mark.parametrize("name", ["demo", "smoke", "mini"])
def test_a_cpu_configuration_reads_as_snakemake_merges_it_over_its_base(name):
    """profiles/{name}/{name}.yaml extends profiles/cpu.yaml (`base:`): read_config gives what the Snakefile's
    `configfile:` makes of it, the base under the --configfile, as snakemake.utils.update_config merges them, with
    its keys in the order that rules/common.smk puts them in."""
    from snakemake.utils import update_config

    overlay = yaml.safe_load((ROOT / "profiles" / name / f"{name}.yaml").read_text())
    base = yaml.safe_load((ROOT / "profiles" / "cpu.yaml").read_text())
    assert overlay["base"] == "profiles/cpu.yaml"
    assert base["standalone"] is True and "base" not in base  # a whole configuration, that replaces config.yaml
    assert "standalone" not in overlay  # standalone through its base
    resolved = copy.deepcopy(overlay)
    update_config(resolved, base)  # the main process: the --configfiles, then the base under them
    update_config(resolved, overlay)
    config = read_config(ROOT / "profiles" / name / f"{name}.yaml")
    assert config == resolve_model_families(resolved)
    workflow = in_written_order(resolve_model_families(resolved), base)
    assert json.dumps(config) == json.dumps(workflow)  # and in the same key order
    assert list(config["training"])[:4] == ["lora", "learning_rate", "weight_decay", "warmup_fraction"]
    assert list(config["recipes"]["hard"]) == ["objective", "space", "epochs", "samples_per_prompt", "max_steps"]


def test_a_configuration_over_a_base_lists_the_schemas_keys_in_its_order_then_the_bases_then_its_own():
    base = {"recipes": {"soft": {"space": "soft", "objective": "soft"}, "hard": {"objective": "hard"}}}
    config = {  # as Snakemake merges it: the configuration's own keys first
        "recipes": {
            "mine": {"epochs": 1, "objective": "soft"},
            "hard": {"max_steps": 2, "objective": "hard"},
            "soft": base["recipes"]["soft"],
        },
        "training": {"max_seq_len": 64, "lora": {"r": 4}},
        "seeds": [11],
    }
    ordered = in_written_order(config, base)
    assert ordered == config
    assert list(ordered) == ["seeds", "training", "recipes"]  # the schema's top-level order
    assert list(ordered["training"]) == ["lora", "max_seq_len"]
    assert list(ordered["recipes"]) == ["soft", "hard", "mine"]  # names: the base's, then the configuration's
    assert list(ordered["recipes"]["hard"]) == ["objective", "max_steps"]
    assert list(ordered["recipes"]["soft"]) == ["objective", "space"]


def test_a_configuration_that_a_cluster_job_would_read_otherwise_stops_naming_the_fix(tmp_path):
    """check_standalone: a cluster job gets the --configfiles but not --replace-workflow-config, and Snakemake skips
    a missing base, so either would give it another configuration than the main process."""
    (tmp_path / "partial.yaml").write_text("seeds: [1]\n")
    files = [tmp_path / "mine.yaml"]
    check_standalone({"standalone": True, "base": "gone.yaml"}, True, files, str(tmp_path))  # whole: nothing to say
    check_standalone({"seeds": [1]}, False, files, str(tmp_path))  # over config.yaml, as every cluster job reads it
    with pytest.raises(ValueError, match=r"--replace-workflow-config is not passed on to cluster jobs, .*mine\.yaml"):
        check_standalone({"seeds": [1]}, True, files, str(tmp_path))
    with pytest.raises(ValueError, match=r"mine\.yaml: base 'partial\.yaml' is no whole configuration: put"):
        check_standalone({"base": "partial.yaml"}, False, files, str(tmp_path))
    with pytest.raises(ValueError, match=rf"base 'gone\.yaml' does not exist \(looked for {tmp_path}/gone\.yaml\)"):
        check_standalone({"base": "gone.yaml"}, False, files, str(tmp_path))
