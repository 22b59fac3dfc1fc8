"""Loading checkpoints and tokenizers by Hugging Face id or local path, one code path for every model."""

from __future__ import annotations

from pathlib import Path


def load_tokenizer(name_or_path: str | Path):
    """`AutoTokenizer.from_pretrained`, with errors that say what to do about gated or missing checkpoints."""
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(name_or_path))
    except GatedRepoError as err:
        raise PermissionError(
            f"{name_or_path} is a gated Hugging Face repository: accept its license at "
            f"https://huggingface.co/{name_or_path} and log in (`hf auth login`) or set HF_TOKEN"
        ) from err
    except (RepositoryNotFoundError, OSError) as err:
        raise FileNotFoundError(
            f"cannot load a tokenizer from {name_or_path!r}: not a local folder with tokenizer files, and not "
            f"reachable as a Hugging Face id ({type(err).__name__}: {err})"
        ) from err
