"""What every part of the GPU check reads: config.yaml, and the structured evaluation's sampling settings."""

from __future__ import annotations

from pathlib import Path

from calibft.lm.generation import SamplingSettings
from calibft.pipeline.config import read_config

CONFIG = read_config(Path(__file__).resolve().parents[2] / "config.yaml")


def engine_settings(answers: int, max_new_tokens: int) -> SamplingSettings:
    """The structured evaluation's sampling settings, for `answers` answers of at most `max_new_tokens`."""
    sampling = CONFIG["evaluation"]["structured"]["sampling"]
    return SamplingSettings(
        answers, max_new_tokens, sampling["temperature"], sampling["top_p"], batch_size=sampling["batch_size"]
    )
