"""The PALOMA evaluation's job, slices, windows and defaults (`python -m calibft.evals.paloma JOB` reads it as JSON;
`calibft.pipeline.jobs.paloma_job` builds it). Free of torch, so that the workflow can import it to plan."""

from __future__ import annotations

from dataclasses import dataclass, field

from calibft.evals.job import ModelJob

# The PALOMA test slices (`allenai/paloma`, split `test`), in the order of the tables
SLICES: tuple[str, ...] = ("wikitext_103", "c4_en", "dolma-v1_5", "mc4", "ptb", "redpajama", "falcon-refinedweb")
PALOMA_WINDOW = 2048
PALOMA_STRIDE = 1024
PALOMA_BATCH_SIZE = 8


def check_window(window: int, stride: int) -> None:
    """PALOMA's windows overlap by `window - stride` tokens of context: a window's first token has none."""
    if not 1 <= stride < window:
        raise ValueError(f"need 1 <= stride < window (a window's first token has no context), got {stride}/{window}")


@dataclass(frozen=True, kw_only=True)
class PalomaJob(ModelJob):
    """The perplexity of one model and condition on every PALOMA slice.

    PALOMA samples nothing and reads plain text, so `sampling` must stay empty and `chat` and `seed` only
    identify the run.
    """

    slices: dict[str, str]  # slice name -> its JSON-lines file, in the order of the tables
    sampling: dict = field(default_factory=dict)
    window: int = PALOMA_WINDOW
    stride: int = PALOMA_STRIDE
    batch_size: int = PALOMA_BATCH_SIZE
    max_documents: int | None = None  # per slice, the file's first ones; None: all

    def __post_init__(self):
        super().__post_init__()
        if self.sampling:
            raise ValueError(
                f"PALOMA scores given text and samples nothing; sampling must be empty, got {self.sampling}"
            )
        if not self.slices:
            raise ValueError("slices must name at least one slice file")
        check_window(self.window, self.stride)
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.max_documents is not None and self.max_documents < 0:
            raise ValueError(f"max_documents must be >= 0 or None, got {self.max_documents}")
