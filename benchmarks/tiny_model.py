"""The model that the model benchmarks run on: `--model`, else the demo's tiny model when `make demo` built it,
else a tiny model built into a temporary folder (`--train-steps`; the demo model's 1000 steps take about a
minute)."""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibft.demo.tiny_model import build_tiny_model

DEMO_MODEL = Path(__file__).resolve().parents[1] / "results" / "models" / "tiny"


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
