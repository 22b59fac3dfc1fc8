"""The parts of the GPU check, whose command line is benchmarks/gpu_check.py: one module per thing it measures.

- `settings`: config.yaml and the structured evaluation's sampling settings that every part uses;
- `models`: the full-size models' shapes, their configurations (full or toy size) and building them;
- `consistency`: CUDA against the CPU (or bf16 against float32 on the CPU): logits and sampled answers;
- `sampling`: the sampling engine against plain `generate`;
- `exact`: the exact structured evaluation's pass;
- `training`: soft and hard LoRA steps;
- `peaks`: the measured peak GPU memory and `calibft.pipeline.memory`'s estimate of it;
- `report`: gpu_check.md's tables and writing gpu_check.json and gpu_check.md.
"""
