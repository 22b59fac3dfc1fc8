"""Calibration Fine-Tuning: data layer, training and evaluation of the paper's pipeline."""

from calibft.cpu import pin_numpy_kernels

# Before numpy is imported: the same bits from numpy on every x86-64 CPU with AVX2 (see calibft.cpu).
pin_numpy_kernels()
