"""Loading checkpoints and tokenizers by Hugging Face id or local path, one code path for every model."""

from __future__ import annotations

import json
import os
from pathlib import Path

# Where `snapshot_download(local_dir=...)` records each file's commit and hash: `{file}.metadata`, three lines
# (commit, ETag, time). The Hub's ETag of a file is its content hash: the SHA-256 of an LFS file (weights), the
# git blob id of a plain one (configs, tokenizers).
DOWNLOAD_RECORDS = Path(".cache") / "huggingface" / "download"


def check_snapshot(folder: str | Path) -> None:
    """Raise FileNotFoundError when a local snapshot folder lacks a file its download recorded (a file deleted
    or a copy cut short), naming the folder, the files and how to fetch it again. Hugging Face ids, and folders
    without download records (a model of your own), are left to `from_pretrained`."""
    folder = Path(folder)
    records = folder / DOWNLOAD_RECORDS
    if not records.is_dir():
        return
    missing = sorted(
        name
        for record in records.rglob("*.metadata")
        if not (folder / (name := record.relative_to(records).as_posix()[: -len(".metadata")])).exists()
    )
    if missing:
        raise FileNotFoundError(
            f"{folder} is missing {', '.join(missing)}, which its download holds: the snapshot is incomplete. "
            f"Delete {folder} and fetch it again (snakemake --cores 1 {folder})"
        )


def _gated(name_or_path: str | Path) -> PermissionError:
    return PermissionError(
        f"{name_or_path} is a gated Hugging Face repository: accept its license at "
        f"https://huggingface.co/{name_or_path} and log in (`hf auth login`) or set HF_TOKEN"
    )


def load_tokenizer(name_or_path: str | Path):
    """`AutoTokenizer.from_pretrained`, with errors that say what to do about gated or missing checkpoints."""
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError
    from transformers import AutoTokenizer

    check_snapshot(name_or_path)
    try:
        return AutoTokenizer.from_pretrained(str(name_or_path))
    except GatedRepoError as err:
        raise _gated(name_or_path) from err
    except (RepositoryNotFoundError, OSError) as err:
        raise FileNotFoundError(
            f"cannot load a tokenizer from {name_or_path!r}: not a local folder with tokenizer files, and not "
            f"reachable as a Hugging Face id ({type(err).__name__}: {err})"
        ) from err


def padding_id(tokenizer) -> int:
    """The id that pads batches: the tokenizer's pad token, else its EOS (many chat tokenizers have no pad)."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def load_model(
    name_or_path: str | Path, precision: str = "bf16", device: str | None = None, device_map: str | None = None
):
    """A causal LM by Hugging Face id or local folder: bf16 on a GPU when asked, fp32 on the CPU.

    Loaded on the CPU unless `device_map` places it (training leaves placement to accelerate).
    """
    import torch
    from huggingface_hub.errors import GatedRepoError
    from transformers import AutoModelForCausalLM

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if precision == "bf16" and device != "cpu" else torch.float32
    check_snapshot(name_or_path)
    try:
        return AutoModelForCausalLM.from_pretrained(str(name_or_path), dtype=dtype, device_map=device_map)
    except GatedRepoError as err:
        raise _gated(name_or_path) from err


def load_classifier(name_or_path: str | Path, precision: str = "bf16"):
    """A sequence-classification model (the NoveltyBench evaluators) in eval mode, by Hugging Face id or local
    folder: bf16 on the GPUs when asked (`device_map="auto"` spreads a large reward model), fp32 on the CPU."""
    import torch
    from huggingface_hub.errors import GatedRepoError
    from transformers import AutoModelForSequenceClassification

    on_gpu = torch.cuda.is_available()
    dtype = torch.bfloat16 if precision == "bf16" and on_gpu else torch.float32
    check_snapshot(name_or_path)
    try:
        model = AutoModelForSequenceClassification.from_pretrained(
            str(name_or_path), dtype=dtype, device_map="auto" if on_gpu else None
        )
    except GatedRepoError as err:
        raise _gated(name_or_path) from err
    except (OSError, ValueError) as err:  # a folder without config.json or weights, or an id not on the Hub
        if isinstance(err, ValueError) and "config.json" not in str(err):
            raise
        raise FileNotFoundError(
            f"cannot load a classifier from {str(name_or_path)!r} ({err}); if it is a download under resources/hf/, "
            f"delete it and fetch it again (snakemake --cores 1 {name_or_path}), else point the config at a folder "
            "with config.json and the weights"
        ) from err
    return model.eval()


def load_for_inference(name_or_path: str | Path, precision: str = "bf16", adapter: str | Path | None = None):
    """A model ready to evaluate, in eval mode: on the GPUs when there are any (`device_map="auto"` spreads a
    model too large for one GPU over all of them), with a saved LoRA adapter attached when given."""
    import torch

    on_gpu = torch.cuda.is_available()
    model = load_model(name_or_path, precision, "cuda" if on_gpu else "cpu", device_map="auto" if on_gpu else None)
    if adapter is not None:
        model = load_adapter(model, adapter)
    return model.eval()


def _matches(name: str, targets: list[str]) -> bool:
    """Whether peft's list form of `target_modules` picks the module `name`: the name, or its dotted suffix."""
    return any(name == target or name.endswith(f".{target}") for target in targets)


def _language_model_prefix(model) -> str:
    """The qualified name of the language model's decoder stack (`model` in a causal LM, `model.language_model` in
    Gemma-3's image-text model), found by transformers' `get_decoder`; "" (the whole model) when there is none."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model
    return next((name for name, module in model.named_modules() if module is decoder), "")


def _keep_present_layer_classes(model) -> None:
    """Cut the model's `_no_split_modules` to the classes it has. Accelerate's FSDP TRANSFORMER_BASED_WRAP
    (launch/fsdp.yaml) wraps those classes when no layer class is named, and stops at the first name it cannot
    find; transformers collects the names from every sub-model class, and Gemma-3's list SigLIP's
    attention-pooling head and text embeddings, which its vision tower lacks."""
    if getattr(model, "_no_split_modules", None):
        present = {type(module).__name__ for module in model.modules()}
        model._no_split_modules = {name for name in model._no_split_modules if name in present}


def parameter_bytes(module) -> int:
    """Bytes of a module's parameters."""
    return sum(p.numel() * p.element_size() for p in module.parameters())


def fsdp_units(model) -> tuple[int, int]:
    """Bytes of the root unit (the parameters outside every layer that FSDP's TRANSFORMER_BASED_WRAP wraps) and
    of the largest wrapped layer, as Accelerate wraps `model._no_split_modules` of the model `attach_lora` makes
    ready (`_keep_present_layer_classes`)."""
    _keep_present_layer_classes(model)
    wrapped = set(getattr(model, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in wrapped]
    inner = {id(p) for layer in layers for p in layer.parameters()}
    root = sum(p.numel() * p.element_size() for p in model.parameters() if id(p) not in inner)
    return root, max((parameter_bytes(layer) for layer in layers), default=0)


def attach_lora(model, lora: dict):
    """Wrap a base model with a fresh LoRA adapter (`training.lora` of the config); only it is trainable.

    The adapter goes on the language model alone: modules named as targets outside its decoder stack, the
    q/k/v projections of the SigLIP vision tower of Gemma-3 4B/12B/27B (`Gemma3ForConditionalGeneration`), are
    listed in `exclude_modules` (none in the text-only models, whose adapter config is then the release's).

    The adapter takes the base model's dtype (bf16 on GPUs), as in the authors' training: FSDP flattens each
    layer's parameters into one tensor of one dtype, and would refuse bf16 weights beside fp32 LoRA ones. The
    model is made ready for FSDP's layer wrapping too (`_keep_present_layer_classes`).
    """
    from peft import LoraConfig, get_peft_model

    targets = list(lora["target_modules"])
    prefix = _language_model_prefix(model)
    outside = [
        name
        for name, _ in model.named_modules()
        if _matches(name, targets) and prefix and not name.startswith(f"{prefix}.")
    ]
    _keep_present_layer_classes(model)
    config = LoraConfig(
        r=lora["r"],
        lora_alpha=lora["alpha"],
        lora_dropout=lora["dropout"],
        target_modules=targets,
        exclude_modules=outside or None,
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config, autocast_adapter_dtype=False)


def check_adapter_base(adapter_dir: str | Path, base: str | Path) -> None:
    """Raise ValueError when the adapter in `adapter_dir` was trained on another base model than `base` (by
    its adapter_config.json's `base_model_name_or_path`), naming both and the fix; FileNotFoundError when the
    folder holds no adapter_config.json, or ValueError when that file is not readable."""
    config_file = Path(adapter_dir) / "adapter_config.json"
    try:
        trained_on = json.loads(config_file.read_text()).get("base_model_name_or_path")
    except FileNotFoundError as err:
        raise FileNotFoundError(
            f"{config_file} does not exist: {adapter_dir} is not a saved adapter; rerun the training that makes it "
            f"(snakemake --cores 1 {config_file})"
        ) from err
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as err:
        raise ValueError(
            f"{config_file} is not a readable adapter config ({err}); delete {adapter_dir} and rerun the training "
            f"that makes it (snakemake --cores 1 {config_file})"
        ) from err
    if trained_on is None or _same_source(trained_on, base):
        return
    raise ValueError(
        f"the adapter {adapter_dir} was trained on {trained_on!r}, not on the configured model {str(base)!r} "
        f"(base_model_name_or_path of {config_file}): evaluate it with the model it was trained on, or delete "
        f"{adapter_dir} and retrain it on this model (snakemake --cores 1 {config_file})"
    )


def _same_source(a: str | Path, b: str | Path) -> bool:
    """Whether two model sources name the same checkpoint: equal as given, the same folder, or a Hugging Face id
    and the workflow's snapshot of it (resources/hf/models/{id})."""
    a, b = os.path.normpath(str(a)), os.path.normpath(str(b))
    if a == b:
        return True
    if Path(a).exists() and Path(b).exists():
        return Path(a).resolve() == Path(b).resolve()
    hub_id, folder = (a, b) if len(a) < len(b) else (b, a)
    return not Path(hub_id).exists() and folder.endswith(f"/{hub_id}")


def load_adapter(model, adapter_dir: str | Path, trainable: bool = False):
    """Attach a saved LoRA adapter to a base model, after checking that it was trained on that model."""
    from peft import PeftModel

    check_adapter_base(adapter_dir, getattr(model, "name_or_path", None) or model.config._name_or_path)

    return PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=trainable)
