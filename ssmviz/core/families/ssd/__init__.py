"""Mamba-2's chunked SSD: the family record (first step: delegating to the old modules)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ssmviz.core.families.family import Family, RoleSpec

INPUT_KEYS = ("x", "dt", "A_log", "B", "C", "D", "dt_bias", "dy")
FORWARD_KEYS = ("y", "final_state", "chunk_states")
GRAD_KEYS = ("dx", "ddt", "dA_log", "dB", "dC", "dD", "ddt_bias")

_BLHP = ("batch", "seq_len", "n_heads", "d_head")
_BLGN = ("batch", "seq_len", "n_groups", "d_state")


def _problem_sizes(p: Any) -> dict[str, int]:
    return {"batch": p.batch, "seq_len": p.seq_len, "d_inner": p.n_heads * p.d_head,
            "d_state": p.d_state, "n_heads": p.n_heads, "d_head": p.d_head,
            "n_groups": p.n_groups, "chunk_len": p.chunk_len}


def _check_problem(p: Any) -> None:
    raise NotImplementedError("first step")


def _build(p: Any) -> dict[str, np.ndarray]:
    return p._build_ssd()


def _infer(arrays: Any) -> dict[str, int]:
    from ssmviz.core.problem import infer_sizes

    return infer_sizes("ssd", arrays)


def _forward(inputs: Any, convention: str, sizes: Any) -> Any:
    from ssmviz.core.reference.ssd import ssd_forward_chunked

    return ssd_forward_chunked(*inputs.values(), chunk_len=sizes["chunk_len"],
                               convention=convention)


def _outputs(inputs: Any, dy: np.ndarray, convention: str, sizes: Any, fwd: Any) -> dict:
    from ssmviz.core.reference.ssd import ssd_backward_chunked

    grads = ssd_backward_chunked(*inputs.values(), dy, chunk_len=sizes["chunk_len"],
                                 convention=convention)
    out = {"y": fwd.y, "final_state": fwd.final_state, "chunk_states": fwd.chunk_states}
    return out | {k: getattr(grads, k) for k in GRAD_KEYS}


def _kernel(runtime: Any, source: str | None = None) -> Any:
    from ssmviz.core.kernels.ssd import SSDKernel

    return SSDKernel(runtime, source=source)


def _abi() -> Any:
    raise NotImplementedError("first step: the ABI record moves here next")


def _states(s: Any) -> int:
    return s["batch"] * s["seq_len"] * s["d_inner"] * s["d_state"]


def _ref_bytes(sizes: Any, runs: int) -> int:
    from ssmviz.core.memory import reference_bytes

    return reference_bytes("ssd", sizes, runs=runs)


def _sweep(quick: bool) -> list[dict[str, Any]]:
    from ssmviz.core.sweep import ssd_cases

    return [p.to_dict() for p in ssd_cases(quick)]


def _view() -> Any:
    from ssmviz.core.families.ssd.view import VIEW

    return VIEW


def _derive(sizes: dict[str, int]) -> dict[str, int]:
    return sizes


FAMILY = Family(
    name="ssd",
    display_name="SSD (Mamba-2 chunked)",
    shader="ssd.wgsl",
    input_keys=INPUT_KEYS,
    forward_keys=FORWARD_KEYS,
    grad_keys=GRAD_KEYS,
    state_key="chunk_states",
    size_names=("batch", "seq_len", "d_inner", "d_state", "n_heads", "d_head", "n_groups",
                "chunk_len"),
    run_sizes=("chunk_len",),
    default_sizes={"batch": 1, "seq_len": 256, "d_state": 16, "n_heads": 4, "d_head": 16,
                   "n_groups": 1, "chunk_len": 64},
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
            **dict.fromkeys(("x", "dy", "y", "dx", "dx_no_skip"), _BLHP),
            **dict.fromkeys(("dt", "ddt"), ("batch", "seq_len", "n_heads")),
            **dict.fromkeys(("A_log", "D", "dt_bias", "dA_log", "dD", "ddt_bias"), ("n_heads",)),
            **dict.fromkeys(("B", "C", "dB", "dC"), _BLGN),
            "final_state": ("batch", "n_heads", "d_head", "d_state"),
            "chunk_states": ("batch", "chunk_slot", "n_heads", "d_head", "d_state"),
        },
        sizes=("batch", "seq_len", "d_inner", "n_heads", "d_head", "n_groups", "d_state",
               "chunk_len", "n_chunks", "chunk_slot"),
        defaults={"batch": 1, "seq_len": 37, "n_heads": 4, "d_head": 4, "n_groups": 2,
                  "d_state": 4, "chunk_len": 8},
        derive=_derive,
        split={"d_inner": ("n_heads", "d_head")},
    ),
)
