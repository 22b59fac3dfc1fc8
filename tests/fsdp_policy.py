"""Accelerate's FSDP wrapping as launch/fsdp.yaml configures it, computed by Accelerate's own code: the settings its
launcher hands the training processes, and the auto-wrap policy `Accelerator.prepare` builds from them."""

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]


def launcher_fsdp_env() -> dict[str, str]:
    """The FSDP settings `accelerate launch --config_file launch/fsdp.yaml` hands its processes
    (calibft.pipeline.resources.training_launcher)."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_multi_gpu_env

    argv = [
        "--config_file",
        str(ROOT / "launch/fsdp.yaml"),
        "--num_processes",
        "4",
        "-m",
        "calibft.training.train",
        "x",
    ]
    args, _, _ = _validate_launch_command(launch_command_parser().parse_args(argv))
    env = prepare_multi_gpu_env(args)
    return {key: value for key, value in env.items() if key.startswith("FSDP_") or key == "ACCELERATE_USE_FSDP"}


def wrap_policy(model, env: dict[str, str]):
    """Accelerate's FSDP auto-wrap policy for `model`, as `Accelerator.prepare` sets it (`set_auto_wrap_policy`).

    sync_module_states and cpu_ram_efficient_loading (true in launch/fsdp.yaml) only decide how weights are
    initialized and loaded, and need a GPU to construct the plugin: off here."""
    from accelerate.utils import FullyShardedDataParallelPlugin

    with mock.patch.dict(os.environ, env):
        plugin = FullyShardedDataParallelPlugin(sync_module_states=False, cpu_ram_efficient_loading=False)
        plugin.set_auto_wrap_policy(model)
    return plugin.auto_wrap_policy


def wrapped_modules(model, policy) -> dict[str, object]:
    """The modules that `policy` makes FSDP units of, by name (the root unit, the model itself, aside)."""
    return {name: m for name, m in model.named_modules() if policy(module=m, recurse=False, nonwrapped_numel=0)}
