"""Advertised dense peak throughput of the GPUs we measure on: the one table MFU figures divide by.

Dense means without 2:4 sparsity (datasheets print the sparse figure, twice the dense one). Every
MFU gptstack reports names the peak it used (`Peak.label`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Peak:
    device: str
    dtype: str
    flops: float  # FLOP/s
    source: str

    @property
    def label(self) -> str:
        return f"{self.device} dense {self.dtype} {self.flops / 1e12:.0f} TFLOP/s ({self.source})"


_TABLE = [
    # NVIDIA H200 SXM datasheet: BF16 Tensor Core 1,979 TFLOPS "with sparsity"; TF32 989 with
    # sparsity; FP32 67 TFLOPS. H100 SXM has the same compute figures.
    Peak("H200", "bf16", 989e12, "NVIDIA H200 datasheet, SXM"),
    Peak("H200", "tf32", 494.5e12, "NVIDIA H200 datasheet, SXM"),
    Peak("H200", "fp32", 67e12, "NVIDIA H200 datasheet, SXM"),
    Peak("H100", "bf16", 989e12, "NVIDIA H100 datasheet, SXM"),
    Peak("H100", "tf32", 494.5e12, "NVIDIA H100 datasheet, SXM"),
    Peak("H100", "fp32", 67e12, "NVIDIA H100 datasheet, SXM"),
    # A100 datasheet: BF16 312 TFLOPS dense, TF32 156, FP32 19.5 (nanoGPT's MFU uses 312).
    Peak("A100", "bf16", 312e12, "NVIDIA A100 datasheet"),
    Peak("A100", "tf32", 156e12, "NVIDIA A100 datasheet"),
    Peak("A100", "fp32", 19.5e12, "NVIDIA A100 datasheet"),
]


def peak_flops(device_name: str, dtype: str = "bf16") -> Peak | None:
    """The dense peak for a device name as torch reports it (e.g. 'NVIDIA H200'), or None."""
    name = device_name.upper()
    for peak in _TABLE:
        if peak.device in name and peak.dtype == dtype:
            return peak
    return None
