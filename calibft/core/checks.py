"""The check behind every "unknown X" error: one message that names the bad value and the valid ones."""

from __future__ import annotations

from collections.abc import Iterable


def check_choice(what: str, value: object, choices: Iterable[object]) -> None:
    """Raise ValueError unless `value` is one of `choices`; the message names `what`, the value and the choices."""
    choices = list(choices)
    if value not in choices:
        raise ValueError(f"unknown {what} {value!r}; choose one of {', '.join(map(str, choices))}")
