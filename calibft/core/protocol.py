"""Computation protocols: what produced the paper's tables, and what its text says, as named switches.

The paper's tables were computed by the authors' release (chandar-lab/calibration-finetuning at commit
a09d46dc5f6a, with transformers 4.57.6). In some places the release computes differently from what the paper
writes. Each such place is a `Switch` with its allowed values; a protocol is one value per switch.

- `release` (the default): what the release computes, so that the numbers are comparable with the tables.
- `as_written`: what the paper states. Where the paper is silent or ambiguous, the release's choice, but for
  the seeding of the training draws (`training_draw_seeds`), where it keeps this pipeline's own per-batch
  draws, so that an `as_written` run trains on the answers such runs trained on before the switch existed.

The config's `protocol:` section picks a preset and may override single switches. Results of a protocol
live under their own root (`calibft.pipeline.layout.Layout.root`): `results/` for `release`,
`results/protocols/{name}/` for any other (`protocol_name`), so that protocols never overwrite each other's
results while sharing the data layer (prompts, spaces, tries).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

PRESETS = ("release", "as_written")
RELEASE = "https://github.com/chandar-lab/calibration-finetuning/tree/a09d46dc5f6a87c39b85b8ec524c7904284bc2ab"


@dataclass(frozen=True)
class Switch:
    """One place where the release and the paper's text differ, and what each preset takes."""

    name: str
    values: tuple[str, ...]
    release: str  # the `release` preset's value
    as_written: str  # the `as_written` preset's value
    paper: str  # what the paper says
    release_code: str  # what the release does, and where
    moves: str  # what it changes in the tables

    def preset(self, name: str) -> str:
        return {"release": self.release, "as_written": self.as_written}[name]


SWITCHES = (
    Switch(
        "prompt_bos",
        ("doubled", "single"),
        release="doubled",
        as_written="single",
        paper="the chat-formatted prompt, tokenized (one BOS)",
        release_code=(
            "encodes the templated text with `add_special_tokens=True`: a second BOS where the template wrote "
            "one (calibrate_sft/data.py, inference/hf_backend.py `_token_ids`, open_random_gen/evaluate.py)"
        ),
        moves="every row of Gemma-3 and Llama-3.2 (training and every evaluation)",
    ),
    Switch(
        "generation_defaults",
        ("checkpoint", "exact"),
        release="checkpoint",
        as_written="exact",
        paper="temperature 1, top_p 1, no top_k; greedy decoding for the retention benchmarks",
        release_code=(
            "passes a copy of the checkpoint's generation config to `generate`, where transformers 4.57.6 puts "
            "back the checkpoint's own values for every field left at the library default, when the config was "
            "written by transformers >= 4.50 (inference/hf_backend.py `_generation_config`)"
        ),
        moves=(
            "Qwen3, Gemma-3 and GPT-OSS rows of every sampled evaluation (NoveltyBench under "
            "`noveltybench_sampling: hf_backend`); their GSM8K"
        ),
    ),
    Switch(
        "logit_kl_across_families",
        ("mean", "median"),
        release="mean",
        as_written="mean",
        paper='"the corresponding ... average" of the family means',
        release_code="mean of the family means (calibrate_sft/eval.py `_summarize_logit_rows`)",
        moves="logit-KL columns of the structured-sampling and ablation tables",
    ),
    Switch(
        "logit_kl_path_seeds",
        ("fixed", "per_prompt"),
        release="fixed",
        as_written="fixed",
        paper="4 paths per prompt from the evaluation target, fixed seeds",
        release_code=(
            "path k of every prompt drawn with `default_rng(seed + k)` (calibrate_sft/evaluate.py "
            "`monte_carlo_logit_kl`, calibrate_sft/data.py `sample_training_example`)"
        ),
        moves="the Monte Carlo noise of every logit KL",
    ),
    Switch(
        "gsm8k_extraction",
        ("release", "lm_eval"),
        release="release",
        as_written="release",
        paper="tinyGSM8k, strict and flexible extraction (not spelled out)",
        release_code="retention/tinybenchmarks_tasks.py: its own regexes, answers compared through `Decimal`",
        moves="GSM8K rows and the mean gp-IRT of the retention tables",
    ),
    Switch(
        "tinybench_text",
        ("release", "lm_eval"),
        release="release",
        as_written="lm_eval",
        paper="the TinyBenchmarks suite, whose tasks lm-evaluation-harness defines (text not spelled out)",
        release_code=(
            "puts no space before a continuation where the prompt ends or the choice starts with a space, newline or "
            "tab (retention/tinybenchmarks_data.py `_prepend_space_if_needed`, lines 178-185, called at lines 192, "
            "242, 269, 293); removes HellaSwag's bracketed text across lines too (`_hellaswag_preprocess`, lines "
            "12-21); a WinoGrande context is `input_formatted` without the longer option it ends with, then the "
            "option (`_winogrande_prompt_prefix`, lines 195-202, 287-292)"
        ),
        moves=(
            "HellaSwag items with an ending that opens with WikiHow markup (one space before it, not two) or markup "
            "across a line; elsewhere only where a prompt ends, or a TruthfulQA choice starts, with whitespace, or "
            "a WinoGrande option is longer than the gold one and ends with it (none in the demo's items)"
        ),
    ),
    Switch(
        "noveltybench_reward_bos",
        ("doubled", "single"),
        release="doubled",
        as_written="single",
        paper="NoveltyBench's utility, scored by its reward model",
        release_code=(
            "renders the reward model's template, then tokenizes it with special tokens: two BOS for the "
            "Gemma-2 reward model (noveltybench/scoring.py); the benchmark tokenizes inside the template (one)"
        ),
        moves="NoveltyBench utility",
    ),
    Switch(
        "hard_loss_reduction",
        ("tokens", "sequences"),
        release="tokens",
        as_written="sequences",
        paper="Algorithm 2 pools the batch's completion tokens; the loss equation averages per sequence",
        release_code="cross-entropy averaged over the batch's completion tokens (hard_label_sft/losses.py)",
        moves="every hard-target row",
    ),
    Switch(
        "numerics",
        ("logits_dtype", "fp32"),
        release="logits_dtype",
        as_written="fp32",
        paper="not stated",
        release_code=(
            "losses and metrics in the logits' dtype (bf16 on GPUs), soft targets cast to it "
            "(calibrate_sft/losses.py, hard_label_sft/losses.py, open_random_gen softmax, perplexity cross-entropy)"
        ),
        moves="small shifts in every number computed from logits on a GPU (none on the CPU, which runs fp32)",
    ),
    Switch(
        "paloma_empty_documents",
        ("skip", "count"),
        release="skip",
        as_written="skip",
        paper="not stated",
        release_code=(
            "rows whose text is empty or blank are left out, counted in `num_skipped_rows` with the rows whose text "
            "is missing or not a string (perplexity/data.py `iter_paloma_file_records`, perplexity/evaluate.py)"
        ),
        moves="PALOMA document counts (the token-weighted figures do not change)",
    ),
    Switch(
        "ssot_prompt",
        ("release", "config"),
        release="release",
        as_written="config",
        paper="the protocol in prose (appendix E.3), no verbatim instruction",
        release_code=(
            "its own system prompts (inference/ssot_prompts.py), the answer taken from `<answer>` case-insensitively "
            "and trimmed (inference/ssot.py)"
        ),
        moves="the SSOT tables and figure",
    ),
    Switch(
        "w1_per_distribution",
        ("mean", "median"),
        release="mean",
        as_written="median",
        paper='"per-distribution median normalized W1" (figure captions)',
        release_code=(
            "no figure code in the release; the tables average W1 within each family (the paper's text), which is "
            "what a family's panel shows"
        ),
        moves="the appendix's per-distribution W1 figures",
    ),
    Switch(
        "chat_date",
        ("pinned", "run_day"),
        release="pinned",
        as_written="pinned",
        paper="not stated (no prompt shows the date line, nor does the paper give the days of its runs)",
        release_code=(
            "passes no date to `apply_chat_template` (src/random_steering/inference/chat_format.py "
            '`format_prompt`): under transformers 4.57 Llama-3.2\'s "Today Date" and GPT-OSS\'s "Current date" '
            "print the day each run ran"
        ),
        moves="every Llama-3.2 and GPT-OSS prompt's date line (a few tokens), in training and every evaluation",
    ),
    Switch(
        "training_draw_seeds",
        ("release", "per_batch"),
        release="release",
        as_written="per_batch",
        paper="a fresh answer y ~ P_Y for every training example; how it is seeded is not stated",
        release_code=(
            "example `offset` of batch `batch` of rank `rank` in epoch `epoch` draws `default_rng(seed + epoch * "
            "100000 + batch * batch_size * world_size + rank * batch_size + offset).choice` over its output space "
            "(calibrate_sft/train_loop.py `run_calibrate_sft`, `_sample_batch_examples`; the same in hard_label_sft)"
        ),
        moves="which answers every soft and hard run trains on (the same distribution): every fine-tuned row",
    ),
    Switch(
        "w1_nonfinite_prompts",
        ("undefined", "dropped"),
        release="undefined",
        as_written="undefined",
        paper=(
            '"---": the aggregate W1 is undefined where "at least one family has no finite W1 estimate"; which '
            "prompts leave a family so is not said"
        ),
        release_code=(
            "a prompt without a valid answer gets an infinite W1, which its family's mean keeps "
            "(calibrate_sft/evaluate.py `_build_family_balanced_summary` averages every float): the family's "
            "mean is infinite"
        ),
        moves=(
            "the W1 aggregates of the structured and SSOT tables where one prompt of a family has no valid answer "
            "(or a W1 beyond the float range) and others have: on the OOD split (3 prompts a family), not on the "
            "unseen one (1)"
        ),
    ),
    Switch(
        "noveltybench_sampling",
        ("hf_backend", "vllm_backend"),
        release="hf_backend",
        as_written="vllm_backend",
        paper='"10 generations per prompt with temperature 1 and top-p=1" (section 4, NoveltyBench)',
        release_code=(
            "two paths. `inference=hf`: the adapter applied (calibrate_sft/modeling.py `load_evaluation_bundle`, "
            "lines 341-350), the checkpoint's values put back by `_generation_config` (inference/hf_backend.py, "
            "lines 80-104), as under `generation_defaults`. The shipped default `inference: vllm` "
            "(conf/noveltybench_generate_config.yaml and conf/noveltybench_eval_config.yaml, line 5): explicit "
            "`SamplingParams(temperature=1.0, top_p=1.0)` (inference/vllm_backend.py, lines 60-78), but only "
            "`base_checkpoint` loaded (lines 28-42), no adapter"
        ),
        moves=(
            "NoveltyBench rows of Qwen3 (temperature 0.6 and top_p 0.95 against 1 and 1) and Gemma-3 (top_p 0.95 "
            "against 1); Llama-3.2 and GPT-OSS sample at 1 and 1 on both paths"
        ),
    ),
    Switch(
        "open_ended_normalization",
        ("release", "strip_reasoning"),
        release="release",
        as_written="release",
        paper='"the fraction of distinct samples after normalization"; the normalization is not spelled out',
        release_code=(
            "`normalize_open_random_output` (open_random_gen/metrics.py, lines 37-55) of the decoded text "
            "(special tokens skipped, reasoning kept: open_random_gen/evaluate.py, lines 236-239): `<think>` "
            "blocks and an unclosed `<think>` removed case-insensitively (inference/chat_format.py "
            "`strip_thinking_trace`, lines 8-9 and 25-28), then every `<think>` or `</think>` tag left deleted "
            "where it stands; no rule for GPT-OSS's reasoning"
        ),
        moves=(
            "the unique output rate where a sample holds a think tag or GPT-OSS's analysis text (rare: every "
            "model's prompt turns reasoning off)"
        ),
    ),
    Switch(
        "answer_reasoning",
        ("release", "strip_reasoning"),
        release="release",
        as_written="strip_reasoning",
        paper=(
            'a generation counts "after stripping any reasoning trace" (app:prompts-structured); SSOT\'s answer comes '
            'from "the requested answer channel or tag", GPT-OSS\'s final channel (app:prompts-seed-string-thought)'
        ),
        release_code=(
            "parses the decoded text (special tokens skipped, trimmed: inference/hf_backend.py, lines 163-164) after "
            "`strip_thinking_trace` (inference/chat_format.py, lines 8-9 and 25-28: `<think>` blocks and an unclosed "
            "`<think>` removed, any case): structured answers and SSOT's extracted answers (eval/protocol_runner.py, "
            "lines 100-102), MCQ generations, every think tag left then deleted (mcq_gen/parser.py, lines 10 and "
            "18-21); before SSOT extraction, GSM8K and NoveltyBench's scoring only for its Qwen3 family "
            "(`strip_model_response`, chat_format.py lines 31-35; inference/ssot.py line 224, "
            "retention/tinybenchmarks_tasks.py line 264, noveltybench/evaluate.py line 281); GPT-OSS's analysis text "
            "kept"
        ),
        moves=(
            "structured, SSOT, MCQ, GSM8K and NoveltyBench rows where an answer holds a think tag or GPT-OSS's "
            "analysis text: "
            "SSOT's GPT-OSS rows (an `<answer>` in the analysis) and any non-Qwen3 SSOT answer inside a think "
            "block; seldom elsewhere (every model's prompt turns reasoning off)"
        ),
    ),
)
SWITCH = {switch.name: switch for switch in SWITCHES}


def resolve(section: Mapping | None) -> dict[str, str]:
    """The value of every switch: the preset's, with the section's `switches` overrides applied.

    Raises ValueError naming an unknown preset, switch or value (the schema checks these too; this keeps the
    library's callers honest).
    """
    section = dict(section or {})
    preset = section.get("preset", "release")
    if preset not in PRESETS:
        raise ValueError(f"protocol.preset is {preset!r}; use one of {', '.join(PRESETS)}")
    values = {switch.name: switch.preset(preset) for switch in SWITCHES}
    for name, value in (section.get("switches") or {}).items():
        if name not in SWITCH:
            raise ValueError(f"protocol.switches.{name} is not a switch; known: {', '.join(SWITCH)}")
        if value not in SWITCH[name].values:
            raise ValueError(f"protocol.switches.{name} is {value!r}; use one of {', '.join(SWITCH[name].values)}")
        values[name] = value
    return values


def check_protocol(values: Mapping[str, str]) -> None:
    """Raises ValueError unless `values` gives every switch, and nothing else, one of its values: what a job's
    `protocol` field must hold, so that a misspelt switch fails where the job is made or read."""
    unknown, missing = sorted(set(values) - set(SWITCH)), sorted(set(SWITCH) - set(values))
    if unknown or missing:
        raise ValueError(
            f"a job's protocol names unknown switches {unknown} and lacks {missing}; known: {', '.join(SWITCH)}"
        )
    for name, value in values.items():
        if value not in SWITCH[name].values:
            raise ValueError(f"a job's protocol gives {name} {value!r}; use one of {', '.join(SWITCH[name].values)}")


def default_protocol() -> dict[str, str]:
    """Every switch's value under the default preset: a job's `protocol` field when it is not given."""
    return resolve(None)


def protocol_name(section: Mapping | None) -> str:
    """The preset's name, followed by `+switch=value` for each override that differs from the preset."""
    section = dict(section or {})
    preset = section.get("preset", "release")
    values = resolve(section)
    changed = [f"+{name}={values[name]}" for name in SWITCH if values[name] != SWITCH[name].preset(preset)]
    return preset + "".join(changed)


def markdown_table() -> str:
    """The table of switches in docs/fidelity.md."""
    lines = [
        "| switch | values | the paper | the release | `release` | `as_written` | moves |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in SWITCHES:
        cells = [f"`{s.name}`", " / ".join(f"`{v}`" for v in s.values), s.paper, s.release_code]
        cells += [f"`{s.release}`", f"`{s.as_written}`", s.moves]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
