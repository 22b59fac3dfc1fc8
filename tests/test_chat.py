"""Chat formatting for every model family, with stand-in tokenizers whose templates behave like the real ones.

The real tokenizers cannot be downloaded here, so each family gets a small byte-level BPE tokenizer with its
special tokens, its BOS behaviour and a reduced copy of its chat template:
- Qwen3: the demo model's tokenizer (no BOS; `enable_thinking=False` prefills an empty think block);
- Gemma-3: the template writes `{{ bos_token }}` and the tokenizer adds `<bos>` by default;
- Llama-3.2: the template writes `<|begin_of_text|>`, the tokenizer adds it by default, and the system header
  carries "Today Date" from `strftime_now` unless `date_string` is given;
- GPT-OSS (harmony): no BOS; the system header carries the current date and `Reasoning: {reasoning_effort}`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from calibft.data.trie import tokenize_values
from calibft.lm.chat import (
    ChatOptions,
    chat_prompt_ids,
    decode_output,
    encode_prompt,
    format_prompt,
    on_chat_date,
    strip_model_response,
    strip_reasoning,
    strip_think_tags,
    strip_thinking_trace,
)
from calibft.pipeline.config import read_config

REPO = Path(__file__).resolve().parents[1]

USER = "Sample one value from a Normal distribution with mean 0 and standard deviation 1."
SYSTEM = "Answer with one number."

GEMMA3_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    "{%- set first_user_prefix = '' -%}"
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '') }}"
    "{{ message['content'] | trim }}{{ '<end_of_turn>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}"
)

LLAMA32_TEMPLATE = (
    "{{- bos_token }}"
    "{%- if not date_string is defined %}"
    "{%- if strftime_now is defined %}{%- set date_string = strftime_now('%d %b %Y') %}"
    "{%- else %}{%- set date_string = '26 Jul 2024' %}{%- endif %}"
    "{%- endif %}"
    "{%- if messages[0]['role'] == 'system' %}"
    "{%- set system_message = messages[0]['content'] | trim %}{%- set messages = messages[1:] %}"
    "{%- else %}{%- set system_message = '' %}{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
    "{{- 'Cutting Knowledge Date: December 2023\\n' }}"
    "{{- 'Today Date: ' + date_string + '\\n\\n' }}"
    "{{- system_message }}{{- '<|eot_id|>' }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{{- message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)

HARMONY_TEMPLATE = (
    "{%- if reasoning_effort is not defined %}{%- set reasoning_effort = 'medium' %}{%- endif %}"
    "{{- '<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\\n' }}"
    "{{- 'Knowledge cutoff: 2024-06\\n' }}"
    "{{- 'Current date: ' + strftime_now('%Y-%m-%d') + '\\n\\n' }}"
    "{{- 'Reasoning: ' + reasoning_effort + '\\n\\n' }}"
    "{{- '# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>' }}"
    "{%- if messages[0].role in ['system', 'developer'] %}"
    "{{- '<|start|>developer<|message|># Instructions\\n\\n' + messages[0].content + '\\n\\n<|end|>' }}"
    "{%- set loop_messages = messages[1:] %}"
    "{%- else %}{%- set loop_messages = messages %}{%- endif %}"
    "{%- for message in loop_messages %}"
    "{{- '<|start|>' + message.role + '<|message|>' + message.content + '<|end|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start|>assistant' }}{%- endif %}"
)

HARMONY_HEADER = (
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
    "Knowledge cutoff: 2024-06\nCurrent date: DATE\n\nReasoning: low\n\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>"
)
FINAL = "<|channel|>final<|message|>"


def byte_level_tokenizer(
    specials: list[str], bos: str | None, eos: str, template: str, adds_bos: bool
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with these special tokens; with `adds_bos`, encoding prepends BOS by default."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([USER, SYSTEM, "user model assistant system 0.25 -3 17 1e-05"], trainer)
    if adds_bos:
        bos_id = tokenizer.token_to_id(bos)
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)]
        )
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=bos, eos_token=eos, chat_template=template)


@pytest.fixture(scope="module")
def gemma3() -> PreTrainedTokenizerFast:
    specials = ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"]
    return byte_level_tokenizer(specials, "<bos>", "<eos>", GEMMA3_TEMPLATE, adds_bos=True)


@pytest.fixture(scope="module")
def llama32() -> PreTrainedTokenizerFast:
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    return byte_level_tokenizer(specials, "<|begin_of_text|>", "<|eot_id|>", LLAMA32_TEMPLATE, adds_bos=True)


@pytest.fixture(scope="module")
def gpt_oss() -> PreTrainedTokenizerFast:
    specials = ["<|startoftext|>", "<|endoftext|>", "<|start|>", "<|message|>", "<|channel|>", "<|end|>"]
    specials += ["<|return|>", "<|call|>"]
    return byte_level_tokenizer(specials, "<|startoftext|>", "<|return|>", HARMONY_TEMPLATE, adds_bos=False)


QWEN3 = ChatOptions.from_config({"template_kwargs": {"enable_thinking": False}})
GPT_OSS = ChatOptions.from_config({"template_kwargs": {"reasoning_effort": "low"}, "assistant_prefix": FINAL})
PLAIN = ChatOptions.from_config({})
LLAMA32 = ChatOptions.from_config({"template_kwargs": {"date_string": "26 Jul 2024"}})


# ---- ChatOptions --------------------------------------------------------------------------------------------


def test_options_from_config_entries():
    assert PLAIN == ChatOptions() == ChatOptions.from_config(None)
    assert QWEN3.template_kwargs == {"enable_thinking": False} and QWEN3.assistant_prefix == ""
    assert GPT_OSS.template_kwargs == {"reasoning_effort": "low"} and GPT_OSS.assistant_prefix == FINAL
    assert ChatOptions.from_config({"system": SYSTEM}).system == SYSTEM


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"enable_thinking": False}, r"models\.m\.chat: unknown key 'enable_thinking' \(known: template_kwargs, "),
        ({"template_kwargs": ["x"]}, r"models\.m\.chat\.template_kwargs must be a mapping"),
        ({"template_kwargs": {"add_generation_prompt": False}}, r"may not set 'add_generation_prompt'"),
        ({"assistant_prefix": 3}, r"assistant_prefix must be a string"),
        ({"system": ["x"]}, r"system must be a string or null"),
        ({"date": "5 Aug 2025"}, r"models\.m\.chat\.date must be a day written YYYY-MM-DD"),
        ({"date": 20250805}, r"date must be a day written YYYY-MM-DD"),
        (["x"], r"models\.m\.chat must be a mapping"),
    ],
)
def test_options_reject_bad_entries(entry, message):
    with pytest.raises(ValueError, match=message):
        ChatOptions.from_config(entry, where="models.m.chat")


def test_merged_overrides_keys_and_merges_template_kwargs():
    both = ChatOptions.from_config({"template_kwargs": {"a": 1, "b": 2}, "assistant_prefix": "x"})
    merged = both.merged({"template_kwargs": {"b": 3}, "assistant_prefix": ""})
    assert merged == ChatOptions({"a": 1, "b": 3}, "", None, None)
    assert both.template_kwargs == {"a": 1, "b": 2}  # unchanged


# ---- format_prompt and encode_prompt, one family at a time ----------------------------------------------------


def assert_bos_once(tokenizer, ids: list[int], text: str) -> None:
    assert ids[0] == tokenizer.bos_token_id
    assert ids.count(tokenizer.bos_token_id) == 1
    assert tokenizer.decode(ids) == text
    naive = tokenizer(text)["input_ids"]  # what an encoding that ignores the template's BOS gives
    assert naive[:2] == [tokenizer.bos_token_id] * 2


def test_qwen3_thinking_off(tiny_tokenizer):
    text = format_prompt(tiny_tokenizer, USER, QWEN3)
    assert text == f"<|im_start|>user\n{USER}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    thinking = format_prompt(tiny_tokenizer, USER, QWEN3.merged({"template_kwargs": {"enable_thinking": True}}))
    assert thinking == f"<|im_start|>user\n{USER}<|im_end|>\n<|im_start|>assistant\n"
    with_system = format_prompt(tiny_tokenizer, USER, QWEN3, system=SYSTEM)
    assert with_system == f"<|im_start|>system\n{SYSTEM}<|im_end|>\n" + text
    assert format_prompt(tiny_tokenizer, USER, QWEN3.merged({"system": SYSTEM})) == with_system

    ids = encode_prompt(tiny_tokenizer, text)  # no BOS anywhere: the ids are the text's own
    assert tiny_tokenizer.bos_token is None
    assert ids == tiny_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tiny_tokenizer.decode(ids) == text
    assert chat_prompt_ids(tiny_tokenizer, USER, QWEN3) == ids


def test_gemma3_plain_template_bos_not_duplicated(gemma3):
    text = format_prompt(gemma3, USER, PLAIN)
    assert text == f"<bos><start_of_turn>user\n{USER}<end_of_turn>\n<start_of_turn>model\n"
    with_system = format_prompt(gemma3, USER, PLAIN, system=SYSTEM)
    assert with_system == f"<bos><start_of_turn>user\n{SYSTEM}\n\n{USER}<end_of_turn>\n<start_of_turn>model\n"
    assert_bos_once(gemma3, encode_prompt(gemma3, text), text)
    assert_bos_once(gemma3, encode_prompt(gemma3, with_system), with_system)


def test_bos_is_added_when_the_template_lacks_it(gemma3):
    text = "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n"
    ids = encode_prompt(gemma3, text)
    assert ids[0] == gemma3.bos_token_id and ids.count(gemma3.bos_token_id) == 1
    assert gemma3.decode(ids) == "<bos>" + text


def test_llama32_plain_template_bos_not_duplicated(llama32):
    text = format_prompt(llama32, USER, LLAMA32)
    assert text == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
        f"<|start_header_id|>user<|end_header_id|>\n\n{USER}<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    assert_bos_once(llama32, encode_prompt(llama32, text), text)
    with_system = format_prompt(llama32, USER, LLAMA32, system=SYSTEM)
    assert with_system == text.replace("2024\n\n<|eot_id|>", f"2024\n\n{SYSTEM}<|eot_id|>")
    assert_bos_once(llama32, encode_prompt(llama32, with_system), with_system)


def test_llama32_date_is_today_unless_pinned(llama32):
    """Without `date_string` the template writes the day of the run: the prompt changes from day to day."""
    today = re.search(r"Today Date: (.*)\n", format_prompt(llama32, USER, PLAIN)).group(1)
    assert re.fullmatch(r"\d\d [A-Z][a-z]{2} \d{4}", today)
    assert "Today Date: 26 Jul 2024\n" in format_prompt(llama32, USER, LLAMA32)


def test_the_configs_pinned_days_and_the_run_day_switch(gpt_oss, llama32):
    """config.yaml pins Llama-3.2's day by `date`, which prints what the template's own fallback (`date_string`
    26 Jul 2024) prints, and GPT-OSS's; protocol switch `chat_date: run_day` drops the pins, so that both print
    the day they run, as the release's prompts did."""
    models = read_config(REPO / "config.yaml")["models"]
    llama = ChatOptions.from_config(models["llama3_2_1b_it"]["chat"])
    oss = ChatOptions.from_config(models["gpt_oss_20b"]["chat"])
    assert format_prompt(llama32, USER, llama) == format_prompt(llama32, USER, LLAMA32)
    assert "Current date: 2025-08-05\n" in format_prompt(gpt_oss, USER, oss)
    assert on_chat_date(llama, "pinned") is llama
    run_day = re.search(r"Today Date: (.*)\n", format_prompt(llama32, USER, on_chat_date(llama, "run_day"))).group(1)
    assert run_day != "26 Jul 2024" and re.fullmatch(r"\d\d [A-Z][a-z]{2} \d{4}", run_day)
    assert "Current date: 2025-08-05" not in format_prompt(gpt_oss, USER, on_chat_date(oss, "run_day"))
    with pytest.raises(ValueError, match="chat_date must be one of pinned, run_day"):
        on_chat_date(llama, "today")


def test_a_pinned_date_is_what_templates_print_instead_of_the_clock(gpt_oss, llama32):
    """GPT-OSS's "Current date" has no template variable: `date` pins it, and Llama-3.2's "Today Date" too."""
    pinned = GPT_OSS.merged({"date": "2025-08-05"})
    assert "Current date: 2025-08-05\n" in format_prompt(gpt_oss, USER, pinned)
    assert "Today Date: 05 Aug 2025\n" in format_prompt(llama32, USER, PLAIN.merged({"date": "2025-08-05"}))
    # only within the call: the clock is back afterwards
    today = re.search(r"Current date: (.*)\n", format_prompt(gpt_oss, USER, GPT_OSS)).group(1)
    assert today != "2025-08-05" and re.fullmatch(r"\d{4}-\d{2}-\d{2}", today)


def test_gpt_oss_low_effort_final_channel(gpt_oss):
    def undated(text: str) -> str:
        return re.sub(r"Current date: \d{4}-\d{2}-\d{2}\n", "Current date: DATE\n", text)

    text = format_prompt(gpt_oss, USER, GPT_OSS)
    assert undated(text) == f"{HARMONY_HEADER}<|start|>user<|message|>{USER}<|end|><|start|>assistant{FINAL}"
    with_system = format_prompt(gpt_oss, USER, GPT_OSS, system=SYSTEM)
    assert undated(with_system) == (
        f"{HARMONY_HEADER}<|start|>developer<|message|># Instructions\n\n{SYSTEM}\n\n<|end|>"
        f"<|start|>user<|message|>{USER}<|end|><|start|>assistant{FINAL}"
    )
    medium = format_prompt(gpt_oss, USER, PLAIN)
    assert "Reasoning: medium\n" in medium and medium.endswith("<|start|>assistant")

    ids = encode_prompt(gpt_oss, text)  # no BOS: the template writes none and the tokenizer adds none
    assert gpt_oss.bos_token_id not in ids
    assert gpt_oss.decode(ids) == text
    prefix = gpt_oss(FINAL, add_special_tokens=False)["input_ids"]  # the harmony tokens are tokens, not text
    assert ids[-len(prefix) :] == prefix
    assert [prefix[0], prefix[-1]] == gpt_oss.convert_tokens_to_ids(["<|channel|>", "<|message|>"])


# ---- completions ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["tiny_tokenizer", "gemma3", "llama32", "gpt_oss"])
def test_canonical_values_tokenize_alone_without_bos_and_end_with_eos(family, request):
    """Completions and trie paths: even tokenizers that add BOS by default must not add it here."""
    tokenizer = request.getfixturevalue(family)
    values = ["0.25", "-3", "17", "1e-05"]
    tokenized = tokenize_values(tokenizer, values)
    for row, value in enumerate(values):
        ids = tokenized.tokens[row, : tokenized.lengths[row]].tolist()
        assert ids == [*tokenizer.encode(value, add_special_tokens=False), tokenizer.eos_token_id]
        assert tokenizer.bos_token_id not in ids


# ---- outputs ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "answer"),
    [
        ("0.25", "0.25"),
        ("  0.25 \n", "0.25"),
        ("", ""),
        # Qwen3
        ("<think>\n\n</think>\n\n0.25", "0.25"),
        ("<think>\nA normal draw, say 0.3.\n</think>\n\n-1.2", "-1.2"),
        ("<think>a</think>1<think>b</think>", "1"),
        ("<think>\nstill thinking when the budget ran out", ""),
        ("0.5 <think> and then it started thinking", "0.5"),
        ("prefilled thinking</think>\n\n42", "42"),
        ("Analysis of data: 3", "Analysis of data: 3"),
        # GPT-OSS, special tokens kept
        ("42<|return|>", "42"),
        ("42<|end|>", "42"),
        (f"<|channel|>analysis<|message|>Pick 7.<|end|><|start|>assistant{FINAL}7<|return|>", "7"),
        (f"<|channel|>analysis<|message|>a<|end|><|start|>assistant{FINAL}1<|end|><|start|>assistant{FINAL}2", "2"),
        ("<|channel|>analysis<|message|>ran out of tokens", ""),
        ("<|channel|>analysis<|message|>no final answer<|end|>", ""),
        # GPT-OSS, special tokens skipped
        ("analysisThe user wants one draw. 0.7 is fine.assistantfinal0.7", "0.7"),
        ("analysis 3 assistantfinal 1 assistantfinal 2", "2"),
        ("analysis is what I like", "analysis is what I like"),
        # SSOT answers keep their tags
        ("<think>x</think><answer>5</answer>", "<answer>5</answer>"),
        ("analysis<answer>1</answer>assistantfinal<answer>5</answer>", "<answer>5</answer>"),
    ],
)
def test_strip_reasoning(raw, answer):
    assert strip_reasoning(raw) == answer


def test_decode_output(tiny_tokenizer, gpt_oss):
    ids = tiny_tokenizer("<think>\nhm\n</think>\n\n42", add_special_tokens=False)["input_ids"]
    assert decode_output(tiny_tokenizer, [*ids, tiny_tokenizer.eos_token_id]) == "42"
    harmony = f"<|channel|>analysis<|message|>Seven.<|end|><|start|>assistant{FINAL}7<|return|>"
    assert gpt_oss.decode(gpt_oss(harmony)["input_ids"], skip_special_tokens=True) == "analysisSeven.assistantfinal7"
    assert decode_output(gpt_oss, gpt_oss(harmony)["input_ids"]) == "7"
    # answer_reasoning: release keeps the reasoning for the evaluations' own release rules: decoded, trimmed
    eos = tiny_tokenizer.eos_token_id
    assert decode_output(tiny_tokenizer, [*ids, eos], "release") == "<think>\nhm\n</think>\n\n42"
    assert decode_output(gpt_oss, gpt_oss(harmony)["input_ids"], "release") == "analysisSeven.assistantfinal7"
    with pytest.raises(ValueError, match="unknown answer_reasoning 'raw'"):
        decode_output(gpt_oss, [], "raw")


# (text, strip_thinking_trace, strip_think_tags): the release's rules (inference/chat_format.py, mcq_gen/parser.py)
RELEASE_RULES = [
    ("  0.25 \n", "0.25", "0.25"),
    ("<think>\n\n</think>\n\n0.25", "0.25", "0.25"),
    ("<THINK>x</Think> 3", "3", "3"),  # any case
    ("<think>a</think>1<think>b</think>2", "12", "12"),
    ("0.5 <THINK> and then it started thinking", "0.5", "0.5"),  # unclosed: removed to the end
    ("prefilled thinking</think>\n\n42", "prefilled thinking</think>\n\n42", "prefilled thinking\n\n42"),
    ("Rome</THINK>Milan", "Rome</THINK>Milan", "RomeMilan"),  # a stray tag is only deleted where it stands
    ("<think>a<think>b</think>c</think>d", "c</think>d", "cd"),  # the first close tag ends the block
    ("analysisPick 7.assistantfinal7", "analysisPick 7.assistantfinal7", "analysisPick 7.assistantfinal7"),
]


@pytest.mark.parametrize(("text", "trace", "tags"), RELEASE_RULES)
def test_the_releases_reasoning_rules(text, trace, tags):
    assert strip_thinking_trace(text) == trace and strip_think_tags(text) == tags
    # strip_model_response: the trace removed for the release's Qwen3 family only, the text trimmed for the others
    assert strip_model_response(text, strips_thinking=True) == trace
    assert strip_model_response(text, strips_thinking=False) == text.strip()
