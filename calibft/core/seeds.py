"""Seeds derived from their parts: those of the sampling engine, of the evaluations and of their bootstrap
intervals. Imports neither torch nor numpy, so that the table renderers can derive a bootstrap seed too."""

from __future__ import annotations

import hashlib
import json
import operator


def seed_for(*parts: str | int) -> int:
    """A stable 63-bit seed from its parts, e.g. `seed_for(config_seed, "qwen3_8b", "soft", "poisson-001")`.

    SHA-256 of the parts encoded as a JSON list, so the seed is the same in every process and on every machine
    (Python's `hash` of a string changes between processes), and `(1,)`, `("1",)` and `("a", "b")` vs `("a b",)`
    give different seeds. 63 bits fit every seed consumer (torch, numpy, signed 64-bit integers).
    """
    normalized = [part if isinstance(part, str) else operator.index(part) for part in parts]
    digest = hashlib.sha256(json.dumps(normalized).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1
