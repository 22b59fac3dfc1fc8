"""Checks of the workflow configuration beyond its JSON schema: references between sections."""

from __future__ import annotations

import copy
import functools
import os
import re
from collections.abc import Sequence
from pathlib import Path

import yaml

from calibft.core.repository import REPOSITORY
from calibft.data.grid import prompts

SCHEMA = "schemas/config.schema.yaml"


def merged(defaults: dict, settings: dict) -> dict:
    """`settings` over `defaults`, the keys of `settings` first: a mapping in both is merged key by key, any
    other value of `settings` replaces the default. Neither argument is changed."""
    out = {}
    for key, value in settings.items():
        default = defaults.get(key)
        both = isinstance(value, dict) and isinstance(default, dict)
        out[key] = merged(default, value) if both else copy.deepcopy(value)
    out.update({key: copy.deepcopy(value) for key, value in defaults.items() if key not in settings})
    return out


def resolve_model_families(config: dict) -> dict:
    """Give every model of `config` the settings of its family (`model_families`, keyed by the model's
    `family`, else its `display`) that it does not set itself, in place; returns `config`. Resolving twice
    gives the same models."""
    families = config.get("model_families") or {}
    for name, model in config.get("models", {}).items():
        family = families.get(model.get("family", model.get("display")))
        if family:
            config["models"][name] = merged(family, model)
    return config


def read_config(path: str | Path) -> dict:
    """A workflow configuration file as the workflow reads it: over the base it names (`base:`, a path in
    this repository, e.g. profiles/cpu.yaml), whose keys it overrides as Snakemake merges them (`merged`),
    then `resolved`."""
    config = yaml.safe_load(Path(path).read_text())
    base = base_of(config)
    return resolved(config if base is None else merged(base, config), base)


def base_of(config: dict, workflow_dir: str | Path = REPOSITORY) -> dict | None:
    """The base configuration that `config` names (`base:`, a path under `workflow_dir`, the directory of the
    Snakefile, where Snakemake reads it too); None without one."""
    if "base" not in config:
        return None
    path = Path(workflow_dir) / config["base"]
    if not path.is_file():
        raise ValueError(f"base {config['base']!r} does not exist (looked for {path})")
    return yaml.safe_load(path.read_text())


def resolved(config: dict, base: dict | None) -> dict:
    """A configuration as the workflow uses it, given merged over its base (as Snakemake merges its configuration
    files): the keys of every mapping in one order (`in_written_order`), and every model given its family's
    settings (`resolve_model_families`). Returns a new dict."""
    ordered = copy.deepcopy(config) if base is None else in_written_order(config, base)
    return resolve_model_families(ordered)


def check_standalone(
    config: dict, replaces_config: bool, configfiles: Sequence[str | os.PathLike], basedir: str
) -> None:
    """Raise ValueError, naming the `configfiles` (the --configfiles) and the fix, when a cluster job would read
    another configuration than the main process. `config` is as Snakemake merged it; `replaces_config`: whether
    --replace-workflow-config was given, which cluster jobs do not get, so they would read config.yaml too unless
    the configuration says it is whole (`standalone: true`). A base that the configuration names (`base:`, under
    `basedir`) must be there, since Snakemake skips a configfile that does not exist, and be whole."""
    if config.get("standalone", False):
        return
    files = " and ".join(map(str, configfiles))
    if replaces_config:
        raise ValueError(
            "--replace-workflow-config is not passed on to cluster jobs, which would then read config.yaml under "
            f"{files}: put `standalone: true` in a configuration that replaces config.yaml, and drop the option"
        )
    if "base" in config:
        base = os.path.join(basedir, config["base"])
        problem = (
            "is no whole configuration: put `standalone: true` in it"
            if os.path.isfile(base)
            else f"does not exist (looked for {base})"
        )
        raise ValueError(f"{files}: base {config['base']!r} {problem}")


@functools.cache
def config_schema() -> dict:
    """The configuration's JSON schema (SCHEMA), read once per process. Callers must not change it."""
    return yaml.safe_load((REPOSITORY / SCHEMA).read_text())


def in_written_order(config: dict, base: dict) -> dict:
    """`config`, a configuration merged over `base`, with the keys of every mapping in one order: the properties
    that the schema declares there, in the schema's order, then the other keys (names of output spaces, recipes,
    models) as `base` lists them, then those of the configuration alone. Snakemake merges a configuration's own
    keys first; jobs record parts of the configuration as text (a training job its recipe, a table the names of
    the recipes), so without this the order of a file's keys, not their values, would change a job's parameters
    and Snakemake would rerun it. Returns a new dict."""
    schema = config_schema()

    def resolved(node) -> dict:
        while isinstance(node, dict) and "$ref" in node:
            node = schema["$defs"][node["$ref"].rsplit("/", 1)[-1]] | {k: v for k, v in node.items() if k != "$ref"}
        return node if isinstance(node, dict) else {}

    def ordered(value, node, base_value):
        if not isinstance(value, dict):
            return value
        node = resolved(node)
        declared = list(node.get("properties", {}))
        listed = list(base_value) if isinstance(base_value, dict) else []
        keys = [k for k in declared if k in value] + [k for k in listed if k in value and k not in declared]
        keys += [k for k in value if k not in keys]
        other = node.get("additionalProperties")
        return {
            key: ordered(
                value[key],
                node.get("properties", {}).get(key, other if isinstance(other, dict) else {}),
                base_value.get(key) if isinstance(base_value, dict) else None,
            )
            for key in keys
        }

    return ordered(config, schema, base)


def validate_config(config: dict, schema: str, source: str = "the config") -> None:
    """Snakemake's `validate` (which also fills in the schema's defaults), with a failure reported as one
    ValueError that names the config file, the key, what is wrong and what to add or change, before any job
    starts. `source` is the config file(s), as the message names them."""
    from jsonschema import ValidationError
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    try:
        validate(config, schema)
    except WorkflowError as err:
        cause = err.__context__
        if not isinstance(cause, ValidationError):
            raise ValueError(f"{source} does not match {SCHEMA}: {err}") from err
        raise ValueError(schema_error_message(cause, config, source)) from err


def schema_error_message(error, config: dict, source: str) -> str:
    """`{source}: {key}: {what is wrong}; {the fix}` of a jsonschema ValidationError."""
    where = ".".join(str(part) for part in error.absolute_path) or "the top level"
    if error.validator == "required":
        missing = re.match(r"'([^']+)' is a required property", error.message)
        name = missing.group(1) if missing else "?"
        key = f"{where}.{name}" if error.absolute_path else name
        described = error.schema.get("properties", {}).get(name, {}).get("description", "")
        return f"{source}: {key} is missing ({error.message}); add {key}{_what_it_is(described, config)} (see {SCHEMA})"
    described = error.schema.get("description", "") if isinstance(error.schema, dict) else ""
    return f"{source}: {where}: {error.message}; correct {where}{_what_it_is(described, config)} (see {SCHEMA})"


def _what_it_is(description: str, config: dict) -> str:
    """`: <description>`, with the known keys when it says `a key of <section>`."""
    if not description:
        return ""
    key_of = re.search(r"a key of `?(\w+)`?", description)
    known = config.get(key_of.group(1)) if key_of else None
    keys = f" (known: {', '.join(known)})" if isinstance(known, dict) and known else ""
    return f": {description.strip()}{keys}"


def check_config(config: dict) -> None:
    """Raise ValueError naming the first key that refers to something the config does not define."""
    for name, model in config["models"].items():
        if model["tokenizer"] not in config["tokenizers"]:
            raise ValueError(
                f"models.{name}.tokenizer is {model['tokenizer']!r}, which is not a key of `tokenizers` "
                f"(known: {', '.join(config['tokenizers'])})"
            )
    for space, splits in config["tries"].items():
        if space not in config["output_spaces"]:
            raise ValueError(f"tries.{space} names no output space; define output_spaces.{space} or remove it")
        missing = sorted(set(splits) - set(config["output_spaces"][space]["splits"]))
        if missing:
            raise ValueError(
                f"tries.{space} asks for splits {missing} that output_spaces.{space}.splits does not build"
            )
    for section in ("grid_granularity", "method_figure"):
        tokenizer = config[section]["tokenizer"]
        if tokenizer not in config["tokenizers"]:
            raise ValueError(
                f"{section}.tokenizer is {tokenizer!r}, which is not a key of `tokenizers` "
                f"(known: {', '.join(config['tokenizers'])})"
            )
    built_twice = sorted(set(config["tiny_models"]) & set(config.get("packaged_models", [])))
    if built_twice:
        raise ValueError(f"{built_twice} are both tiny_models and packaged_models: results/models/ holds one of each")
    method_prompt = config["method_figure"]["prompt"]
    if method_prompt not in {p.id for p in prompts("train")}:
        raise ValueError(f"method_figure.prompt {method_prompt!r} is not a train prompt id (e.g. 'gaussian-088')")
    hub_checkpoints(config)
    check_recipes(config)
    check_evaluation(config)
    check_ablations(config)


def check_recipes(config: dict) -> None:
    for name, recipe in config["recipes"].items():
        space = recipe["space"]
        if "train" not in config["output_spaces"].get(space, {}).get("splits", []):
            raise ValueError(
                f"recipes.{name}.space is {space!r}: it must name an output space built for the train split"
            )
        if recipe["objective"] == "soft" and "train" not in config["tries"].get(space, []):
            raise ValueError(f"recipes.{name} trains the soft objective on {space!r}: add train to tries.{space}")


def check_evaluation(config: dict) -> None:
    structured, ssot = config["evaluation"]["structured"], config["evaluation"]["ssot"]
    space = structured["space"]
    missing = sorted(set(structured["splits"]) - set(config["tries"].get(space, [])))
    if missing:
        raise ValueError(
            f"evaluation.structured.space is {space!r}, whose tries do not cover splits {missing}: "
            f"add them to tries.{space} (the logit KL needs them)"
        )
    for condition in config["evaluation"]["conditions"]:
        if condition != "base" and condition not in config["recipes"]:
            raise ValueError(
                f"evaluation.conditions names {condition!r}: use base or a recipe ({', '.join(config['recipes'])})"
            )
    ood = {p.id for p in prompts("ood")}
    for i, panel in enumerate(structured["qualitative"]):
        if panel["model"] not in config["models"]:
            raise ValueError(f"evaluation.structured.qualitative[{i}].model {panel['model']!r} is not a key of models")
        if panel["prompt"] not in ood:
            raise ValueError(
                f"evaluation.structured.qualitative[{i}].prompt {panel['prompt']!r} is not an ood prompt id "
                f"(e.g. {min(ood)})"
            )
    noveltybench = config["evaluation"]["noveltybench"]
    for where, models in [
        ("evaluation.open_ended.qualitative.models", config["evaluation"]["open_ended"]["qualitative"]["models"]),
        ("evaluation.noveltybench.qualitative_models", noveltybench["qualitative_models"]),
    ]:
        unknown = [m for m in models if m not in config["models"]]
        if unknown:
            raise ValueError(f"{where} names {unknown}, which are not keys of models")
    evaluation = config["evaluation"]
    for where, files, needed in [
        ("noveltybench.prompts_files", noveltybench["prompts_files"], noveltybench["splits"]),
        (
            "tinybenchmarks.items_files",
            evaluation["tinybenchmarks"]["items_files"],
            evaluation["tinybenchmarks"]["tasks"],
        ),
        ("paloma.slice_files", evaluation["paloma"]["slice_files"], evaluation["paloma"]["slices"]),
    ]:
        missing = [] if files is None else [key for key in needed if key not in files]
        if missing:
            raise ValueError(
                f"evaluation.{where} has no file for {missing}: add them, or set it to null to download the data"
            )
    paloma = evaluation["paloma"]
    if paloma["stride"] >= paloma["window"]:
        raise ValueError(
            f"evaluation.paloma.stride ({paloma['stride']}) must be smaller than its window ({paloma['window']}): "
            "each later window needs context before the tokens it scores"
        )
    if ssot["qualitative_model"] not in config["models"]:
        raise ValueError(f"evaluation.ssot.qualitative_model {ssot['qualitative_model']!r} is not a key of models")
    patterns = {"evaluation.ssot.answer_pattern": ssot["answer_pattern"]}
    for key, model in config["models"].items():
        patterns[f"models.{key}.ssot_answer_pattern"] = model.get("ssot_answer_pattern")
    for where, pattern in patterns.items():
        if pattern is None:  # not set, or the whole answer
            continue
        try:
            groups = re.compile(pattern).groups
        except re.error as err:
            raise ValueError(f"{where} is not a regular expression: {err}") from err
        if groups < 1:
            raise ValueError(f"{where} needs a group that captures the answer, e.g. <answer>(.*?)</answer>")


# Where the workflow keeps its snapshot of each Hugging Face checkpoint: jobs load from here, never from the hub.
SNAPSHOTS = "resources/hf/models"
DEFAULT_REVISION = "main"


def snapshot_folder(hf_id: str) -> str:
    """The snapshot of a Hugging Face repository, e.g. resources/hf/models/Qwen/Qwen3-0.6B."""
    return f"{SNAPSHOTS}/{hf_id}"


def tokenizer_source(config: dict, tokenizer: str) -> str:
    """The folder a tokenizer key loads from: its `path`, or the snapshot of its `hf_id`."""
    return _source(config["tokenizers"][tokenizer])


def model_source(config: dict, model: str) -> str:
    """The folder a model key loads from: its `path`, or the snapshot of its `hf_id`."""
    return _source(config["models"][model])


def _source(entry: dict) -> str:
    return entry.get("path") or snapshot_folder(entry["hf_id"])


def hub_checkpoints(config: dict) -> dict[str, str]:
    """{Hugging Face id: revision} of every model and tokenizer given by `hf_id`: the repositories the workflow
    snapshots, once each (a tokenizer of a model's repository shares its snapshot). Raises ValueError when two
    entries ask for one repository at different revisions."""
    revisions: dict[str, str] = {}
    for section in ("models", "tokenizers"):
        for key, entry in config[section].items():
            if "hf_id" not in entry:
                continue
            hf_id, revision = entry["hf_id"], entry.get("revision", DEFAULT_REVISION)
            if revisions.setdefault(hf_id, revision) != revision:
                raise ValueError(
                    f"{section}.{key} asks for {hf_id} at revision {revision!r}, another entry at "
                    f"{revisions[hf_id]!r}: one snapshot serves both, so give them the same revision"
                )
    return revisions


def check_ablations(config: dict) -> None:
    ablations = config["ablations"]
    unknown = [m for m in ablations["models"] if m not in config["models"]]
    if unknown:
        raise ValueError(f"ablations.models names {unknown}, which are not keys of models")
    for objective in ("soft", "hard"):
        for recipe in ablations[objective]:
            if recipe not in config["recipes"]:
                raise ValueError(f"ablations.{objective} names {recipe!r}, which is not a key of recipes")
            if config["recipes"][recipe]["objective"] != objective:
                raise ValueError(f"ablations.{objective} names {recipe!r}, a recipe of the other objective")
    qualitative = ablations["qualitative"]
    stray = [r for r in qualitative["recipes"] if r not in ablations["soft"]]
    if stray:
        raise ValueError(f"ablations.qualitative.recipes names {stray}, which are not in ablations.soft")
    ood = {p.id for p in prompts("ood")}
    stray = [p for p in qualitative["prompts"] if p not in ood]
    if stray:
        raise ValueError(
            f"ablations.qualitative.prompts names {stray}, which are not ood prompt ids (e.g. 'poisson-001')"
        )
