"""The findings of `calibft preflight`: one line per check, what it found and, where something will fail, the fix."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

OK, WARNING, WILL_FAIL = "OK", "WARNING", "WILL FAIL"


@dataclass(frozen=True)
class Check:
    """One finding: its status (OK, WARNING or WILL FAIL), what was checked, what was found, and the fix."""

    status: str
    subject: str  # what was checked, e.g. "hub google/gemma-3-1b-it" or "slurm partition gpu"
    detail: str
    fix: str | None = None

    def __post_init__(self) -> None:
        if self.status not in (OK, WARNING, WILL_FAIL):
            raise ValueError(f"a check's status is OK, WARNING or WILL FAIL, not {self.status!r}")
        if self.status == WILL_FAIL and not self.fix:
            raise ValueError(f"{self.subject}: a check that will fail says how to fix it")

    def line(self) -> str:
        text = f"{self.status:<9}  {self.subject}: {self.detail}"
        return text if self.fix is None else f"{text}\n{'':<11}fix: {self.fix}"


def exit_status(checks: Iterable[Check]) -> int:
    """1 when any check will fail, else 0."""
    return int(any(check.status == WILL_FAIL for check in checks))
