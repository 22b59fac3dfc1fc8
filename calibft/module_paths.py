"""calibft's module paths from before its stage packages (and the TinyBenchmarks package), kept as aliases of the
modules' present paths.

workflow_scripts/ import modules by these paths and the rules run two of them (`python -m calibft.train`,
`python -m calibft.runlog`). Those files and commands stay as they are: Snakemake reruns every finished job of
a rule whose shell command changed, or whose script is newer than the job's outputs, so editing them would
recompute the results folders made before. `import calibft.grid` gives the module `calibft.data.grid` itself
(one module under both names), and `python -m calibft.train` runs `calibft.training.train`.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

# old path (under calibft.) -> present path (under calibft.)
MOVED = {
    "checks": "core.checks",
    "io": "core.io",
    "seeds": "core.seeds",
    "cpu": "core.cpu",
    "ragged": "core.ragged",
    "provenance": "core.provenance",
    "checkpoints": "core.checkpoints",
    "protocol": "core.protocol",
    "time_limit": "core.time_limit",
    "runlog": "core.runlog",
    "families": "data.families",
    "grid": "data.grid",
    "output_space": "data.output_space",
    "trie": "data.trie",
    "granularity": "data.granularity",
    "models": "lm.models",
    "chat": "lm.chat",
    "generation": "lm.generation",
    "generation_defaults": "lm.generation_defaults",
    "packaged": "lm.packaged",
    "packaged_tokenizers": "lm.packaged_tokenizers",
    "gguf_checkpoint": "lm.gguf_checkpoint",
    "exact": "lm.trie_walk",
    "train": "training.train",
    "objectives": "training.objectives",
    "batching": "training.batching",
    "reference": "artifacts.reference",
    "reproduction": "artifacts.reproduction",
    "compute": "artifacts.compute",
    "config": "pipeline.config",
    "layout": "pipeline.layout",
    "jobs": "pipeline.jobs",
    "assets": "pipeline.assets",
    "locks": "pipeline.locks",
    "plan": "pipeline.plan",
    "memory": "pipeline.memory",
    "slurm_states": "pipeline.slurm_states",
    "artifacts.inputs": "pipeline.artifact_inputs",
    "evals.gpirt": "evals.tinybench.gpirt",
}


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path (before any other finder: a stale copy of an old file must not be found) and loads the
    moved module."""

    def find_spec(self, fullname, path=None, target=None):
        old = fullname.removeprefix("calibft.")
        if not fullname.startswith("calibft.") or old not in MOVED:
            return None
        moved = importlib.util.find_spec(f"calibft.{MOVED[old]}")
        return importlib.util.spec_from_loader(fullname, self, origin=moved.origin)

    def create_module(self, spec):
        return importlib.import_module(f"calibft.{MOVED[spec.name.removeprefix('calibft.')]}")

    def exec_module(self, module):
        """Nothing to run: the moved module ran when it was imported."""

    def get_code(self, fullname):
        """The moved module's code, which `python -m OLD_PATH` runs as __main__."""
        moved = f"calibft.{MOVED[fullname.removeprefix('calibft.')]}"
        return importlib.util.find_spec(moved).loader.get_code(moved)


def install() -> None:
    """Make the old paths importable (once per process)."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModules())
