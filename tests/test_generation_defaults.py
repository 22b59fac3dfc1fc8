"""The emulation of transformers 4.57.6's generation-config fallback against a fixture recorded with 4.57.6 itself.

The fixture (`tests/fixtures/generation_defaults/transformers_4_57_6.json`, written by `make_fixture.py` there) holds,
per checkpoint generation config and run config (sampling / greedy), the request the release's HF backend built,
the config `_prepare_generation_config` returned, the decoding mode and the logits processors `generate` used.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from calibft.lm.generation_defaults import (
    GLOBAL_DEFAULTS,
    base_version,
    effective_settings,
    engine_settings,
    fallback_applies,
    logits_processors,
    release_request,
)

FIXTURE = json.loads(
    (Path(__file__).parent / "fixtures" / "generation_defaults" / "transformers_4_57_6.json").read_text()
)
CASES = {case["name"]: case for case in FIXTURE["cases"]}
METADATA = ("transformers_version", "_from_model_config", "_commit_hash")

# (do_sample, temperature, top_p, top_k) the engine gets, and whether the fallback ran: the paper's eight settings
# (the real checkpoints' configs) and three more (Llama-3.2 without do_sample, no version, no generation config).
EXPECTED = {
    "qwen3/sampling": ((True, 0.6, 0.95, None), True),
    "qwen3/greedy": ((True, 1.0, 1.0, None), True),
    "gemma3/sampling": ((True, 1.0, 0.95, None), True),
    "gemma3/greedy": ((True, 1.0, 1.0, None), True),
    "llama32/sampling": ((True, 1.0, 1.0, None), False),
    "llama32/greedy": ((False, 1.0, 1.0, None), False),
    "gpt_oss/sampling": ((True, 1.0, 1.0, None), True),
    "gpt_oss/greedy": ((True, 1.0, 1.0, None), True),
    "llama32_no_do_sample/sampling": ((True, 1.0, 1.0, None), False),
    "llama32_no_do_sample/greedy": ((False, 1.0, 1.0, None), False),
    "qwen3_no_version/sampling": ((True, 0.6, 0.95, None), True),
    "qwen3_no_version/greedy": ((True, 1.0, 1.0, None), True),
    "no_generation_config/sampling": ((True, 1.0, 1.0, None), True),
    "no_generation_config/greedy": ((False, 1.0, 1.0, None), True),
}
QWEN3 = CASES["qwen3/sampling"]["checkpoint"]


def public(config: dict[str, Any]) -> dict[str, Any]:
    """A recorded config without its private attributes and metadata."""
    return {key: value for key, value in config.items() if not key.startswith("_") and key != "transformers_version"}


def request_for(case: dict[str, Any]) -> dict[str, Any]:
    """The emulated request of a fixture case (the pad id as the release picks it: tokenizer pad, else EOS)."""
    run, tokenizer = case["run_config"], case["tokenizer"]
    return release_request(
        case["checkpoint"],
        run["do_sample"],
        run["temperature"],
        run["top_p"],
        max_new_tokens=run["max_new_tokens"],
        pad_token_id=tokenizer["pad_token_id"] or tokenizer["eos_token_id"],
    )


def test_fixture_is_from_the_pinned_version_and_covers_all_cases():
    assert FIXTURE["transformers_version"] == "4.57.6"
    assert set(CASES) == set(EXPECTED)
    assert all(case["request_unchanged_by_generate"] for case in FIXTURE["cases"])


def test_global_defaults_match_generation_config():
    recorded = {key: value for key, value in FIXTURE["global_defaults"].items() if key not in METADATA}
    assert recorded == GLOBAL_DEFAULTS


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_release_request_matches_the_release_backend(name):
    case = CASES[name]
    request = request_for(case)
    assert request["transformers_version"] == case["loaded_transformers_version"]
    assert public(request) == public(case["request"])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_effective_settings_match_transformers(name):
    case = CASES[name]
    effective = effective_settings(case["checkpoint"], request_for(case))
    assert public(effective["config"]) == public(case["prepared"])
    assert effective["mode"] == case["mode"]
    for key in ("do_sample", "temperature", "top_p", "top_k"):
        assert effective[key] == case["prepared"][key], key
    changed = {
        key: [case["request"].get(key), value]
        for key, value in public(case["prepared"]).items()
        if value != case["request"].get(key)
    }
    assert effective["replaced"] == changed
    engine, fallback_applied = EXPECTED[name]
    assert effective["fallback_applied"] is fallback_applied
    assert engine_settings(effective) == engine
    # the decoding really was greedy (one token for 32 identical rows) exactly when do_sample ended up False
    assert (case["distinct_first_tokens"] == 1) is (not effective["do_sample"])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_logits_processors_match_transformers(name):
    case = CASES[name]
    emulated = logits_processors(effective_settings(case["checkpoint"], request_for(case)))
    assert [cls for cls, _ in emulated] == [p["class"] for p in case["processors"]]
    for (cls, params), recorded in zip(emulated, case["processors"], strict=True):
        assert params == {key: recorded["params"][key] for key in params}, cls


def test_qwen3_samples_at_its_recommended_settings_not_the_requested_ones():
    effective = effective_settings(QWEN3, release_request(QWEN3, True))
    assert effective["replaced"] == {"temperature": [1.0, 0.6], "top_p": [1.0, 0.95]}
    assert logits_processors(effective) == [
        ("TemperatureLogitsWarper", {"temperature": 0.6}),
        ("TopPLogitsWarper", {"top_p": 0.95, "min_tokens_to_keep": 1}),
    ]
    assert effective["top_k"] is None  # the release's top_k=None differs from the default 50: Qwen3's 20 stays off


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_no_fallback_returns_the_request(name):
    case = CASES[name]
    request = request_for(case)
    effective = effective_settings(case["checkpoint"], request, fallback=False)
    assert effective["config"] == request
    assert effective["replaced"] == {}
    assert effective["fallback_applied"] is False
    for key in ("do_sample", "temperature", "top_p", "top_k"):
        assert effective[key] == request[key]


@pytest.mark.parametrize(
    ("version", "applies"),
    [
        ("4.49.9", False),
        ("4.49.0.dev0", False),
        ("4.45.0.dev0", False),
        ("4.50.0.dev0", True),
        ("4.50.0rc1", True),
        ("4.50.0", True),
        ("4.51.0", True),
        ("4.50", True),
        ("5.0.0", True),
        (None, True),  # no transformers_version in the file: GenerationConfig fills in the running version
    ],
)
def test_version_rule(version, applies):
    checkpoint = {key: value for key, value in QWEN3.items() if key != "transformers_version"}
    if version is not None:
        checkpoint["transformers_version"] = version
    assert fallback_applies(checkpoint) is applies
    effective = effective_settings(checkpoint, release_request(checkpoint, True))
    assert effective["fallback_applied"] is applies
    assert (effective["temperature"], effective["top_p"]) == ((0.6, 0.95) if applies else (1.0, 1.0))


def test_version_rule_without_a_generation_config():
    assert fallback_applies(None) is True
    effective = effective_settings(None, release_request(None, False))
    assert effective["replaced"] == {}
    assert engine_settings(effective) == (False, 1.0, 1.0, None)


def test_base_version():
    assert base_version("4.50.0.dev0") == (4, 50, 0)
    assert base_version("4.50") == (4, 50, 0)
    assert base_version("4.57.6") == (4, 57, 6)
    with pytest.raises(ValueError, match="not a version"):
        base_version("dev")


def test_hybrid_cache_and_zero_temperature_edge_cases():
    checkpoint = {
        "cache_implementation": "hybrid",
        "temperature": 0.0,
        "do_sample": True,
        "transformers_version": "4.51.0",
    }
    effective = effective_settings(checkpoint, {"do_sample": False, "temperature": 1.0})
    assert effective["config"]["cache_implementation"] is None  # "hybrid" is never copied from the model
    assert effective["temperature"] == 0.0
    assert effective["do_sample"] is False  # a fallback temperature of 0.0 turns sampling off again
    assert effective["mode"] == "greedy_search"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("min_p", 0.05),
        ("repetition_penalty", 1.05),
        ("typical_p", 0.9),
        ("num_beams", 2),
        ("no_repeat_ngram_size", 3),
        ("epsilon_cutoff", 0.001),
        ("suppress_tokens", [5]),
    ],
)
def test_engine_settings_reject_what_the_engine_cannot_apply(field, value):
    for version in ("4.51.0", "4.45.0.dev0"):
        checkpoint = {**QWEN3, field: value, "transformers_version": version}
        effective = effective_settings(checkpoint, release_request(checkpoint, True))
        # the release's request is a copy of the checkpoint's config: the field applies with or without fallback
        assert effective[field] == value
        with pytest.raises(ValueError, match=field):
            engine_settings(effective)
    plain = effective_settings(None, release_request(None, True))
    assert field not in plain
    assert engine_settings(plain) == (True, 1.0, 1.0, None)


def test_engine_settings_reject_a_zero_sampling_temperature():
    effective = effective_settings(None, {"do_sample": True, "temperature": 0.0}, fallback=False)
    with pytest.raises(ValueError, match="temperature"):
        engine_settings(effective)


def test_engine_settings_return_top_k():
    checkpoint = {**QWEN3, "transformers_version": "4.49.0"}
    effective = effective_settings(checkpoint, release_request(checkpoint, True, top_k=40))
    assert engine_settings(effective) == (True, 1.0, 1.0, 40)
    assert logits_processors(effective) == [("TopKLogitsWarper", {"top_k": 40})]


# the fixture's checkpoint generation configs, by the recorded checkpoint whose generation_config.json each is
RECORDED_GENERATION_CONFIGS = {
    "qwen3": ["qwen3_0p6b", "qwen3_1p7b", "qwen3_4b", "qwen3_8b"],
    "gemma3": ["gemma3_1b_it", "gemma3_4b_it"],
    "llama32": ["llama3_2_1b_it", "llama3_2_3b_it"],
    "gpt_oss": ["gpt_oss_20b"],
}


@pytest.mark.parametrize("family", sorted(RECORDED_GENERATION_CONFIGS))
def test_the_fixture_was_recorded_with_the_checkpoints_own_generation_configs(family):
    """The fixture's generation configs are the published files (reference/checkpoints/, byte-checked against the
    hub's hashes), so its verdicts are those of the paper's checkpoints."""
    folder = Path(__file__).resolve().parents[1] / "reference" / "checkpoints"
    for key in RECORDED_GENERATION_CONFIGS[family]:
        published = json.loads((folder / key / "generation_config.json").read_text())
        assert CASES[f"{family}/sampling"]["checkpoint"] == published, key
