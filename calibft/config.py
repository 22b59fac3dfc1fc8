"""Checks of the workflow configuration beyond its JSON schema: references between sections."""

from __future__ import annotations


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
    check_recipes(config)


def check_recipes(config: dict) -> None:
    for name, recipe in config["recipes"].items():
        space = recipe["space"]
        if "train" not in config["output_spaces"].get(space, {}).get("splits", []):
            raise ValueError(
                f"recipes.{name}.space is {space!r}: it must name an output space built for the train split"
            )
        if recipe["objective"] == "soft" and "train" not in config["tries"].get(space, []):
            raise ValueError(f"recipes.{name} trains the soft objective on {space!r}: add train to tries.{space}")


def tokenizer_source(config: dict, tokenizer: str) -> str:
    """The folder or Hugging Face id a tokenizer key loads from."""
    entry = config["tokenizers"][tokenizer]
    return entry.get("path") or entry["hf_id"]
