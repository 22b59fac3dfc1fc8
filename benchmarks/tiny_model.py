"""What the model benchmarks share: the model they run on (`--model`, else the demo's tiny model when `make demo`
built it, else a tiny model built into a temporary folder, `--train-steps`; the demo model's 1000 steps take about a
minute), loaded with its tokenizer and stop tokens on the GPU when there is one, and the clock they time it with."""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibft.demo.tiny_model import build_tiny_model
from calibft.lm.chat import ChatOptions
from calibft.lm.generation import stop_token_ids
from calibft.lm.models import load_model, load_tokenizer

DEMO_MODEL = Path(__file__).resolve().parents[1] / "results" / "models" / "tiny"
# the chat settings of the paper's Qwen3 models (thinking off), which the tiny model's template reads too
CHAT = ChatOptions.from_config({"template_kwargs": {"enable_thinking": False}})


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", type=Path, default=None, help="model folder (default: the demo model or a new one)")
    parser.add_argument("--train-steps", type=int, default=1000, help="training steps of a newly built tiny model")


@contextlib.contextmanager
def benchmark_model(args: argparse.Namespace) -> Iterator[tuple[Path, str]]:
    """(folder, description for the JSON line) of the model to benchmark; a built one lives for the block."""
    if args.model is not None:
        yield args.model, str(args.model)
    elif DEMO_MODEL.is_dir():
        yield DEMO_MODEL, str(DEMO_MODEL)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            yield build_tiny_model(Path(tmp) / "tiny", train_steps=args.train_steps), f"tiny, {args.train_steps} steps"


@dataclass(frozen=True)
class LoadedModel:
    """A benchmark's model in eval mode on its device, with its tokenizer and stop token ids."""

    model: Any
    tokenizer: Any
    stops: list[int]
    device: torch.device
    name: str  # for the JSON line

    @property
    def device_name(self) -> str:
        return torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu"


@contextlib.contextmanager
def loaded_model(args: argparse.Namespace, precision: str) -> Iterator[LoadedModel]:
    """The benchmark's model (`benchmark_model`) loaded in `precision` on the GPU when there is one."""
    with benchmark_model(args) as (path, name):
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        tokenizer = load_tokenizer(path)
        model = load_model(path, precision, device.type).to(device).eval()
        yield LoadedModel(model, tokenizer, stop_token_ids(model, tokenizer), device, name)


def timed(device: torch.device, run: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    """(seconds, result) of `run(*args)`, the GPU's queue drained before and after."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    result = run(*args)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start, result
