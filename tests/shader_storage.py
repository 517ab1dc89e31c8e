"""Workgroup memory a WGSL module declares (test helper for the kernels' storage limits)."""

from __future__ import annotations

import re


def declared_workgroup_storage(source: str) -> int:
    """Bytes of every ``var<workgroup>`` in ``source`` (f32 / vec4<f32> arrays): an upper
    bound of what any one pipeline of the module declares."""
    total = 0
    for kind, count in re.findall(
        r"var<workgroup>\s+\w+\s*:\s*array<\s*(f32|vec4<f32>)\s*,\s*(\d+)u?\s*>", source
    ):
        total += int(count) * (16 if kind.startswith("vec4") else 4)
    return total
