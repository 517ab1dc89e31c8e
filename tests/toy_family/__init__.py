"""A toy kernel family, registered by the tests: h_t = a·h_{t-1} + b·x_t, y_t = c·h_t.

It lives wholly here (its WGSL ``toy.wgsl``, its runner, its float64 reference and this
record), so a test that registers it shows that a family needs no edit anywhere else to
get ``check``, ``sweep`` and the rest. Arrays: x, dy, y, h, dx (batch, seq_len, d_inner);
a, b, c, da, db, dc (d_inner,).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from ssmviz.core import families
from ssmviz.core.errors import SsmvizError
from ssmviz.core.families import Family, RoleSpec, Size, SizeSet
from ssmviz.core.families.abi import AbiProfile, BufferSpec, PassSpec
from ssmviz.core.families.family import check_shapes, require_keys
from ssmviz.core.signals import SignalSpec, generate
from tests.toy_family import reference
from tests.toy_family.kernel import BINDINGS, FORWARD, ToyKernel
from tests.toy_family.view import VIEW

INPUT_KEYS = ("x", "a", "b", "c", "dy")
SIZES = SizeSet((Size("batch", 1, 4096), Size("seq_len", 64, 1 << 26),
                 Size("d_inner", 4, 1 << 16)))
SIZE_NAMES = SIZES.names
_BLD = ("batch", "seq_len", "d_inner")


def _build(p: Any) -> dict[str, np.ndarray]:
    s = p.sizes()
    b, L, d = s["batch"], s["seq_len"], s["d_inner"]
    return {
        "x": generate(p.signal, b, L, d),
        "a": 0.9 + 0.05 * np.tanh(p.draw_normal("a", (d,))),  # decays in (0.85, 0.95)
        "b": p.draw_normal("b", (d,)),
        "c": p.draw_normal("c", (d,)),
        "dy": p.draw_dy((b, L, d)),
    }


def _infer(arrays: Mapping[str, np.ndarray]) -> dict[str, int]:
    a = require_keys(arrays, INPUT_KEYS)
    if a["x"].ndim != 3:
        raise SsmvizError(f"x must be (batch, seq_len, d_inner); got {a['x'].shape}")
    batch, seq_len, d_inner = a["x"].shape
    bld = ((batch, seq_len, d_inner), "(batch, seq_len, d_inner)")
    chan = ((d_inner,), "(d_inner,)")
    expected = {"x": bld, "a": chan, "b": chan, "c": chan, "dy": bld}
    return check_shapes(a, expected, {"batch": batch, "seq_len": seq_len, "d_inner": d_inner})


def _states(sizes: Mapping[str, int]) -> int:
    return sizes["batch"] * sizes["seq_len"] * sizes["d_inner"]


def _ram(sizes: Mapping[str, int], runs: int, stored_max: int) -> int:
    del stored_max
    return 8 * 12 * _states(sizes) + 4 * (runs + 1) * 3 * _states(sizes)


def _sweep(quick: bool) -> list[dict[str, Any]]:
    seq_lens = (1, 7, 64) if quick else (1, 7, 64, 300)
    return [dict(family="toy", convention="mamba", batch=batch, seq_len=t, d_inner=5,
                 signal=SignalSpec(name="noise", seed=t), seed=t)
            for t in seq_lens for batch in (1, 2)]


def _abi() -> AbiProfile:
    io = {k: "in" for k in INPUT_KEYS} | {k: "out" for k in ("y", "h", "dx", "da", "db", "dc")}
    buffers = {k: BufferSpec(k, [k], list(_BLD if k in ("x", "dy", "y", "h", "dx")
                                          else ("d_inner",)), io[k],
                             stage="forward" if k in ("y", "h") else "backward")
               for k in BINDINGS}
    passes = [
        PassSpec("toy_forward", "forward", (64, 1, 1), ["1"],
                 {0: "params"} | {BINDINGS[k]: k for k in FORWARD}),
        PassSpec("toy_backward", "backward", (64, 1, 1), ["1"],
                 {0: "params"} | {i: k for k, i in BINDINGS.items() if k != "y"}),
    ]
    return AbiProfile(name="ssmviz-toy", family=None, convention=None,
                      params=["batch", "seq_len", "d_inner", "reverse"], params_binding=0,
                      sizes={}, buffers=buffers, passes=passes, host="toy",
                      description="the test suite's toy recurrence (tests/toy_family)")


FAMILY = Family(
    name="toy",
    display_name="Toy (first-order linear recurrence)",
    shader="",  # the runner carries its own source (toy.wgsl here)
    input_keys=INPUT_KEYS,
    forward_keys=("y", "h"),
    grad_keys=reference.GRAD_KEYS,
    state_key="h",
    sizes=SIZES,
    bench_sizes={},
    build_arrays=_build,
    infer_sizes=_infer,
    reference_forward=reference.forward,
    reference_outputs=reference.outputs,
    kernel=ToyKernel,
    abi=_abi,
    state_elements=_states,
    reference_bytes=_ram,
    sweep_cases=_sweep,
    roles=RoleSpec(
        axes={k: (_BLD if k in ("x", "dy", "y", "h", "dx") else ("d_inner",)) for k in BINDINGS},
        sizes=SIZE_NAMES,
        defaults={"batch": 2, "seq_len": 37, "d_inner": 4},
        derive=dict,
    ),
    view=lambda: VIEW,
)


def registered(monkeypatch: pytest.MonkeyPatch) -> Family:
    """Register :data:`FAMILY` for one test: the registry is restored afterwards."""
    monkeypatch.setattr(families, "_REGISTRY", dict(families._REGISTRY))
    return families.register(FAMILY)
