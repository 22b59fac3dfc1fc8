"""Calibration Fine-Tuning: data layer, training and evaluation of the paper's pipeline.

Stages, each importing only from those before it: core, data, lm, training, evals, then demo and artifacts,
then pipeline (the workflow's planner); cli on top. docs/architecture.md describes them.
"""

from calibft.core.cpu import pin_numpy_kernels

# Before numpy is imported: the same bits from numpy on every x86-64 CPU with AVX2 (see calibft.core.cpu).
pin_numpy_kernels()
