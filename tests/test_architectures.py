"""The twelve models' architectures in miniature, loaded the way the workflow loads a checkpoint.

Each miniature is the hub's config.json of its models with the dimensions shrunk (hidden 32-64, 2 layers, 2-4
heads, sliding windows of 4) and every structural feature kept: the classes and `architectures`, the real
vocabulary size (so the special tokens sit at their real ids), tied or untied embeddings, Qwen3's and Gemma-3's
q/k norms, Gemma-3's sliding/full layer pattern, query_pre_attn_scalar and dual RoPE, Gemma-3 4B-27B's SigLIP
vision tower, Llama-3.2's llama3 RoPE scaling, GPT-OSS's experts, attention sinks and yarn RoPE. Each folder also
holds the hub's generation_config.json and a word-level tokenizer with the real special tokens at their real ids.

Checked at CPU scale, for what matters at GPU scale: the class `AutoModelForCausalLM.from_pretrained` builds and
a training step on text-only input through the pipeline's forward; where LoRA attaches; what Accelerate's FSDP
TRANSFORMER_BASED_WRAP (launch/fsdp.yaml) wraps; the stop tokens; decoding with a cache past the sliding window.
Models are random (seeded) and float32; GPT-OSS's checkpoint is MXFP4-quantized, the miniature is not.
"""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import CONFIG_MAPPING, PreTrainedTokenizerFast

from calibft.data.trie import TokenizedValues, build_trie
from calibft.lm.generation import decode, stop_token_ids
from calibft.lm.models import attach_lora, load_for_inference, load_model, load_tokenizer, padding_id
from calibft.lm.trie_walk import node_log_probs
from calibft.pipeline.config import read_config
from calibft.training.objectives import completion_cross_entropy, completion_logits, make_batch
from tests.fsdp_policy import wrap_policy, wrapped_modules

ROOT = Path(__file__).resolve().parents[1]
CONFIG = read_config(ROOT / "config.yaml")
LORA = CONFIG["training"]["lora"]  # r 16, alpha 32, dropout 0.05, q/k/v/o_proj
ATTENTION = [f"self_attn.{name}" for name in LORA["target_modules"]]
WORDS = 1000  # ordinary tokens are WORDS..WORDS+31: inside every vocabulary, clear of the special tokens


@dataclass(frozen=True)
class Miniature:
    covers: tuple[str, ...]  # the config.yaml models (hf_id) of this architecture
    config: dict  # config.json as the hub has it, dimensions shrunk
    generation: dict  # generation_config.json as the hub has it
    specials: dict[str, int]  # the tokenizer's special tokens at their real ids
    eos: str
    bos: str | None
    pad: str | None
    cls: str  # what AutoModelForCausalLM.from_pretrained builds
    language_model: str  # the decoder stack: LoRA and the decoder layers live under it
    layer: str  # the decoder layer class
    fsdp_classes: frozenset[str]  # what TRANSFORMER_BASED_WRAP wraps
    stops: tuple[int, ...]


QWEN3_SMALL = {  # Qwen3-0.6B: tied embeddings, heads x head_dim (64) != hidden (32) as 16 x 128 != 1024
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 16,
    "hidden_act": "silu",
    "hidden_size": 32,
    "initializer_range": 0.02,
    "intermediate_size": 64,
    "max_position_embeddings": 40960,
    "max_window_layers": 2,
    "model_type": "qwen3",
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
QWEN3_GENERATION = {
    "bos_token_id": 151643,
    "do_sample": True,
    "eos_token_id": [151645, 151643],
    "pad_token_id": 151643,
    "temperature": 0.6,
    "top_k": 20,
    "top_p": 0.95,
}
QWEN3_SPECIALS = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645}
GEMMA3_TEXT = {  # Gemma-3-1B-it, a layer pattern of 2 (sliding, full) for the real 6
    "architectures": ["Gemma3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "attn_logit_softcapping": None,
    "bos_token_id": 2,
    "cache_implementation": "hybrid",
    "eos_token_id": [1, 106],
    "final_logit_softcapping": None,
    "head_dim": 16,
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 32,
    "initializer_range": 0.02,
    "intermediate_size": 64,
    "max_position_embeddings": 32768,
    "model_type": "gemma3_text",
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 1,
    "pad_token_id": 0,
    "query_pre_attn_scalar": 16,
    "rms_norm_eps": 1e-06,
    "rope_local_base_freq": 10000,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": 4,
    "sliding_window_pattern": 2,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": 262144,
}
GEMMA3_MULTIMODAL = {  # Gemma-3-4B/12B/27B-it; query_pre_attn_scalar != head_dim as the 27B's 168 vs 128
    "architectures": ["Gemma3ForConditionalGeneration"],
    "boi_token_index": 255999,
    "eoi_token_index": 256000,
    "eos_token_id": [1, 106],
    "image_token_index": 262144,
    "initializer_range": 0.02,
    "mm_tokens_per_image": 4,
    "model_type": "gemma3",
    "text_config": {
        "head_dim": 16,
        "hidden_size": 32,
        "intermediate_size": 64,
        "model_type": "gemma3_text",
        "num_attention_heads": 2,
        "num_hidden_layers": 2,
        "num_key_value_heads": 1,
        "query_pre_attn_scalar": 8,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "sliding_window": 4,
        "sliding_window_pattern": 2,
    },
    "torch_dtype": "bfloat16",
    "vision_config": {
        "hidden_size": 32,
        "image_size": 28,
        "intermediate_size": 64,
        "model_type": "siglip_vision_model",
        "num_attention_heads": 2,
        "num_hidden_layers": 2,
        "patch_size": 14,
        "vision_use_head": False,
    },
}
GEMMA3_GENERATION = {
    "bos_token_id": 2,
    "cache_implementation": "hybrid",
    "do_sample": True,
    "eos_token_id": [1, 106],
    "pad_token_id": 0,
    "top_k": 64,
    "top_p": 0.95,
}
GEMMA3_SPECIALS = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "<start_of_turn>": 105, "<end_of_turn>": 106}
LLAMA32 = {  # Llama-3.2-1B/3B-Instruct (both tie their embeddings)
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "head_dim": 16,
    "hidden_act": "silu",
    "hidden_size": 64,
    "initializer_range": 0.02,
    "intermediate_size": 128,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": 128256,
}
LLAMA32_SPECIALS = {
    "<|begin_of_text|>": 128000,
    "<|end_of_text|>": 128001,
    "<|start_header_id|>": 128006,
    "<|end_header_id|>": 128007,
    "<|eom_id|>": 128008,
    "<|eot_id|>": 128009,
}
GPT_OSS = {  # GPT-OSS-20B without its MXFP4 quantization_config: 4 experts (2 per token) for 32 (4)
    "architectures": ["GptOssForCausalLM"],
    "attention_bias": True,
    "attention_dropout": 0.0,
    "eos_token_id": 200002,
    "experts_per_token": 2,
    "head_dim": 16,
    "hidden_act": "silu",
    "hidden_size": 32,
    "initial_context_length": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 32,
    "layer_types": ["sliding_attention", "full_attention"],
    "max_position_embeddings": 131072,
    "model_type": "gpt_oss",
    "num_attention_heads": 4,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "num_local_experts": 4,
    "output_router_logits": False,
    "pad_token_id": 199999,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "factor": 32.0,
        "original_max_position_embeddings": 4096,
        "rope_type": "yarn",
        "truncate": False,
    },
    "rope_theta": 150000,
    "router_aux_loss_coef": 0.9,
    "sliding_window": 4,
    "swiglu_limit": 7.0,
    "tie_word_embeddings": False,
    "use_cache": True,
    "vocab_size": 201088,
}
GPT_OSS_SPECIALS = {
    "<|startoftext|>": 199998,
    "<|endoftext|>": 199999,
    "<|return|>": 200002,
    "<|channel|>": 200005,
    "<|start|>": 200006,
    "<|end|>": 200007,
    "<|message|>": 200008,
    "<|call|>": 200012,
}

MINIATURES = {
    "qwen3-tied": Miniature(
        ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B", "Qwen/Qwen3-4B"),
        QWEN3_SMALL, QWEN3_GENERATION, QWEN3_SPECIALS, "<|im_end|>", None, "<|endoftext|>",
        "Qwen3ForCausalLM", "model", "Qwen3DecoderLayer", frozenset({"Qwen3DecoderLayer"}), (151643, 151645),
    ),
    "qwen3-untied": Miniature(
        ("Qwen/Qwen3-8B", "Qwen/Qwen3-14B"),
        {**QWEN3_SMALL, "hidden_size": 64, "tie_word_embeddings": False},
        QWEN3_GENERATION, QWEN3_SPECIALS, "<|im_end|>", None, "<|endoftext|>",
        "Qwen3ForCausalLM", "model", "Qwen3DecoderLayer", frozenset({"Qwen3DecoderLayer"}), (151643, 151645),
    ),
    "gemma3-text": Miniature(
        ("google/gemma-3-1b-it",),
        GEMMA3_TEXT, GEMMA3_GENERATION, GEMMA3_SPECIALS, "<eos>", "<bos>", "<pad>",
        "Gemma3ForCausalLM", "model", "Gemma3DecoderLayer", frozenset({"Gemma3DecoderLayer"}), (1, 106),
    ),
    "gemma3-multimodal": Miniature(
        ("google/gemma-3-4b-it", "google/gemma-3-12b-it", "google/gemma-3-27b-it"),
        GEMMA3_MULTIMODAL, GEMMA3_GENERATION, GEMMA3_SPECIALS, "<eos>", "<bos>", "<pad>",
        "Gemma3ForConditionalGeneration", "model.language_model", "Gemma3DecoderLayer",
        frozenset({"Gemma3DecoderLayer", "SiglipEncoderLayer", "SiglipVisionEmbeddings"}), (1, 106),
    ),
    "llama3.2": Miniature(
        ("meta-llama/Llama-3.2-1B-Instruct", "meta-llama/Llama-3.2-3B-Instruct"),
        LLAMA32,
        {"bos_token_id": 128000, "do_sample": True, "eos_token_id": [128001, 128008, 128009], "temperature": 0.6,
         "top_p": 0.9},
        LLAMA32_SPECIALS, "<|eot_id|>", "<|begin_of_text|>", None,
        "LlamaForCausalLM", "model", "LlamaDecoderLayer", frozenset({"LlamaDecoderLayer"}),
        (128001, 128008, 128009),
    ),
    "gpt-oss": Miniature(
        ("openai/gpt-oss-20b",),
        GPT_OSS,
        {"bos_token_id": 199998, "do_sample": True, "eos_token_id": [200002, 199999, 200012], "pad_token_id": 199999},
        GPT_OSS_SPECIALS, "<|return|>", "<|startoftext|>", "<|endoftext|>",
        "GptOssForCausalLM", "model", "GptOssDecoderLayer", frozenset({"GptOssDecoderLayer"}),
        (199999, 200002, 200012),
    ),
}  # fmt: skip
NAMES = list(MINIATURES)
VISION_ATTENTION = sorted(f"model.vision_tower.encoder.layers.{i}.self_attn.{p}_proj" for i in (0, 1) for p in "qkv")


def _tokenizer(mini: Miniature) -> PreTrainedTokenizerFast:
    vocab = {**mini.specials, **{f"w{i}": WORDS + i for i in range(32)}}
    backend = Tokenizer(models.WordLevel(vocab=vocab))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=mini.eos, bos_token=mini.bos, pad_token=mini.pad)


def _save(mini: Miniature, folder: Path) -> Path:
    """The miniature as a checkpoint folder: save_pretrained, the hub's generation config, the tokenizer."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        config = CONFIG_MAPPING[mini.config["model_type"]].from_dict(copy.deepcopy(mini.config))
        getattr(transformers, mini.config["architectures"][0])(config).save_pretrained(folder)
    (folder / "generation_config.json").write_text(json.dumps(mini.generation, indent=2))
    _tokenizer(mini).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    return {name: _save(mini, tmp_path_factory.mktemp(name)) for name, mini in MINIATURES.items()}


def _layers(mini: Miniature) -> list[str]:
    return [f"{mini.language_model}.layers.{i}" for i in range(2)]


def _lora_modules(model) -> set[str]:
    """The names (in the base model) of the modules a LoRA adapter wraps."""
    from peft.tuners.lora import LoraLayer

    return {name for name, module in model.get_base_model().named_modules() if isinstance(module, LoraLayer)}


def _batch(pad_id: int):
    """Two prompts of different lengths (left padding) with completions of 3 and 2 tokens, ids in every vocab."""
    prompts = [[WORDS + i for i in range(6)], [WORDS + 7, WORDS + 3, WORDS + 9, WORDS + 1]]
    completions = np.array([[WORDS + 11, WORDS + 12, WORDS + 13], [WORDS + 14, WORDS + 15, -1]])
    return make_batch(prompts, completions, np.array([3, 2]), pad_id)


def test_every_configured_model_has_a_miniature():
    configured = sorted(model.get("hf_id") for model in CONFIG["models"].values())
    assert sorted(hf_id for mini in MINIATURES.values() for hf_id in mini.covers) == configured
    assert len(configured) == 12


@pytest.mark.parametrize("name", NAMES)
def test_loading_builds_the_checkpoints_class_with_its_structure(folders, name):
    mini, folder = MINIATURES[name], folders[name]
    model = load_model(folder, "bf16", "cpu")
    assert type(model).__name__ == mini.cls and model.dtype == torch.float32  # fp32 on the CPU
    assert json.loads((folder / "config.json").read_text())["architectures"] == [mini.cls]
    text = model.config.get_text_config()
    layers = [model.get_submodule(layer) for layer in _layers(mini)]
    assert [type(layer).__name__ for layer in layers] == [mini.layer] * 2
    assert model.get_output_embeddings().weight.shape[0] == mini.config.get("vocab_size", 262208)
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert tied == (name not in ("qwen3-untied", "gpt-oss"))
    attention = layers[0].self_attn
    assert hasattr(attention, "q_norm") == name.startswith(("qwen3", "gemma3"))
    if name.startswith("gemma3"):
        assert text.layer_types == ["sliding_attention", "full_attention"] and text.sliding_window == 4
        assert text.rope_parameters["sliding_attention"]["rope_theta"] == 10000
        assert attention.scaling == text.query_pre_attn_scalar**-0.5
    if name == "gemma3-multimodal":
        assert text.query_pre_attn_scalar != text.head_dim
        assert text.rope_parameters["full_attention"]["rope_type"] == "linear"
        assert type(model.model.vision_tower).__name__ == "SiglipVisionModel"
    if name == "llama3.2":
        assert text.rope_parameters["rope_type"] == "llama3"
    if name == "gpt-oss":
        assert text.layer_types == ["sliding_attention", "full_attention"]
        assert text.rope_parameters["rope_type"] == "yarn"
        assert attention.sinks.shape == (4,)
        experts = layers[0].mlp.experts
        assert isinstance(experts.gate_up_proj, torch.nn.Parameter) and experts.gate_up_proj.shape[0] == 4
        assert not any(isinstance(m, torch.nn.Linear) for m in experts.modules())  # no module LoRA could name


@pytest.mark.parametrize("name", NAMES)
def test_a_training_step_on_text_only_input(folders, name):
    """The pipeline's forward (left-padded prompts and completions, `completion_logits`) and the hard loss's
    backward: finite, and the gradient reaches the LoRA weights only."""
    folder = folders[name]
    model = attach_lora(load_model(folder, "bf16", "cpu"), LORA)
    model.train()
    batch = _batch(padding_id(load_tokenizer(folder)))
    logits = completion_logits(model, batch)
    assert logits.shape == (5, model.get_output_embeddings().weight.shape[0])
    loss = completion_cross_entropy(logits, batch.step_target)
    loss.backward()
    assert math.isfinite(loss.item())
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    assert len(trainable) == 2 * len(_lora_modules(model))
    for n, p in trainable.items():  # B starts at zero, so A's first gradient is zero; B's is not
        assert p.grad is not None and torch.isfinite(p.grad).all()
        assert (p.grad.abs().sum() > 0) == (".lora_B." in n), n


@pytest.mark.parametrize("name", NAMES)
def test_lora_attaches_to_the_language_models_attention_only(folders, name):
    mini = MINIATURES[name]
    base = load_model(folders[name], "bf16", "cpu")
    named = {n for n, _ in base.named_modules() if n.rsplit(".", 1)[-1] in LORA["target_modules"]}
    outside = sorted(n for n in named if not n.startswith(f"{mini.language_model}."))
    model = attach_lora(base, LORA)
    assert _lora_modules(model) == {f"{layer}.{module}" for layer in _layers(mini) for module in ATTENTION}
    excluded = model.peft_config["default"].exclude_modules
    if name == "gemma3-multimodal":
        # SigLIP's attention names q_proj, k_proj, v_proj (and out_proj): peft's suffix match would take them
        assert outside == VISION_ATTENTION and sorted(excluded) == VISION_ATTENTION
    else:
        assert outside == [] and excluded is None  # the adapter config of the text-only models is unchanged


@pytest.mark.parametrize("name", ["gemma3-multimodal", "gpt-oss"])
def test_the_saved_adapter_loads_for_inference_on_the_same_modules(folders, tmp_path, name):
    """A trained adapter saved and loaded by `load_for_inference` wraps the same modules and computes the same."""
    folder = folders[name]
    model = attach_lora(load_model(folder, "bf16", "cpu"), LORA)
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(1)
        for n, p in model.named_parameters():
            if ".lora_B." in n:
                p.normal_(std=0.5)
    model.save_pretrained(tmp_path)
    loaded = load_for_inference(folder, "bf16", adapter=tmp_path)
    assert _lora_modules(loaded) == _lora_modules(model)
    base = load_model(folder, "bf16", "cpu").eval()
    ids = torch.tensor([[WORDS + i for i in range(7)]])
    with torch.no_grad():
        got, want, plain = (m.eval()(input_ids=ids).logits for m in (loaded, model, base))
    assert torch.allclose(got, want, rtol=0, atol=1e-5)
    assert (got - plain).abs().max() > 1e-2  # the adapter acts


def test_accelerates_default_wrap_fails_on_the_bare_multimodal_gemma(folders, fsdp_env):
    """Why attach_lora prunes `_no_split_modules`: transformers unites the names of every sub-model class, and
    Accelerate raises on the first one the model lacks (the SigLIP head and text embeddings Gemma-3 has none of)."""
    model = load_model(folders["gemma3-multimodal"], "bf16", "cpu")
    missing = {n for n in model._no_split_modules} - {type(m).__name__ for m in model.modules()}
    assert missing == {"SiglipMultiheadAttentionPoolingHead", "SiglipTextEmbeddings"}
    with pytest.raises(ValueError, match="Could not find the transformer layer class Siglip"):
        wrap_policy(model, fsdp_env)


@pytest.mark.parametrize("name", NAMES)
def test_fsdp_wraps_each_decoder_layer(folders, fsdp_env, name):
    """What launch/fsdp.yaml's TRANSFORMER_BASED_WRAP wraps in the LoRA model that train.py hands to
    `accelerator.prepare`: each decoder layer, as its own unit; the PEFT wrapper changes nothing."""
    mini = MINIATURES[name]
    model = attach_lora(load_model(folders[name], "bf16", "cpu"), LORA)
    policy = wrap_policy(model, fsdp_env)
    assert {cls.__name__ for cls in policy.keywords["transformer_layer_cls"]} == mini.fsdp_classes
    unwrapped = wrap_policy(model.get_base_model(), fsdp_env)
    assert {cls.__name__ for cls in unwrapped.keywords["transformer_layer_cls"]} == mini.fsdp_classes
    prefix = "base_model.model."
    wrapped = set(wrapped_modules(model, policy))
    decoder = {n for n in wrapped if n.startswith(f"{prefix}{mini.language_model}.")}
    assert decoder == {prefix + layer for layer in _layers(mini)}
    vision = {n.removeprefix(prefix) for n in wrapped - decoder}
    expected = {"model.vision_tower.embeddings", *(f"model.vision_tower.encoder.layers.{i}" for i in (0, 1))}
    assert vision == (expected if name == "gemma3-multimodal" else set())


@pytest.mark.parametrize("name", NAMES)
def test_stop_tokens_come_from_the_generation_config_and_tokenizer(folders, tmp_path, name):
    mini, folder = MINIATURES[name], folders[name]
    tokenizer = load_tokenizer(folder)
    model = load_for_inference(folder, "bf16")
    assert tokenizer.eos_token_id == mini.specials[mini.eos]
    assert model.generation_config.eos_token_id == mini.generation["eos_token_id"]
    assert stop_token_ids(model, tokenizer) == list(mini.stops)
    if name.startswith(("qwen3", "gpt-oss")):  # config.json names one EOS; generation_config.json lists the rest
        assert mini.stops != (mini.config["eos_token_id"],)
    attach_lora(load_model(folder, "bf16", "cpu"), LORA).save_pretrained(tmp_path)
    adapted = load_for_inference(folder, "bf16", adapter=tmp_path)
    assert stop_token_ids(adapted, tokenizer) == list(mini.stops)


@pytest.mark.parametrize("name", NAMES)
def test_cached_decoding_past_the_sliding_window_matches_recomputation(folders, name):
    """`calibft.lm.generation.decode` with a copied, repeated and shrunk cache: every step's logits equal those of a
    cache-free forward over the prompt and the tokens so far (prompt of 6 and up to 5 new tokens: a window of 4)."""
    mini, folder = MINIATURES[name], folders[name]
    model = load_for_inference(folder, "bf16")
    prompt = [WORDS + i for i in (5, 1, 4, 1, 5, 9)]
    stop = mini.stops[0]
    table = torch.tensor([[WORDS + 20 + i for i in range(5)], [WORDS + 30, WORDS + 31, stop, WORDS, WORDS]])
    seen: list[tuple[int, torch.Tensor, torch.Tensor]] = []

    def choose(logits: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        step = len(seen)
        seen.append((step, rows.clone(), logits.clone()))
        return table[rows, step]

    generations = decode(model, prompt, 2, 5, mini.stops, choose)
    assert generations.token_ids == [table[0].tolist(), table[1, :2].tolist()]
    assert generations.finished.tolist() == [False, True]
    with torch.no_grad():
        for step, rows, logits in seen:
            for row, row_logits in zip(rows.tolist(), logits, strict=True):
                ids = torch.tensor([prompt + table[row, :step].tolist()])
                full = model(input_ids=ids, use_cache=False).logits[0, -1].float()
                assert torch.allclose(row_logits, full, rtol=0, atol=1e-4), (step, row)


@pytest.mark.parametrize("name", NAMES)
def test_the_exact_walk_past_the_sliding_window_matches_scoring_each_value_alone(folders, name):
    """`calibft.lm.trie_walk`'s tree masks on each architecture (sliding windows of 4 after a prompt of 6, attention
    sinks, multimodal Gemma-3): every node's log-probability equals the sum along its path of a cache-free forward
    over the prompt and the node's prefix."""
    mini, folder = MINIATURES[name], folders[name]
    model = load_for_inference(folder, "fp32")
    prompt = [WORDS + i for i in (5, 1, 4, 1, 5, 9)]
    stop = mini.stops[0]
    values = [[WORDS + 20 + i for i in range(k)] + [stop] for k in range(1, 6)]
    values += [[WORDS + 20, WORDS + 30 + i, stop] for i in range(3)] + [[WORDS + 31, stop]]
    trie = build_trie(TokenizedValues.from_lists(values), np.full(len(values), 1 / len(values)))
    log_probs = node_log_probs(model, prompt, trie, batch_nodes=3)
    with torch.no_grad():
        for value, leaf in zip(values, trie.value_leaf, strict=True):
            ids = torch.tensor([prompt + value])
            steps = torch.log_softmax(model(input_ids=ids, use_cache=False).logits[0, len(prompt) - 1 : -1], dim=-1)
            expected = float(steps[torch.arange(len(value)), torch.tensor(value)].double().sum())
            assert log_probs[leaf] == pytest.approx(expected, abs=1e-4), value


FSDP_RANK = """
import json, sys
import torch, torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from accelerate.utils import FullyShardedDataParallelPlugin
from calibft.lm.models import attach_lora, load_model
from calibft.training.objectives import completion_cross_entropy, completion_logits, make_batch
import numpy as np

rank, store, lora, folders = int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3]), sys.argv[4:]
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
results = {}
for folder in folders:
    torch.manual_seed(0)
    model = attach_lora(load_model(folder, "bf16", "cpu"), lora)
    plugin = FullyShardedDataParallelPlugin(sync_module_states=False, cpu_ram_efficient_loading=False)
    plugin.set_auto_wrap_policy(model)
    model = FSDP(
        model, sharding_strategy=plugin.sharding_strategy, auto_wrap_policy=plugin.auto_wrap_policy,
        backward_prefetch=plugin.backward_prefetch, use_orig_params=plugin.use_orig_params,
        device_id=torch.device("cpu"),
    )
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    words = 1000 + 8 * rank
    batch = make_batch([[words + i for i in range(5)]], np.array([[words + 6, words + 7]]), np.array([2]), 0)
    losses = []
    for _ in range(3):
        loss = completion_cross_entropy(completion_logits(model, batch), batch.step_target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    units = [n.replace("_fsdp_wrapped_module.", "") for n, m in model.named_modules() if isinstance(m, FSDP)]
    results[folder] = {"losses": losses, "units": sorted(units)}
print(json.dumps(results))
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_fsdp_full_shard_trains_on_two_cpu_processes(folders, fsdp_env, tmp_path):
    """The wrap above, under torch FSDP with launch/fsdp.yaml's sharding, prefetch and use_orig_params, on two
    gloo processes: three optimizer steps of the LoRA model per miniature (tied embeddings shared across units,
    the vision tower's units never run); the loss of each rank falls."""
    names = ["qwen3-tied", "gemma3-multimodal", "gpt-oss"]
    paths = [str(folders[name]) for name in names]
    env = {**os.environ, **fsdp_env, "OMP_NUM_THREADS": "1"}
    argv = [str(tmp_path / "store"), json.dumps(LORA), *paths]
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", FSDP_RANK, str(rank), *argv], env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True
        )
        for rank in range(2)
    ]
    outputs = [rank.communicate(timeout=240)[0] for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0]
    results = [json.loads(output.strip().splitlines()[-1]) for output in outputs]
    for name, path in zip(names, paths, strict=True):
        losses = np.array([ranked[path]["losses"] for ranked in results])  # [rank, step], each rank its own batch
        assert np.isfinite(losses).all() and losses[:, -1].mean() < losses[:, 0].mean(), name
        units = {u.removeprefix("base_model.model.") for u in results[0][path]["units"] if u}
        vision = {"model.vision_tower.embeddings", *(f"model.vision_tower.encoder.layers.{i}" for i in (0, 1))}
        assert units == set(_layers(MINIATURES[name])) | (vision if name == "gemma3-multimodal" else set()), name
