"""What every form of the SSD reference (:mod:`~ssmviz.core.families.ssd.reference`,
:mod:`~ssmviz.core.families.ssd.chunked`) shares: the results (:class:`SSDForward`,
:class:`SSDGrads`), the inputs validated (:func:`validate`) and read by a convention, the
discretisation (:func:`ssd_discretise`) and the chain of its gradients back to the
parameters', heads reading their groups' B and C, and the stable segment sum with its
adjoint. Names and shapes as in the glossary of :mod:`ssmviz.core.families.ssd.reference`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike

from ssmviz.core.errors import SsmvizError
from ssmviz.core.reference._common import CONVENTIONS
from ssmviz.core.reference.conventions import Convention as ConventionParams
from ssmviz.core.reference.conventions import ConventionRules, resolve


@dataclass(frozen=True)
class SSDForward:
    """Result of an SSD forward pass.

    y: (batch, seq_len, n_heads, d_head); final_state: (batch, n_heads, d_head, d_state).
    states: recurrent form only, every h_t, (batch, seq_len, n_heads, d_head, d_state).
    chunk_states: chunked form only, the state entering each chunk plus the final state,
    (batch, n_chunks + 1, n_heads, d_head, d_state); slot 0 holds zeros.
    """

    y: np.ndarray
    final_state: np.ndarray
    states: np.ndarray | None
    chunk_states: np.ndarray | None


@dataclass(frozen=True)
class SSDGrads:
    """Gradients of sum(y * dy) with the shapes of the inputs; ddt is w.r.t. the raw dt."""

    dx: np.ndarray  # (batch, seq_len, n_heads, d_head)
    ddt: np.ndarray  # (batch, seq_len, n_heads)
    dA_log: np.ndarray  # (n_heads,)
    dB: np.ndarray  # (batch, seq_len, n_groups, d_state)
    dC: np.ndarray  # (batch, seq_len, n_groups, d_state)
    dD: np.ndarray  # (n_heads,)
    ddt_bias: np.ndarray  # (n_heads,)


# --------------------------------------------------------------------------- validation


def check_int(name: str, value: object, minimum: int) -> int:
    """``value`` as an int, or SsmvizError naming ``name`` when it is not an integer or
    is below ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise SsmvizError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise SsmvizError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def n_chunks(seq_len: int, chunk_len: int) -> int:
    """Number of chunks of ``chunk_len`` covering ``seq_len`` steps (ceil division)."""
    seq_len = check_int("seq_len", seq_len, 0)
    chunk_len = check_int("chunk_len", chunk_len, 1)
    return -(-seq_len // chunk_len)


def _refuse(changes: Mapping[str, object]) -> str | None:
    if changes.get("B_bar", "euler") != "euler":
        return "convention.B_bar is S6's (SSD's input term is dt_input)"
    return None


#: SSD's conventions (its record's ``conventions``): builderforce's SSD is
#: A = −softplus(A_log) without dt on the input; B_bar is S6's.
RULES = ConventionRules(
    presets={"mamba": ConventionParams(),
             "builderforce": ConventionParams(name="builderforce", base="builderforce",
                                              A="softplus", dt_input=False)},
    step_keys=("dt", "dt_bias"),
    refuse=_refuse,
)


def check_convention(convention: str | ConventionParams) -> ConventionParams:
    """The convention's parameters (a preset's name or the parameters themselves)."""
    if isinstance(convention, str) and convention not in CONVENTIONS:
        raise SsmvizError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
    return resolve(convention, RULES)


def apply_convention(inp: SSDInputs, conv: ConventionParams) -> SSDInputs:
    """The inputs as ``conv`` reads them: no bias or no D is a zero one."""
    if not conv.dt_bias:
        inp = replace(inp, dt_bias=np.zeros_like(inp.dt_bias))
    if not conv.D:
        inp = replace(inp, D=np.zeros_like(inp.D))
    return inp


def as_f64(name: str, value: object, ndim: int) -> np.ndarray:
    """``value`` as a float64 array, or SsmvizError naming ``name`` when it has not
    ``ndim`` dimensions."""
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim != ndim:
        raise SsmvizError(f"{name} must have {ndim} dimensions, got shape {arr.shape}")
    return arr


def _expect(name: str, arr: np.ndarray, shape: tuple[int, ...], layout: str) -> None:
    if arr.shape != shape:
        raise SsmvizError(f"{name} must have shape {layout} = {shape}, got {arr.shape}")


@dataclass(frozen=True)
class SSDInputs:
    """The layer's inputs as float64 arrays, shapes as in the glossary."""

    x: np.ndarray
    dt: np.ndarray
    A_log: np.ndarray
    B: np.ndarray
    C: np.ndarray
    D: np.ndarray
    dt_bias: np.ndarray


def validate(
    x: ArrayLike,
    dt: ArrayLike,
    A_log: ArrayLike,
    B: ArrayLike,
    C: ArrayLike,
    D: ArrayLike,
    dt_bias: ArrayLike | None,
    dy: ArrayLike | None = None,
) -> tuple[SSDInputs, np.ndarray | None]:
    """The inputs (and ``dy``) as float64 arrays of matching shapes (dt_bias None: zeros),
    or SsmvizError naming the array whose shape is wrong."""
    x = as_f64("x", x, 4)
    batch, seq_len, n_heads, d_head = x.shape
    for name, size in (
        ("batch", batch),
        ("seq_len", seq_len),
        ("n_heads", n_heads),
        ("d_head", d_head),
    ):
        if size < 1:
            raise SsmvizError(f"x dimension {name} must be >= 1, got shape {x.shape}")
    dt = as_f64("dt", dt, 3)
    _expect("dt", dt, (batch, seq_len, n_heads), "(batch, seq_len, n_heads)")
    A_log = as_f64("A_log", A_log, 1)
    _expect("A_log", A_log, (n_heads,), "(n_heads,)")
    D = as_f64("D", D, 1)
    _expect("D", D, (n_heads,), "(n_heads,)")
    if dt_bias is None:
        dt_bias = np.zeros(n_heads)
    dt_bias = as_f64("dt_bias", dt_bias, 1)
    _expect("dt_bias", dt_bias, (n_heads,), "(n_heads,)")
    B = as_f64("B", B, 4)
    if B.shape[:2] != (batch, seq_len) or B.shape[2] < 1 or B.shape[3] < 1:
        raise SsmvizError(
            f"B must have shape (batch, seq_len, n_groups, d_state) with batch={batch}, "
            f"seq_len={seq_len}, got {B.shape}"
        )
    C = as_f64("C", C, 4)
    _expect("C", C, B.shape, "(batch, seq_len, n_groups, d_state) like B")
    if dy is not None:
        dy = as_f64("dy", dy, 4)
        _expect("dy", dy, x.shape, "(batch, seq_len, n_heads, d_head) like x")
    return SSDInputs(x, dt, A_log, B, C, D, dt_bias), dy


def check_chunk_len(chunk_len: object) -> int:
    """``chunk_len`` as an int >= 1, or SsmvizError."""
    return check_int("chunk_len", chunk_len, 1)


# --------------------------------------------------------------------------- shared pieces


def head_groups(n_heads: int, n_groups: int) -> np.ndarray:
    """Group read by each head: g = h * n_groups // n_heads, (n_heads,)."""
    return np.arange(n_heads) * n_groups // n_heads


def per_head(arr: np.ndarray, n_heads: int) -> np.ndarray:
    """(batch, seq_len, n_groups, d_state) -> (batch, seq_len, n_heads, d_state)."""
    return arr[:, :, head_groups(n_heads, arr.shape[2]), :]


def _to_groups(d_heads: np.ndarray, n_groups: int) -> np.ndarray:
    """Sum a per-head gradient (batch, seq_len, n_heads, d_state) into its groups."""
    n_heads = d_heads.shape[2]
    one_hot = np.zeros((n_heads, n_groups))
    one_hot[np.arange(n_heads), head_groups(n_heads, n_groups)] = 1.0
    return np.einsum("bthn,hg->btgn", d_heads, one_hot)


@dataclass(frozen=True)
class SSDDiscrete:
    """The discretisation of a layer's inputs (:func:`ssd_discretise`)."""

    dt_eff: np.ndarray  # (batch, seq_len, n_heads)
    log_decay: np.ndarray  # a_t = log Ā_t, (batch, seq_len, n_heads)
    in_scale: np.ndarray  # s_t, (batch, seq_len, n_heads)


def ssd_discretise(
    dt: ArrayLike, dt_bias: ArrayLike, A_log: ArrayLike, *, convention: str = "mamba"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """dt_eff, log Ā and the input scale s (h_t = Ā_t h_{t-1} + s_t·x_t ⊗ B_t), elementwise.

    ``dt`` raw (..., n_heads) with ``dt_bias`` and ``A_log`` broadcastable to it.
    mamba: log Ā = dt_eff·A with A = -exp(A_log), s = dt_eff; builderforce:
    log Ā = -softplus(A_log)·dt_eff, s = 1.
    """
    conv = check_convention(convention)
    A_log = np.asarray(A_log, np.float64)
    bias = np.asarray(dt_bias, np.float64) if conv.dt_bias else 0.0
    dt_eff = conv.step(np.asarray(dt, np.float64) + bias)
    scale = dt_eff if conv.dt_input else np.ones_like(dt_eff)
    return dt_eff, dt_eff * conv.a_matrix(A_log), scale


def discretise(inp: SSDInputs, convention: str) -> SSDDiscrete:
    """The discretisation of ``inp`` (:func:`ssd_discretise`) as an :class:`SSDDiscrete`."""
    return SSDDiscrete(*ssd_discretise(inp.dt, inp.dt_bias, inp.A_log, convention=convention))


def _param_grads(
    inp: SSDInputs,
    disc: SSDDiscrete,
    d_log_decay: np.ndarray,
    d_in_scale: np.ndarray,
    convention: str,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Chain (d log_decay, d in_scale), (batch, seq_len, n_heads), to (ddt, dA_log, ddt_bias)."""
    conv = check_convention(convention)
    A = conv.a_matrix(inp.A_log)
    d_dt_eff = d_log_decay * A
    if conv.dt_input:
        d_dt_eff = d_dt_eff + d_in_scale
    # mamba: dA/dA_log = -exp(A_log) = A; builderforce: -softplus'(A_log)
    dA_log = np.sum(d_log_decay * disc.dt_eff, axis=(0, 1)) * conv.a_grad(inp.A_log, A)
    # derivative of softplus as implemented (exactly 1 above its threshold, like mamba's kernels)
    ddt = d_dt_eff * conv.step_grad(inp.dt + inp.dt_bias)
    return ddt, dA_log, ddt.sum(axis=(0, 1))


def assemble_grads(
    inp: SSDInputs,
    disc: SSDDiscrete,
    dy: np.ndarray,
    d_xs: np.ndarray,
    d_in_scale: np.ndarray,
    d_log_decay: np.ndarray,
    dB_h: np.ndarray,
    dC_h: np.ndarray,
    convention: str,
) -> SSDGrads:
    """The :class:`SSDGrads` of either form, from the gradients w.r.t. its intermediates.

    d_xs: w.r.t. the scaled input in_scale·x, (batch, seq_len, n_heads, d_head);
    d_in_scale, d_log_decay: (batch, seq_len, n_heads); dB_h, dC_h: w.r.t. the per-head
    B and C, (batch, seq_len, n_heads, d_state). Adds the D skip to dx and sums B, C
    into their groups.
    """
    n_groups = inp.B.shape[2]
    ddt, dA_log, ddt_bias = _param_grads(inp, disc, d_log_decay, d_in_scale, convention)
    return SSDGrads(
        dx=disc.in_scale[..., None] * d_xs + inp.D[:, None] * dy,
        ddt=ddt,
        dA_log=dA_log,
        dB=_to_groups(dB_h, n_groups),
        dC=_to_groups(dC_h, n_groups),
        dD=np.einsum("bthp,bthp->h", dy, inp.x),
        ddt_bias=ddt_bias,
    )


def segsum(a: np.ndarray) -> np.ndarray:
    """Stable segment sum over the last axis: (..., T) -> (..., T, T).

    seg[..., i, j] = a_{j+1} + … + a_i for i >= j (0 on the diagonal), −inf above it. Each entry
    is a running sum of the terms themselves, not a difference of two long cumulative sums, so
    no precision is lost when the cumulative log-decay is large.
    """
    T = a.shape[-1]
    i_gt_j = np.tri(T, T, -1, dtype=bool)
    seg = np.where(i_gt_j, a[..., :, None], 0.0)
    np.cumsum(seg, axis=-2, out=seg)
    np.copyto(seg, -np.inf, where=~np.tri(T, T, 0, dtype=bool))
    return seg


def segsum_adjoint(d_seg: np.ndarray) -> np.ndarray:
    """Adjoint of :func:`segsum` (lower-triangular part): (..., T, T) -> (..., T).

    da_k = Σ_{i >= k} Σ_{j < k} d_seg[i, j], summed directly, without cancellation.
    """
    T = d_seg.shape[-1]
    row_prefix = np.zeros_like(d_seg)
    # row_prefix[i, k] = Σ_{j < k} d_seg[i, j]
    np.cumsum(d_seg[..., :, :-1], axis=-1, out=row_prefix[..., :, 1:])
    row_prefix *= np.tri(T, T, 0)  # keep i >= k
    return row_prefix.sum(axis=-2)
