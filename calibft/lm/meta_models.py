"""Models without weights: each checkpoint's published configuration, built on torch's meta device.

Tensors on the meta device have shapes and dtypes but no storage, so a 27B model costs nothing to build and a
batch run through it allocates nothing; `calibft.pipeline.memory` counts the bytes such a batch would allocate
and `benchmarks/gpu_check.py` builds its random-weight models from the same configurations.

A meta tensor has no values either, and transformers reads the values of a 2D attention mask to skip it when
it is all ones. A model built here that attends with sdpa attends with `META_SDPA` instead: the same attention,
whose masks are built whenever a 2D mask is given, as for a padded batch, the largest a runner feeds.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path

from calibft.core.repository import REFERENCE

CHECKPOINTS = REFERENCE / "checkpoints"  # each paper model's published config.json, by config.yaml's model key
META_SDPA = "sdpa_without_mask_reads"  # the attention implementation of the meta models that use sdpa


def checkpoint_config(model_key: str, hf_id: str, folder: Path = CHECKPOINTS) -> dict:
    """A checkpoint's published config.json: as recorded under `folder`/{model_key}/ for the paper's models, else
    from the Hugging Face hub (or its local cache) by `hf_id`."""
    path = folder / model_key / "config.json"
    if path.exists():
        return json.loads(path.read_text())
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(hf_id).to_dict()
    except OSError as err:
        raise FileNotFoundError(
            f"no configuration of model {model_key!r}: {path} is not recorded and {hf_id} cannot be read from the "
            f"Hugging Face hub or its cache ({err})"
        ) from err


def text_config(config: dict) -> dict:
    """The language model's part of a checkpoint configuration (Gemma-3's `text_config`, else all of it)."""
    return config.get("text_config", config)


def with_layers(config: Mapping, layers: int) -> dict:
    """`config` with its decoder cut to the first `layers` layers (their attention types kept)."""
    config = copy.deepcopy(dict(config))
    text = text_config(config)
    text["num_hidden_layers"] = layers
    if "layer_types" in text:
        text["layer_types"] = text["layer_types"][:layers]
    return config


def as_loaded(config: Mapping) -> dict:
    """A checkpoint's configuration as the pinned environment loads it: GPT-OSS's MXFP4 quantization left out, since
    without the `kernels` package transformers dequantizes the experts to bf16 when it loads them."""
    config = copy.deepcopy(dict(config))
    config.pop("quantization_config", None)
    return config


def _sdpa_mask_without_reads(*args, attention_mask=None, allow_is_causal_skip: bool = True, **kwargs):
    """transformers' sdpa mask, never skipped where a 2D mask is given: whether one is all ones is a value."""
    from transformers.masking_utils import sdpa_mask

    skip = allow_is_causal_skip and attention_mask is None
    return sdpa_mask(*args, attention_mask=attention_mask, allow_is_causal_skip=skip, **kwargs)


def _register_meta_sdpa() -> None:
    """Register `META_SDPA` with transformers (its attention and mask interfaces, as for any custom attention)."""
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    AttentionInterface.register(META_SDPA, sdpa_attention_forward)
    AttentionMaskInterface.register(META_SDPA, _sdpa_mask_without_reads)


def meta_model(config: Mapping, layers: int | None = None, classifier: bool = False, dtype: str = "bfloat16"):
    """The model that `calibft.lm.models.load_model` builds from `config` on a GPU (bf16), on the meta device, its
    decoder cut to `layers` layers when given, its quantization left out as loaded (`as_loaded`); with
    `classifier`, the sequence-classification model that `calibft.lm.models.load_classifier` builds, in `dtype`.
    Where it attends with sdpa, it attends with `META_SDPA`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification

    config = as_loaded(with_layers(config, layers) if layers is not None else config)
    built = AutoConfig.for_model(config.pop("model_type"), **config)
    auto = AutoModelForSequenceClassification if classifier else AutoModelForCausalLM
    with torch.device("meta"):
        model = auto.from_config(built, dtype=getattr(torch, dtype))
    if model.config._attn_implementation == "sdpa":
        _register_meta_sdpa()
        model.set_attn_implementation(META_SDPA)
    return model
