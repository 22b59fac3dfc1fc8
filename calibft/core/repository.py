"""Where the workflow's own files are: the checkout that holds the package, `schemas/`, the configurations and
`reference/` (the paper's numbers, the evaluators' and checkpoints' reference files)."""

from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
REFERENCE = REPOSITORY / "reference"
