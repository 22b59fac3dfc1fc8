"""Calibration Fine-Tuning: data layer, training and evaluation of the paper's pipeline."""
