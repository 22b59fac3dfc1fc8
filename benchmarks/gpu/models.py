"""The models of the GPU check: the full-size models' shapes from their checkpoints' published config.json
(reference/checkpoints/), their configurations at full or toy size, and building them with random weights."""

from __future__ import annotations

import torch
from transformers import AutoConfig, AutoModelForCausalLM, Gemma3ForConditionalGeneration, PretrainedConfig

from benchmarks.gpu.settings import CONFIG
from calibft.lm.meta_models import as_loaded, checkpoint_config

# The full-size models, smallest first: each from its checkpoint's published config.json (reference/checkpoints/);
# Qwen3-14B is the largest whose LoRA training fits one 80 GB GPU without FSDP
MODELS = ("qwen3_0p6b", "gemma3_4b_it", "qwen3_8b", "qwen3_14b")


def checkpoint(name: str) -> dict:
    return checkpoint_config(name, CONFIG["models"][name]["hf_id"])


# --tiny: toy widths for every text stack (Gemma-3's attention scale follows its head size) and its vision tower
TINY_TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2}
TINY_HEAD_DIM = 16
TINY_VISION = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2}


def model_config(shape: dict, tokenizer, layers: int | None, tiny: bool) -> PretrainedConfig:
    """The configuration of `shape`, ending answers with the tokenizer's EOS; `tiny`: toy widths and the
    tokenizer's vocabulary; `layers`: that many decoder layers (and vision layers)."""
    shape = as_loaded(shape)
    model_type = shape.pop("model_type")
    text = shape.get("text_config", shape)
    text.update(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    if tiny:
        text.update(TINY_TEXT, vocab_size=len(tokenizer), head_dim=TINY_HEAD_DIM)
        if "query_pre_attn_scalar" in text:
            text["query_pre_attn_scalar"] = TINY_HEAD_DIM
        if "vision_config" in shape:
            shape["vision_config"].update(TINY_VISION)
    if layers is not None:
        text["num_hidden_layers"] = layers
        if "vision_config" in shape:
            shape["vision_config"]["num_hidden_layers"] = layers
    return AutoConfig.for_model(model_type, **shape)


def build(config: PretrainedConfig, device: torch.device, dtype: torch.dtype):
    """A randomly initialized model of `config` on `device` (Gemma-3 with its vision tower, as loaded)."""
    with torch.device(device):
        if config.model_type == "gemma3":
            return Gemma3ForConditionalGeneration._from_config(config, dtype=dtype)
        return AutoModelForCausalLM.from_config(config, dtype=dtype)
