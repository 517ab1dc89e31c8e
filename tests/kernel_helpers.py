"""Test helpers for the kernels: the workgroup memory a WGSL module declares, and the
elements of a result that still hold the poison pattern."""

from __future__ import annotations

import re

import numpy as np

from ssmviz.core.dispatch import POISON_U32


def declared_workgroup_storage(source: str) -> int:
    """Bytes of every ``var<workgroup>`` in ``source`` (f32 / vec4<f32> arrays): an upper
    bound of what any one pipeline of the module declares."""
    total = 0
    for kind, count in re.findall(
        r"var<workgroup>\s+\w+\s*:\s*array<\s*(f32|vec4<f32>)\s*,\s*(\d+)u?\s*>", source
    ):
        total += int(count) * (16 if kind.startswith("vec4") else 4)
    return total


def unwritten_count(array: np.ndarray) -> int:
    """Elements of a float32 result that still hold the poison bit pattern."""
    a = np.ascontiguousarray(array)
    if a.dtype != np.float32:
        return 0
    return int(np.count_nonzero(a.view(np.uint32) == POISON_U32))
