"""CPU features: the numpy kernels that give the same bits on every x86-64 CPU, and the emulation of a CPU
without AVX-512.

numpy and torch pick the kernels of their vectorized functions at run time from the CPU's features. numpy's
AVX-512 kernels of the float64 transcendental functions (`power`, `exp`, `log`, `arctan`, ...) round the
last bits differently from the AVX2 ones, so on an AVX-512 CPU the output spaces of 7 of the 24
unseen-parameter prompts, for example, differ from an AVX2 CPU's in the last bits of their probabilities
(up to 1e-9 relative, where a tail mass is a difference of two CDF values near 1). Importing calibft
therefore turns numpy's AVX-512 kernels off before numpy is imported (`pin_numpy_kernels`): every x86-64
CPU with AVX2 then runs the same numpy code, and glibc's libm picks its FMA variants on all of them. Where
numpy was imported first, the first law evaluated warns (`warn_if_numpy_runs_avx512_kernels`).

torch's kernels are not pinned: training and sampling are not bit-identical across CPUs (and never across
GPUs), and the demo's tests assert outcomes with a margin measured over seeds and both feature sets. Nor is the
BLAS library behind numpy's matrix products (OpenBLAS picks its kernels by CPU too): what goes through it, such
as the optimizer of tinyBenchmarks' gp-IRT, may differ in its last bits between CPUs. The data layer (prompts,
output spaces, tries) goes through neither.
"""

from __future__ import annotations

import functools
import os
import platform
import warnings

# numpy's dispatch targets beyond AVX2 (numpy >= 2.4 names them by x86-64 level; X86_V3 is AVX2 with FMA).
NUMPY_AVX512_TARGETS = ("X86_V4", "AVX512_ICL", "AVX512_SPR")
NUMPY_PIN = {"NPY_DISABLE_CPU_FEATURES": " ".join(NUMPY_AVX512_TARGETS)}

# A CPU with AVX2 but no AVX-512, emulated on one that has it. On this project's CI CPU (AMD EPYC with
# AVX-512) the first two change the results: numpy's dispatch (see above) and torch's ATen kernels
# (softmax and log-softmax, for example). oneDNN runs no primitive in the fp32 CPU paths of calibft, and MKL
# ignores MKL_ENABLE_INSTRUCTIONS on AMD processors; both are set for Intel CPUs, where they take effect.
AVX2_FEATURE_SET = {
    **NUMPY_PIN,
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}


def kernels() -> dict[str, object]:
    """The kernels this process runs: numpy's AVX-512 targets in use and torch's ATen capability."""
    import torch

    return {
        "machine": platform.machine(),
        "numpy_avx512_kernels": numpy_avx512_kernels(),
        "torch_capability": torch.backends.cpu.get_cpu_capability(),
    }


def is_x86_64() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


def numpy_avx512_kernels() -> list[str]:
    """numpy's AVX-512 dispatch targets that this process runs (empty where the CPU lacks them or they are
    turned off)."""
    from numpy._core._multiarray_umath import __cpu_features__

    return [target for target in NUMPY_AVX512_TARGETS if __cpu_features__.get(target)]


def pin_numpy_kernels() -> None:
    """Turn numpy's AVX-512 kernels off for this process (if numpy is not imported yet) and the processes it
    starts, unless NPY_DISABLE_CPU_FEATURES is already set."""
    if is_x86_64():
        for name, value in NUMPY_PIN.items():
            os.environ.setdefault(name, value)


@functools.cache
def warn_if_numpy_runs_avx512_kernels() -> None:
    """Warn once per process if numpy runs its AVX-512 kernels (it was imported before calibft, or the user
    set NPY_DISABLE_CPU_FEATURES otherwise). Called where the laws are evaluated (calibft.data.families)."""
    active = numpy_avx512_kernels()  # empty off x86-64, where numpy has no such targets
    if active:
        warnings.warn(
            f"numpy runs its AVX-512 kernels ({', '.join(active)}): output-space probabilities and metrics may"
            " differ in their last bits from other CPUs'. Import calibft before numpy, or set"
            f" NPY_DISABLE_CPU_FEATURES='{NUMPY_PIN['NPY_DISABLE_CPU_FEATURES']}' (see calibft.core.cpu).",
            stacklevel=3,
        )
