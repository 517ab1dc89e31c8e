"""Float64 reference for the Mamba S6 selective scan: forward and analytic backward.

Glossary (symbol in the papers -> name in this code):

==========  ==================  ===============================================
symbol      name                meaning, shape
==========  ==================  ===============================================
u           ``u``               input, (batch, seq_len, d_inner)
delta       ``delta``           raw step size before bias and softplus,
                                (batch, seq_len, d_inner)
Δ bias      ``delta_bias``      bias added to delta before softplus, (d_inner,)
Δ           ``dt``              step size, softplus(delta + delta_bias),
                                (batch, seq_len, d_inner)
A           ``A``               state matrix (diagonal), -exp(A_log),
                                (d_inner, d_state)
Ā           ``A_bar`` / ``dA``  discretised A, exp(Δ·A),
                                (batch, seq_len, d_inner, d_state)
B, C        ``B``, ``C``        input / output projections, shared by all
                                channels, (batch, seq_len, d_state)
B̄·u         ``bu``              discretised input term:
                                Δ·B·u (``mamba``, Euler) or
                                (Ā - 1)/A·B·u (``builderforce``, zero-order
                                hold), (batch, seq_len, d_inner, d_state)
h           ``h``               hidden state, h_t = Ā_t h_{t-1} + B̄_t u_t with
                                h_{-1} = 0, (batch, seq_len, d_inner, d_state)
D           ``D``               skip connection, (d_inner,)
y           ``y``               output, y_t = Σ_n C_t[n] h_t[n] + D·u_t,
                                (batch, seq_len, d_inner)
g           ``g``               adjoint dL/dh_t (total), g_t = C_t·dy_t +
                                Ā_{t+1} g_{t+1}, (batch, seq_len, d_inner, d_state)
==========  ==================  ===============================================

Both conventions apply ``delta_bias`` here; a ``builderforce`` problem passes a
zero bias (its kernels have none). See :mod:`ssmviz.core.reference._common`.

Everything is vectorised over batch, channel and state; the only Python loops
run over time, forward for h and in reverse for g. Time is walked in blocks
sized so that the block's (batch, block, d_inner, d_state) scratch arrays stay
in cache: Ā and B̄u are computed for a whole block at once, then a tight
per-step loop ``h_t = Ā_t * h_{t-1} + B̄u_t`` (two ufunc calls on one row of
batch·d_inner·d_state states) fills the preallocated h. The scratch arrays live
in a per-thread workspace between calls, and up to ``KEEP_ELEMENTS`` states the
forward leaves Ā there for the backward of the same inputs (see
:class:`~ssmviz.core.families.s6.blocks.Workspace`).

The results, conventions and input checks both passes share are
:mod:`~ssmviz.core.families.s6.layer`; the time blocking and the workspace
:mod:`~ssmviz.core.families.s6.blocks`.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Mapping

import numpy as np
from numpy.typing import ArrayLike

from ssmviz.core.families.s6 import blocks
from ssmviz.core.families.s6.layer import (
    F64,
    Convention,
    S6Forward,
    S6Grads,
    S6Inputs,
    apply_convention,
    as_f64,
    check_shape,
    resolve_convention,
    validate,
)
from ssmviz.core.reference.conventions import Convention as ConventionParams

# Below this |Δ·A| the zero-order-hold derivative uses its Taylor series (no cancellation).
_ZOH_SERIES_BELOW = 1e-3


def _step(x: S6Inputs, conv: ConventionParams) -> tuple[F64, F64, F64]:
    """Return z = delta + delta_bias and Δ = softplus(z) (or the convention's transform),
    both (batch, seq_len, d_inner), and A = -exp(A_log) (or the convention's form),
    (d_inner, d_state)."""
    z = x.delta + x.delta_bias
    return z, conv.step(z), conv.a_matrix(x.A_log)


def _zoh_fprime_series(x: F64) -> F64:
    """f'(x) for f(x) = expm1(x)/x and |x| < 1e-3: Σ_{k≥1} k x^{k-1}/(k+1)!, error < 1e-18."""
    return 0.5 + x * (1.0 / 3.0 + x * (1.0 / 8.0 + x * (1.0 / 30.0 + x * (1.0 / 144.0))))


def _forward(x: S6Inputs, convention: ConventionParams) -> S6Forward:
    batch, seq_len, d_inner = x.u.shape
    d_state = x.A_log.shape[1]
    _, dt, A = _step(x, convention)
    full = (batch, seq_len, d_inner, d_state)
    h = np.empty(full)
    y = np.empty_like(x.u)
    chunk = blocks.block_len(batch, seq_len, d_inner, d_state)
    ws = blocks.WORKSPACE
    keep = math.prod(full) <= blocks.KEEP_ELEMENTS
    ws.kept_for = None  # what it kept is about to be overwritten
    # Ā (and coef) of the whole sequence when kept for the backward, else Ā of one block.
    kind, shape = ("kept", full) if keep else ("block", (batch, chunk, d_inner, d_state))
    a_all = ws.get(f"a_{kind}", shape)
    zoh = convention.zoh
    c_all = ws.get("c_kept", full) if keep and zoh else None
    tmp = ws.get("row", (batch, d_inner * d_state))
    dtu = dt * x.u
    h_rows = blocks.rows(h)
    # Ā (and the coefficient) of the last forward, kept, when Δ and A are unchanged.
    steps = (x.delta, x.delta_bias, x.A_log)
    same_steps = keep and ws.holds("a_kept", convention, *steps)
    ws.forget("a_kept")  # until it is filled below
    # h_{t-1}; None before t = 0 (h_{-1} = 0), else the given initial state.
    prev: F64 | None = None if x.h0 is None else x.h0.reshape(batch, -1).copy()
    for s in range(0, seq_len, chunk):
        e = min(s + chunk, seq_len)
        part = slice(s, e) if keep else slice(0, e - s)
        a_bar, bu = a_all[:, part], h[:, s:e]  # B̄u is built in the buffer that becomes h
        if not zoh:
            if not same_steps:
                blocks.discretise_chunk(dt[:, s:e], A, a_bar, None)
            np.einsum("bld,bln->bldn", dtu[:, s:e], x.B[:, s:e], out=bu)  # Δ·u·B
        else:  # (Ā - 1)/A·u·B; the coefficient goes straight into B̄u unless it is kept
            coef = bu if c_all is None else c_all[:, part]
            if not same_steps:
                blocks.discretise_chunk(dt[:, s:e], A, a_bar, coef)
            np.multiply(coef, x.u[:, s:e, :, None], out=bu)
            bu *= x.B[:, s:e, None, :]
        prev = blocks.scan(blocks.rows(a_bar), h_rows[s:e], prev, tmp)
        np.einsum("bldn,bln->bld", bu, x.C[:, s:e], out=y[:, s:e])  # while h is in cache
    y += x.D * x.u
    if keep:
        ws.kept_for, ws.kept_convention = weakref.ref(h), convention
        ws.remember("a_kept", convention, *steps)
    return S6Forward(y=y, h=h, last_state=h[:, -1].copy())


def s6_discretise(
    delta: ArrayLike, delta_bias: ArrayLike, A_log: ArrayLike, *, convention: Convention = "mamba"
) -> tuple[F64, F64, F64]:
    """Δ, Ā and the input coefficient of one or more channels, elementwise.

    ``delta`` (..., seq_len) raw, ``delta_bias`` broadcastable to it, ``A_log`` (d_state,).
    Returns Δ (..., seq_len), Ā (..., seq_len, d_state) and the coefficient c with
    B̄u = c·B·u (..., seq_len, d_state): Δ for mamba (Euler), expm1(Δ·A)/A for
    builderforce (zero-order hold). The teaching views show these per step; the
    forward pass computes the same thing in place, chunk by chunk.
    """
    conv = resolve_convention(convention)
    bias = np.asarray(delta_bias, np.float64) if conv.dt_bias else 0.0
    dt = conv.step(np.asarray(delta, np.float64) + bias)
    A = conv.a_matrix(A_log)
    dA = dt[..., None] * A
    coef = np.broadcast_to(dt[..., None], dA.shape) if not conv.zoh else np.expm1(dA) / A
    return dt, np.exp(dA), np.array(coef)


def s6_forward(
    u: ArrayLike,
    delta: ArrayLike,
    A_log: ArrayLike,
    B: ArrayLike,
    C: ArrayLike,
    D: ArrayLike,
    delta_bias: ArrayLike | None = None,
    *,
    convention: Convention | ConventionParams = "mamba",
    h0: ArrayLike | None = None,
) -> S6Forward:
    """Run the S6 selective scan in float64.

    Args:
        u: input, (batch, seq_len, d_inner).
        delta: raw step size before bias and softplus, (batch, seq_len, d_inner).
        A_log: (d_inner, d_state); A = -exp(A_log).
        B, C: (batch, seq_len, d_state), shared across channels.
        D: skip weight, (d_inner,).
        delta_bias: (d_inner,); None means zeros.
        convention: ``"mamba"`` (B̄u = Δ·B·u) or ``"builderforce"`` (B̄u = (Ā-1)/A·B·u),
            or the parameters of another (:mod:`ssmviz.core.reference.conventions`).
        h0: the state before t = 0, (batch, d_inner, d_state); None means zeros.

    Returns:
        :class:`S6Forward` with y (batch, seq_len, d_inner), h (batch, seq_len,
        d_inner, d_state) and last_state (batch, d_inner, d_state).

    Raises:
        SsmvizError: a shape does not match or the convention is unknown.
    """
    conv = resolve_convention(convention)
    x = apply_convention(validate(u, delta, A_log, B, C, D, delta_bias), conv, h0)
    return _forward(x, conv)


def s6_backward(
    u: ArrayLike,
    delta: ArrayLike,
    A_log: ArrayLike,
    B: ArrayLike,
    C: ArrayLike,
    D: ArrayLike,
    delta_bias: ArrayLike | None,
    dy: ArrayLike,
    *,
    convention: Convention | ConventionParams = "mamba",
    fwd: S6Forward | None = None,
    h0: ArrayLike | None = None,
) -> S6Grads:
    """Analytic gradients of a loss L given dy = dL/dy, (batch, seq_len, d_inner).

    Inputs are as for :func:`s6_forward`. ``fwd``, a forward of the same inputs
    and convention, saves recomputing h (it is trusted, not re-checked).
    Returns :class:`S6Grads`.

    Raises:
        SsmvizError: a shape does not match or the convention is unknown.
    """
    convention = resolve_convention(convention)
    x = apply_convention(validate(u, delta, A_log, B, C, D, delta_bias), convention, h0)
    batch, seq_len, d_inner = x.u.shape
    d_state = x.A_log.shape[1]
    dy_ = as_f64("dy", dy)
    check_shape("dy", dy_, ("batch", "seq_len", "d_inner"), x.u.shape)
    if fwd is None:
        fwd = _forward(x, convention)
    h = as_f64("fwd.h", fwd.h)
    full = (batch, seq_len, d_inner, d_state)
    check_shape("fwd.h", h, ("batch", "seq_len", "d_inner", "d_state"), full)
    zoh = convention.zoh
    z, dt, A = _step(x, convention)
    inv_A = 1.0 / A
    dh0: F64 | None = None
    u_, B_ = x.u, x.B

    du = np.empty_like(u_)
    d_dt = np.empty_like(u_)  # dL/dΔ
    dB = np.empty_like(B_)
    dC = np.empty_like(B_)
    dA = np.zeros_like(A)  # dL/dA

    # Whether any Δ·|A| is small enough for the series below (mostly not: skip the search).
    tiny_anywhere = zoh and bool((dt.min(axis=(0, 1))[:, None] * -A < _ZOH_SERIES_BELOW).any())

    chunk = blocks.block_len(batch, seq_len, d_inner, d_state)
    scratch = (batch, chunk, d_inner, d_state)
    ws = blocks.WORKSPACE
    kept = ws.kept(fwd.h, convention)  # else Ā (and coef) are recomputed block by block
    kind, shape = ("kept", full) if kept else ("block", scratch)
    a_all = ws.get(f"a_{kind}", shape)
    c_all = ws.get(f"c_{kind}", shape) if zoh else None
    # With the forward's Ā kept, the adjoint g and r = Ā g are kept too: they depend on
    # Δ, A, C and dy alone, so a change of u or B (the input signal) reuses them.
    if kept:
        g_all, r_all = ws.get("g_kept", full), ws.get("r_kept", full)
        adjoint = (x.delta, x.delta_bias, x.A_log, x.C, dy_)
        same_adjoint = ws.holds("g_kept", convention, *adjoint)
        ws.forget("g_kept")  # until it is filled below
    else:
        g_all, r_all, same_adjoint = ws.get("g", scratch), ws.get("r", scratch), False
    w_buf = ws.get("w", scratch)
    carry = ws.get("row", (batch, d_inner * d_state))
    nxt: F64 | None = None  # Ā_{t+1} g_{t+1}; None after the last step
    for s in reversed(range(0, seq_len, chunk)):
        e = min(s + chunk, seq_len)
        k = e - s
        part = slice(s, e) if kept else slice(0, k)
        g, r, w = g_all[:, part], r_all[:, part], w_buf[:, :k]
        dt_c, u_c, B_c, dy_c = dt[:, s:e], u_[:, s:e], B_[:, s:e], dy_[:, s:e]
        a_bar = a_all[:, part]
        coef = None if c_all is None else c_all[:, part]
        if not kept:
            blocks.discretise_chunk(dt_c, A, a_bar, coef)

        if not same_adjoint:
            # Adjoint g_t = dL/dh_t = C_t dy_t + Ā_{t+1} g_{t+1}, in place.
            np.einsum("bld,bln->bldn", dy_c, x.C[:, s:e], out=g)
            nxt = blocks.adjoint_scan(blocks.rows(a_bar), blocks.rows(g), nxt, carry)
            np.multiply(a_bar, g, out=r)  # r_t = Ā_t g_t: the scan's products, discarded

        np.einsum("bldn,bld->bln", h[:, s:e], dy_c, out=dC[:, s:e])

        # Through Ā_t = exp(Δ_t A): dL/d(Δ_t A) = g_t Ā_t h_{t-1} = r_t h_{t-1}, zero at t = 0.
        if s > 0:
            np.multiply(r, h[:, s - 1 : e - 1], out=w)
        else:
            if x.h0 is None:
                w[:, 0] = 0.0
            else:  # h_{-1} = h0: dL/dh0 = Ā_0 g_0 = r_0
                dh0 = r[:, 0].copy()
                np.multiply(r[:, 0], x.h0, out=w[:, 0])
            np.multiply(r[:, 1:], h[:, : e - 1], out=w[:, 1:])
        np.einsum("bldn,dn->bld", w, A, out=d_dt[:, s:e])
        dA += np.einsum("bldn,bld->dn", w, dt_c)

        # Through B̄u.
        if coef is None:  # mamba: B̄u = Δ·B·u
            gB = np.einsum("bldn,bln->bld", g, B_c)  # Σ_n g·B
            np.multiply(dt_c, gB, out=du[:, s:e])
            d_dt[:, s:e] += u_c * gB
            np.einsum("bldn,bld->bln", g, dt_c * u_c, out=dB[:, s:e])
        else:  # builderforce: B̄u = (Ā - 1)/A·B·u
            np.multiply(g, coef, out=w)
            np.einsum("bldn,bln->bld", w, B_c, out=du[:, s:e])
            np.einsum("bldn,bld->bln", w, u_c, out=dB[:, s:e])
            # d/dΔ of expm1(ΔA)/A is Ā: Σ_n g·Ā·B = Σ_n r·B
            d_dt[:, s:e] += u_c * np.einsum("bldn,bln->bld", r, B_c)
            # d/dA of expm1(ΔA)/A = (Δ·Ā - (Ā - 1)/A)/A = Δ² f'(ΔA), f(x) = expm1(x)/x;
            # the difference cancels for tiny |ΔA|, where the series takes over. w holds
            # A times it: the 1/A is applied once the sum over time is done.
            np.multiply(dt_c[..., None], a_bar, out=w)
            w -= coef
            # Only the (d, n) pairs where some Δ·|A| is tiny need the series: find them on
            # the small arrays, then patch just those columns.
            if tiny_anywhere:
                tiny = dt_c.min(axis=(0, 1))[:, None] * -A < _ZOH_SERIES_BELOW
                d_idx, n_idx = np.nonzero(tiny)
                dt_s = dt_c[:, :, d_idx]  # (batch, k, pairs)
                x_s = dt_s * A[d_idx, n_idx]
                w[:, :, d_idx, n_idx] = np.where(
                    x_s > -_ZOH_SERIES_BELOW,
                    _zoh_fprime_series(x_s) * x_s * dt_s,  # A·Δ²·f'(ΔA)
                    w[:, :, d_idx, n_idx],
                )
            w *= g
            w *= B_c[:, :, None, :]
            dA += inv_A * np.einsum("bldn,bld->dn", w, u_c)

    if kept:
        ws.remember("g_kept", convention, *adjoint)
    du += x.D * dy_
    ddelta = d_dt * convention.step_grad(z)
    return S6Grads(
        du=du,
        ddelta=ddelta,
        dA_log=dA * convention.a_grad(x.A_log, A),  # exp: dA/dA_log = A itself
        dB=dB,
        dC=dC,
        dD=np.einsum("bld,bld->d", dy_, u_),
        ddelta_bias=ddelta.sum(axis=(0, 1)),
        dh0=dh0,
    )


# ------------------------------------------------------------- as the family record calls it

#: The keys of :func:`s6_backward`'s gradients, in the family's order.
GRAD_KEYS = ("du", "ddelta", "dA_log", "dB", "dC", "dD", "ddelta_bias")


#: The intermediates an external kernel may implement one stage of (stage roles).
STAGE_AXES: dict[str, tuple[str, ...]] = {
    "A_bar": ("batch", "seq_len", "d_inner", "d_state"),
    "Bu": ("batch", "seq_len", "d_inner", "d_state"),
}


def s6_stages(inputs: Mapping[str, np.ndarray], convention: str | ConventionParams,
              sizes: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Ā = exp(Δ·A) and B̄u (the scan's (a, b) pairs), (batch, seq_len, d_inner, d_state):
    h_t = Ā_t·h_{t-1} + B̄u_t is the bare linear recurrence they feed."""
    del sizes
    conv = resolve_convention(convention)
    x = apply_convention(validate(*(inputs[k] for k in ("u", "delta", "A_log", "B", "C", "D",
                                               "delta_bias"))), conv)
    _, a_bar, coef = s6_discretise(x.delta, x.delta_bias, x.A_log, convention=conv)
    return {"A_bar": a_bar, "Bu": coef * x.B[:, :, None, :] * x.u[..., None]}


def reference_forward(inputs: Mapping[str, np.ndarray], convention: str,
                      sizes: Mapping[str, int]) -> S6Forward:
    """:func:`s6_forward` of the input keys but dy, in order (``sizes`` unused); an
    ``h0`` key (an external profile's initial state) is passed as ``h0``."""
    del sizes
    args = [v for k, v in inputs.items() if k != "h0"]
    return s6_forward(*args, convention=convention, h0=inputs.get("h0"))  # type: ignore[arg-type]


def reference_outputs(inputs: Mapping[str, np.ndarray], dy: np.ndarray, convention: str,
                      sizes: Mapping[str, int], fwd: S6Forward) -> dict[str, np.ndarray]:
    """Every forward output and gradient, the backward reusing ``fwd``'s states (and
    ``dh0`` when the inputs hold an ``h0``)."""
    del sizes
    args = [v for k, v in inputs.items() if k != "h0"]
    grads = s6_backward(*args, dy, convention=convention, fwd=fwd,  # type: ignore[arg-type]
                        h0=inputs.get("h0"))
    out = {"y": fwd.y, "last_state": fwd.last_state, "h": fwd.h}
    out |= {k: getattr(grads, k) for k in GRAD_KEYS}
    if grads.dh0 is not None:
        out["dh0"] = grads.dh0
    return out


# --------------------------------------------------------------------------- RAM a check needs

#: float64 arrays of (batch, seq_len, d_inner) alive at once: inputs, outputs, gradients.
_ROW_ARRAYS = 12
#: (batch, seq_len, d_state) arrays: B, C, their gradients and the per-step copies.
_STATE_ARRAYS = 6
#: float64 passes over h in the comparison (gpu − ref and the element bound).
_COMPARE_COPIES = 2


def reference_bytes(sizes: Mapping[str, int], runs: int, stored_max: int) -> int:
    """Bytes of RAM the reference, the comparison and ``runs`` GPU results need (high
    side): the scan keeps every h and, while h is small, Ā (and zero-order hold's
    coefficient) for the backward, and the backward its adjoint g and Ā·g for the next
    one (``blocks.KEEP_ELEMENTS``); the comparison makes float64
    copies of the GPU's h, read back only while it has at most ``stored_max`` elements."""
    b, L = int(sizes["batch"]), int(sizes["seq_len"])
    d, n = int(sizes["d_inner"]), int(sizes["d_state"])
    states = b * L * d * n
    keep = 4 if states <= blocks.KEEP_ELEMENTS else 0
    stored = states if states <= stored_max else 0
    ref = 8 * (states * (1 + keep) + stored * _COMPARE_COPIES)
    ref += 8 * b * L * (_ROW_ARRAYS * d + _STATE_ARRAYS * n)
    gpu = 4 * (runs + 1) * (stored + 3 * b * L * d + 2 * b * L * n)
    # The kernel's own h buffer: device memory, which on lavapipe is this RAM.
    device = 4 * states
    return ref + gpu + device
