"""Mamba's selective scan (S6): the family record (first step: delegating to the old modules)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ssmviz.core.families.family import Family, RoleSpec

INPUT_KEYS = ("u", "delta", "A_log", "B", "C", "D", "delta_bias", "dy")
FORWARD_KEYS = ("y", "last_state", "h")
GRAD_KEYS = ("du", "ddelta", "dA_log", "dB", "dC", "dD", "ddelta_bias")

_BLD = ("batch", "seq_len", "d_inner")
_BLN = ("batch", "seq_len", "d_state")


def _problem_sizes(p: Any) -> dict[str, int]:
    return {"batch": p.batch, "seq_len": p.seq_len, "d_inner": 4 if p.d_inner is None
            else p.d_inner, "d_state": p.d_state}


def _check_problem(p: Any) -> None:
    from ssmviz.core.problem import MAX_SIZE, _check_int

    names = ["batch", "seq_len", "d_state"]
    if p.d_inner is not None:
        names.insert(2, "d_inner")
    for name in names:
        _check_int(name, getattr(p, name), 1, MAX_SIZE[name])


def _build(p: Any) -> dict[str, np.ndarray]:
    return p._build_s6()


def _infer(arrays: Any) -> dict[str, int]:
    from ssmviz.core.problem import infer_sizes

    return infer_sizes("s6", arrays)


def _forward(inputs: Any, convention: str, sizes: Any) -> Any:
    from ssmviz.core.reference.s6 import s6_forward

    return s6_forward(*inputs.values(), convention=convention)


def _outputs(inputs: Any, dy: np.ndarray, convention: str, sizes: Any, fwd: Any) -> dict:
    from ssmviz.core.reference.s6 import s6_backward

    grads = s6_backward(*inputs.values(), dy, convention=convention, fwd=fwd)
    out = {"y": fwd.y, "last_state": fwd.last_state, "h": fwd.h}
    return out | {k: getattr(grads, k) for k in GRAD_KEYS}


def _kernel(runtime: Any, source: str | None = None) -> Any:
    from ssmviz.core.kernels.s6 import S6Kernel

    return S6Kernel(runtime, source=source)


def _abi() -> Any:
    raise NotImplementedError("first step: the ABI record moves here next")


def _states(s: Any) -> int:
    return s["batch"] * s["seq_len"] * s["d_inner"] * s["d_state"]


def _ref_bytes(sizes: Any, runs: int) -> int:
    from ssmviz.core.memory import reference_bytes

    return reference_bytes("s6", sizes, runs=runs)


def _sweep(quick: bool) -> list[dict[str, Any]]:
    from ssmviz.core.sweep import s6_cases

    return [p.to_dict() for p in s6_cases(quick)]


def _view() -> Any:
    from ssmviz.core.families.s6.view import VIEW

    return VIEW


def _derive(sizes: dict[str, int]) -> dict[str, int]:
    return sizes


FAMILY = Family(
    name="s6",
    display_name="S6 (Mamba selective scan)",
    shader="selective_scan.wgsl",
    input_keys=INPUT_KEYS,
    forward_keys=FORWARD_KEYS,
    grad_keys=GRAD_KEYS,
    state_key="h",
    size_names=("batch", "seq_len", "d_inner", "d_state"),
    run_sizes=(),
    default_sizes={"batch": 1, "seq_len": 256, "d_inner": 4, "d_state": 16},
    bench_sizes={},
    problem_sizes=_problem_sizes,
    check_problem=_check_problem,
    build_arrays=_build,
    infer_sizes=_infer,
    reference_forward=_forward,
    reference_outputs=_outputs,
    kernel=_kernel,
    abi=_abi,
    state_elements=_states,
    reference_bytes=_ref_bytes,
    sweep_cases=_sweep,
    view=_view,
    roles=RoleSpec(
        axes={
            **dict.fromkeys(("u", "delta", "dy", "y", "du", "ddelta", "du_no_skip"), _BLD),
            **dict.fromkeys(("A_log", "dA_log"), ("d_inner", "d_state")),
            **dict.fromkeys(("B", "C", "dB", "dC"), _BLN),
            **dict.fromkeys(("D", "delta_bias", "dD", "ddelta_bias"), ("d_inner",)),
            **dict.fromkeys(("h", "Ch"), ("batch", "seq_len", "d_inner", "d_state")),
            "last_state": ("batch", "d_inner", "d_state"),
        },
        sizes=("batch", "seq_len", "d_inner", "d_state"),
        defaults={"batch": 2, "seq_len": 37, "d_inner": 4, "d_state": 4},
        derive=_derive,
    ),
)
