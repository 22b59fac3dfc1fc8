"""The recorded configuration of every checkpoint of config.yaml's `models:` (reference/checkpoints/).

reference/checkpoints/<model>/config.json (and generation_config.json where recorded) are the checkpoints'
published files, copied from public repositories (reference/checkpoints/sources.yaml says which) because the
Hugging Face hub was not reachable where they were recorded. These tests tie them to config.yaml: every model has
its recorded config.json and a sources.yaml entry, transformers reads the folder offline, and the architecture,
text vocabulary and depth are those of the table below, written from the model cards and independent of the files.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import transformers
import yaml
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from calibft.pipeline.config import read_config

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINTS = ROOT / "reference" / "checkpoints"
CONFIG = read_config(ROOT / "config.yaml")
MODELS: dict[str, dict] = CONFIG["models"]
SOURCES: dict[str, dict] = yaml.safe_load((CHECKPOINTS / "sources.yaml").read_text())
RECORDED = ("config.json", "generation_config.json")


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


# hf_id -> (architectures[0], text vocabulary size, decoder layers), from the model cards.
EXPECTED = {
    "Qwen/Qwen3-0.6B": ("Qwen3ForCausalLM", 151936, 28),
    "Qwen/Qwen3-1.7B": ("Qwen3ForCausalLM", 151936, 28),
    "Qwen/Qwen3-4B": ("Qwen3ForCausalLM", 151936, 36),
    "Qwen/Qwen3-8B": ("Qwen3ForCausalLM", 151936, 36),
    "Qwen/Qwen3-14B": ("Qwen3ForCausalLM", 151936, 40),
    "google/gemma-3-1b-it": ("Gemma3ForCausalLM", 262144, 26),
    "google/gemma-3-4b-it": ("Gemma3ForConditionalGeneration", 262208, 34),
    "google/gemma-3-12b-it": ("Gemma3ForConditionalGeneration", 262208, 48),
    "google/gemma-3-27b-it": ("Gemma3ForConditionalGeneration", 262208, 62),
    "meta-llama/Llama-3.2-1B-Instruct": ("LlamaForCausalLM", 128256, 16),
    "meta-llama/Llama-3.2-3B-Instruct": ("LlamaForCausalLM", 128256, 28),
    "openai/gpt-oss-20b": ("GptOssForCausalLM", 201088, 24),
}


def _where(key: str) -> str:
    return (
        f"add reference/checkpoints/{key}/config.json (the checkpoint's published file, verbatim) and an entry "
        f"{key}: {{hf_id: ..., config.json: {{repo, path, commit}}}} in reference/checkpoints/sources.yaml"
    )


def _entry(key: str) -> dict:
    assert key in SOURCES, f"{key} has no entry in reference/checkpoints/sources.yaml: {_where(key)}"
    return SOURCES[key]


def test_every_model_of_config_yaml_has_its_recorded_configuration():
    folders = {p.name for p in CHECKPOINTS.iterdir() if p.is_dir()}
    missing = sorted(key for key in MODELS if not (CHECKPOINTS / key / "config.json").is_file())
    assert not missing, "\n".join(f"{key} ({MODELS[key]['hf_id']}): {_where(key)}" for key in missing)
    unknown = sorted(folders - set(MODELS))
    assert not unknown, f"reference/checkpoints/{unknown} are no model of config.yaml's models: remove them"
    assert set(SOURCES) == set(MODELS), (
        f"reference/checkpoints/sources.yaml lists {sorted(set(SOURCES) - set(MODELS))} that config.yaml does not "
        f"and lacks {sorted(set(MODELS) - set(SOURCES))}"
    )


def test_the_expected_table_covers_every_model():
    """A model added to config.yaml needs its row here too: its architecture, vocabulary and depth."""
    absent = sorted(m["hf_id"] for m in MODELS.values() if m["hf_id"] not in EXPECTED)
    assert not absent, f"add {absent} to EXPECTED in tests/test_checkpoint_configs.py"


@pytest.mark.parametrize("key", sorted(MODELS))
def test_sources_name_where_each_recorded_file_was_copied_from(key):
    entry = _entry(key)
    assert entry["hf_id"] == MODELS[key]["hf_id"]
    folder = CHECKPOINTS / key
    recorded = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    assert "config.json" in recorded, _where(key)
    assert set(recorded) <= set(RECORDED), f"{folder} holds {recorded}: only {RECORDED} are recorded"
    for name in RECORDED:
        assert name in entry, f"sources.yaml entry {key} does not say where its {name} was copied from, or why not"
        source = entry[name]
        assert ("missing" in source) == (name not in recorded), f"{key} {name}: recorded, or `missing` says why not"
        if "missing" in source:
            continue
        assert "repo" in source or "sha256" in source, f"{key} {name}: name its copy (repo, path, commit) or hash"
        if "repo" in source:
            assert source["repo"].count("/") == 1 and source["path"], source
            assert len(source["commit"]) == 40 and int(source["commit"], 16) >= 0, source
        if "sha256" in source:  # the hub's file byte for byte
            assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == source["sha256"], f"{key} {name}"
    assert set(entry) == {"hf_id", *RECORDED}, f"sources.yaml entry {key}: {sorted(entry)}"


@pytest.mark.parametrize("key", sorted(MODELS))
def test_the_recorded_config_loads_offline_and_is_the_expected_architecture(key):
    folder = CHECKPOINTS / key
    assert (folder / "config.json").is_file(), _where(key)
    architecture, vocabulary, layers = EXPECTED[MODELS[key]["hf_id"]]
    raw = json.loads((folder / "config.json").read_text())
    config = transformers.AutoConfig.from_pretrained(folder)
    # a copy without `architectures` (sources.yaml says which) gets the class transformers maps its type to
    built = raw.get("architectures") or [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config.model_type]]
    assert built == [architecture]
    text = config.get_text_config()
    assert text.vocab_size == vocabulary
    assert text.num_hidden_layers == layers


# Parameter counts published independently of the recorded files: keras-hub's presets (keras-team/keras-hub,
# keras_hub/src/models/{qwen3,gemma3,llama3}/*_presets.py at commits 1df65dab96fb, 46f3b4a000be and d7a5c31f7d83)
# and, for GPT-OSS-20B, its model card's 20.91B. keras-hub counts Gemma-3's embedding without its 64 image-token
# rows (262,144 of the checkpoint's 262,208) and Llama-3.2's tied output head as a matrix of its own.
PUBLISHED_PARAMETERS = {
    "Qwen/Qwen3-0.6B": 596_049_920,  # qwen3_0.6b_en
    "Qwen/Qwen3-1.7B": 1_720_574_976,  # qwen3_1.7b_en
    "Qwen/Qwen3-4B": 4_022_468_096,  # qwen3_4b_en
    "Qwen/Qwen3-8B": 8_190_735_360,  # qwen3_8b_en
    "Qwen/Qwen3-14B": 14_768_307_200,  # qwen3_14b_en
    "google/gemma-3-1b-it": 999_885_952,  # gemma3_instruct_1b
    "google/gemma-3-4b-it": 4_299_915_632,  # gemma3_instruct_4b (vision+text)
    "google/gemma-3-12b-it": 12_187_079_280,  # gemma3_instruct_12b
    "google/gemma-3-27b-it": 27_432_062_576,  # gemma3_instruct_27b
    "meta-llama/Llama-3.2-1B-Instruct": 1_498_482_688,  # llama3.2_instruct_1b
    "meta-llama/Llama-3.2-3B-Instruct": 3_606_752_256,  # llama3.2_instruct_3b
}
GPT_OSS_20B_BILLIONS = 20.91


def _counted_as_published(config: dict, parameters: int) -> int:
    text = config.get("text_config", config)
    if text["model_type"] == "gemma3_text" and "vision_config" in config:
        parameters -= 64 * text["hidden_size"]
    if text["model_type"] == "llama" and config.get("tie_word_embeddings"):
        parameters += text["vocab_size"] * text["hidden_size"]
    return parameters


@pytest.mark.parametrize("key", sorted(MODELS))
def test_the_recorded_config_builds_a_model_of_the_published_size(key):
    from calibft.lm.meta_models import meta_model

    config = json.loads((CHECKPOINTS / key / "config.json").read_text())
    parameters = sum(p.numel() for p in meta_model(config).parameters())
    hf_id = MODELS[key]["hf_id"]
    if hf_id == "openai/gpt-oss-20b":
        assert round(parameters / 1e9, 2) == GPT_OSS_20B_BILLIONS
    else:
        assert _counted_as_published(config, parameters) == PUBLISHED_PARAMETERS[hf_id], "keras-hub's published count"
