"""What `model.generate` really sampled with in the authors' release, which pins transformers 4.57.6.

The release's HF backend (`HFGenerationBackend._generation_config` in `random_steering/inference/hf_backend.py`)
deep-copies the model's generation config, overwrites a few fields and passes it as `generate(generation_config=...)`.
In transformers 4.57.6, `GenerationMixin._prepare_generation_config` then sets every field of that passed config
whose value equals the library's global default (`GenerationConfig()`) to the model's own generation-config value
when that one differs from the default, provided the model's generation config was written by transformers
>= 4.50.0 (base version, so "4.50.0.dev0" counts). A request of temperature 1 / top_p 1 / do_sample False equals the
defaults, so it silently becomes the checkpoint's recommended sampling.

This module reproduces that rule in plain Python (no transformers import): `release_request` builds the config the
release passes, `effective_settings` applies the 4.57.6 rule, `logits_processors` lists the processors
`_get_logits_processor` builds from the result, and `engine_settings` maps it to the arguments of the project's
sampling engine (`calibft.lm.generation`, temperature and top-p only). `tests/test_generation_defaults.py` checks it
against a fixture recorded with transformers 4.57.6 itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

TRANSFORMERS_VERSION = "4.57.6"  # the version the release pins, and whose behaviour is emulated here
FALLBACK_SINCE = (4, 50, 0)  # model generation configs written by this base version or later trigger the fallback

# `GenerationConfig().__dict__` of transformers 4.57.6 without its metadata (`_from_model_config`, `_commit_hash`,
# `transformers_version`): the "global default" each field is compared with.
GLOBAL_DEFAULTS: dict[str, Any] = {
    "max_length": 20,
    "max_new_tokens": None,
    "min_length": 0,
    "min_new_tokens": None,
    "early_stopping": False,
    "max_time": None,
    "stop_strings": None,
    "do_sample": False,
    "num_beams": 1,
    "use_cache": True,
    "cache_implementation": None,
    "cache_config": None,
    "return_legacy_cache": None,
    "prefill_chunk_size": None,
    "temperature": 1.0,
    "top_k": 50,
    "top_p": 1.0,
    "min_p": None,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "length_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "bad_words_ids": None,
    "renormalize_logits": False,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "remove_invalid_values": False,
    "exponential_decay_length_penalty": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "sequence_bias": None,
    "token_healing": False,
    "guidance_scale": None,
    "watermarking_config": None,
    "num_return_sequences": 1,
    "output_attentions": False,
    "output_hidden_states": False,
    "output_scores": False,
    "output_logits": None,
    "return_dict_in_generate": False,
    "pad_token_id": None,
    "bos_token_id": None,
    "eos_token_id": None,
    "encoder_no_repeat_ngram_size": 0,
    "decoder_start_token_id": None,
    "is_assistant": False,
    "num_assistant_tokens": 20,
    "num_assistant_tokens_schedule": "constant",
    "assistant_confidence_threshold": 0.4,
    "prompt_lookup_num_tokens": None,
    "max_matching_ngram_size": None,
    "assistant_early_exit": None,
    "assistant_lookbehind": 10,
    "target_lookbehind": 10,
    "compile_config": None,
    "disable_compile": False,
    "low_memory": None,
    "penalty_alpha": None,
    "dola_layers": None,
    "diversity_penalty": 0.0,
    "num_beam_groups": 1,
    "constraints": None,
    "force_words_ids": None,
}

# Fields that choose the decoding method or change the next-token distribution (`get_generation_mode`,
# `_get_logits_processor`); `effective_settings` reports those that end up non-default.
SAMPLING_FIELDS = (
    "do_sample",
    "num_beams",
    "num_beam_groups",
    "diversity_penalty",
    "penalty_alpha",
    "dola_layers",
    "constraints",
    "force_words_ids",
    "prompt_lookup_num_tokens",
    "assistant_early_exit",
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "typical_p",
    "epsilon_cutoff",
    "eta_cutoff",
    "repetition_penalty",
    "encoder_repetition_penalty",
    "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size",
    "bad_words_ids",
    "min_length",
    "min_new_tokens",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "remove_invalid_values",
    "exponential_decay_length_penalty",
    "suppress_tokens",
    "begin_suppress_tokens",
    "sequence_bias",
    "guidance_scale",
    "watermarking_config",
    "renormalize_logits",
)
ALWAYS_REPORTED = ("do_sample", "temperature", "top_p", "top_k")


def base_version(text: str) -> tuple[int, int, int]:
    """The release numbers of a version string, pre/post/dev parts dropped: "4.50.0.dev0" -> (4, 50, 0).

    Missing minor/micro numbers count as 0 ("4.50" -> (4, 50, 0)), as in `packaging`'s comparison.
    """
    match = re.match(r"\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", text)
    if match is None:
        raise ValueError(f"not a version string: {text!r}")
    major, minor, micro = (int(part) if part is not None else 0 for part in match.groups())
    return major, minor, micro


def checkpoint_version(checkpoint: Mapping[str, Any] | None) -> str:
    """The `transformers_version` the model's generation config carries once loaded.

    A generation_config.json without the field, or a checkpoint without the file (its config is then built from
    the model config), gets the running library's version, since `GenerationConfig.__init__` defaults it.
    """
    if checkpoint is None or checkpoint.get("transformers_version") is None:
        return TRANSFORMERS_VERSION
    return str(checkpoint["transformers_version"])


def fallback_applies(checkpoint: Mapping[str, Any] | None) -> bool:
    """Whether 4.57.6 falls back to the model's generation config (written by transformers >= 4.50.0)."""
    return base_version(checkpoint_version(checkpoint)) >= FALLBACK_SINCE


def model_generation_config(checkpoint: Mapping[str, Any] | None) -> dict[str, Any]:
    """The model's loaded generation config as a dict: the global defaults updated with the checkpoint's fields.

    With no checkpoint file, the config built from the model config holds only token ids besides the defaults,
    none of them sampling-related; they are unknown here and left at their defaults.
    """
    config = dict(GLOBAL_DEFAULTS)
    config.update(checkpoint or {})
    config["transformers_version"] = checkpoint_version(checkpoint)
    return config


def release_request(
    checkpoint: Mapping[str, Any] | None,
    sampling: bool,
    temperature: float = 1.0,
    top_p: float = 1.0,
    *,
    top_k: int = 0,
    max_new_tokens: int = 256,
    pad_token_id: int | None = None,
) -> dict[str, Any]:
    """The generation config the release's HF backend passes to `generate`, as a dict of all its fields.

    As `_generation_config` does: a copy of the model's generation config with `max_new_tokens`, `do_sample` and
    `pad_token_id` set, then, when sampling, `temperature`, `top_p` and `top_k` (None unless the run config gives
    a positive top_k), and for greedy decoding `temperature`, `top_p` and `top_k` all set to None.
    `pad_token_id` is the tokenizer's pad id (or EOS id) the release sets; None keeps the checkpoint's.
    """
    request = model_generation_config(checkpoint)
    request["max_new_tokens"] = int(max_new_tokens)
    request["do_sample"] = bool(sampling)
    if pad_token_id is not None:
        request["pad_token_id"] = pad_token_id
    if sampling:
        request["temperature"] = float(temperature)
        request["top_p"] = float(top_p)
        request["top_k"] = int(top_k) if int(top_k) > 0 else None
    else:
        request["temperature"] = None
        request["top_p"] = None
        request["top_k"] = None
    return request


def _is_metadata(key: str) -> bool:
    return key.startswith("_") or key == "transformers_version"


def effective_settings(
    checkpoint: Mapping[str, Any] | None, request: Mapping[str, Any], fallback: bool = True
) -> dict[str, Any]:
    """The settings `generate(generation_config=request)` uses under transformers 4.57.6's fallback rule.

    For every non-metadata field of the model's generation config (except `cache_implementation="hybrid"`): when the
    request's value equals the global default and the model's does not, the model's value is used. A resulting
    temperature of exactly 0.0 then turns sampling off. The rule runs only when the model's generation config was
    written by transformers >= 4.50.0 and `fallback` is True; otherwise the request is used as it is. Request fields
    left out take their `GenerationConfig` default.

    Returns `do_sample`, `temperature`, `top_p`, `top_k` (as the config holds them: None or 0 means off), every
    other field of `SAMPLING_FIELDS` that is not at its default, `mode` (the decoding method `get_generation_mode`
    picks), `fallback_applied`, `replaced` (`{field: [requested, effective]}` for each field that changed) and
    `config` (the whole effective config).
    """
    config = dict(GLOBAL_DEFAULTS)
    config.update(request)
    requested = dict(config)
    applied = fallback and fallback_applies(checkpoint)
    if applied:
        model = model_generation_config(checkpoint)
        for key, model_value in model.items():
            if _is_metadata(key):
                continue
            if key == "cache_implementation" and model_value == "hybrid":
                continue
            default = GLOBAL_DEFAULTS.get(key)
            if config.get(key) == default and model_value != default:
                config[key] = model_value
        if config.get("temperature") == 0.0:
            config["do_sample"] = False
    replaced = {
        key: [requested.get(key), value]
        for key, value in config.items()
        if not _is_metadata(key) and value != requested.get(key)
    }
    settings: dict[str, Any] = {key: config.get(key) for key in ALWAYS_REPORTED}
    for key in SAMPLING_FIELDS:
        if key not in settings and config.get(key) != GLOBAL_DEFAULTS[key]:
            settings[key] = config.get(key)
    settings["mode"] = generation_mode(config)
    settings["fallback_applied"] = applied
    settings["replaced"] = replaced
    settings["config"] = config
    return settings


def _field(config: Mapping[str, Any], key: str) -> Any:
    """A field of a config or of `effective_settings`' result (whose full config is under "config")."""
    full = config.get("config", config)
    return full.get(key, GLOBAL_DEFAULTS.get(key))


def generation_mode(config: Mapping[str, Any]) -> str:
    """The decoding method `GenerationConfig.get_generation_mode` (4.57.6) picks, without an assistant model."""
    if _field(config, "constraints") is not None or _field(config, "force_words_ids") is not None:
        mode = "constrained_beam_search"
    elif _field(config, "num_beams") == 1:
        if _field(config, "do_sample") is False:
            top_k, penalty_alpha = _field(config, "top_k"), _field(config, "penalty_alpha")
            contrastive = top_k is not None and top_k > 1 and penalty_alpha is not None and penalty_alpha > 0
            mode = "contrastive_search" if contrastive else "greedy_search"
        else:
            mode = "sample"
    elif _field(config, "num_beam_groups") > 1:
        mode = "group_beam_search"
    elif _field(config, "do_sample") is True:
        mode = "beam_sample"
    else:
        mode = "beam_search"
    if mode in ("greedy_search", "sample"):
        if _field(config, "prompt_lookup_num_tokens") is not None or _field(config, "assistant_early_exit") is not None:
            mode = "assisted_generation"
        elif _field(config, "dola_layers") is not None:
            mode = "dola_generation"
    return mode


def logits_processors(effective: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The repetition/n-gram processors and sampling warpers `_get_logits_processor` (4.57.6) builds, in order.

    Each entry is (class name, its main parameters as the instance stores them). Processors of the rarer fields
    (bad words, forced tokens, suppression, guidance, watermarking, ...) are not listed; `engine_settings` rejects
    those fields. `EtaLogitsWarper` stores its epsilon as a tensor, so only `min_tokens_to_keep` is given for it.
    """
    processors: list[tuple[str, dict[str, Any]]] = []
    repetition_penalty = _field(effective, "repetition_penalty")
    if repetition_penalty is not None and repetition_penalty != 1.0:
        processors.append(("RepetitionPenaltyLogitsProcessor", {"penalty": repetition_penalty}))
    ngram = _field(effective, "no_repeat_ngram_size")
    if ngram is not None and ngram > 0:
        processors.append(("NoRepeatNGramLogitsProcessor", {"ngram_size": ngram}))
    if not _field(effective, "do_sample"):
        return processors
    keep = 1
    if _field(effective, "num_beams") > 1:
        eos = _field(effective, "eos_token_id")
        keep = 2 if eos is None else (len(eos) if isinstance(eos, list | tuple) else 1) + 1
    temperature = _field(effective, "temperature")
    if temperature is not None and temperature != 1.0:
        processors.append(("TemperatureLogitsWarper", {"temperature": temperature}))
    top_k = _field(effective, "top_k")
    if top_k is not None and top_k != 0:
        processors.append(("TopKLogitsWarper", {"top_k": max(top_k, keep)}))
    top_p = _field(effective, "top_p")
    if top_p is not None and top_p < 1.0:
        processors.append(("TopPLogitsWarper", {"top_p": top_p, "min_tokens_to_keep": keep}))
    min_p = _field(effective, "min_p")
    if min_p is not None:
        processors.append(("MinPLogitsWarper", {"min_p": min_p, "min_tokens_to_keep": keep}))
    typical_p = _field(effective, "typical_p")
    if typical_p is not None and typical_p < 1.0:
        processors.append(("TypicalLogitsWarper", {"mass": typical_p, "min_tokens_to_keep": keep}))
    epsilon = _field(effective, "epsilon_cutoff")
    if epsilon is not None and 0.0 < epsilon < 1.0:
        processors.append(("EpsilonLogitsWarper", {"epsilon": epsilon, "min_tokens_to_keep": keep}))
    eta = _field(effective, "eta_cutoff")
    if eta is not None and 0.0 < eta < 1.0:
        processors.append(("EtaLogitsWarper", {"min_tokens_to_keep": keep}))
    return processors


def _unsupported(config: Mapping[str, Any]) -> list[str]:
    """The fields of `config` that would make `generate` do something other than (filtered) ancestral sampling."""
    fields = []
    for key in (
        "constraints",
        "force_words_ids",
        "prompt_lookup_num_tokens",
        "assistant_early_exit",
        "dola_layers",
        "min_p",
        "bad_words_ids",
        "forced_bos_token_id",
        "forced_eos_token_id",
        "exponential_decay_length_penalty",
        "suppress_tokens",
        "begin_suppress_tokens",
        "sequence_bias",
        "watermarking_config",
        "min_new_tokens",
    ):
        if _field(config, key) is not None and not (key == "min_new_tokens" and _field(config, key) <= 0):
            fields.append(key)
    for key in ("num_beams", "repetition_penalty", "encoder_repetition_penalty", "guidance_scale"):
        value = _field(config, key)
        if value is not None and value != 1:
            fields.append(key)
    for key in ("no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "min_length"):
        value = _field(config, key)
        if value is not None and value > 0:
            fields.append(key)
    typical_p = _field(config, "typical_p")
    if typical_p is not None and typical_p < 1.0:
        fields.append("typical_p")
    for key in ("epsilon_cutoff", "eta_cutoff"):
        value = _field(config, key)
        if value is not None and 0.0 < value < 1.0:
            fields.append(key)
    if _field(config, "remove_invalid_values") is True:
        fields.append("remove_invalid_values")
    if generation_mode(config) == "contrastive_search":
        fields.append("penalty_alpha")
    return fields


def engine_settings(effective: Mapping[str, Any]) -> tuple[bool, float, float, int | None]:
    """(do_sample, temperature, top_p, top_k) for the project's sampling engine, from `effective_settings`.

    Unset warpers become their neutral values (temperature 1, top_p 1, top_k None). Greedy decoding returns
    (False, 1.0, 1.0, None). The engine samples with temperature and top-p only; top_k is returned for the caller
    to handle. Raises ValueError naming the fields the engine cannot apply (beam search, min_p, typical_p < 1,
    repetition penalties, n-gram bans, ...) or a non-positive sampling temperature.
    """
    fields = _unsupported(effective)
    if fields:
        raise ValueError(f"generation settings the sampling engine cannot apply: {', '.join(fields)}")
    if not _field(effective, "do_sample"):
        return False, 1.0, 1.0, None
    temperature = _field(effective, "temperature")
    temperature = 1.0 if temperature is None else float(temperature)
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 for sampling, got {temperature}")
    top_p = _field(effective, "top_p")
    top_p = 1.0 if top_p is None else min(float(top_p), 1.0)
    if not top_p > 0:
        raise ValueError(f"top_p must be > 0 for sampling, got {top_p}")
    top_k = _field(effective, "top_k")
    return True, temperature, top_p, (None if top_k is None or top_k == 0 else max(int(top_k), 1))
