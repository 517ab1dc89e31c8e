"""What the S6 reference's forward and backward share: their results (:class:`S6Forward`,
:class:`S6Grads`), the conventions' parameters, and the inputs cast to float64, checked
against each other's shapes and read by a convention. Names and shapes as in the glossary
of :mod:`ssmviz.core.families.s6.reference`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ssmviz.core.errors import SsmvizError
from ssmviz.core.reference.conventions import Convention as ConventionParams
from ssmviz.core.reference.conventions import ConventionRules, resolve

Convention = Literal["mamba", "builderforce"]

F64 = NDArray[np.float64]


@dataclass(frozen=True)
class S6Forward:
    """Result of :func:`s6_forward`.

    y: (batch, seq_len, d_inner); h: (batch, seq_len, d_inner, d_state), h_t for
    every t; last_state: (batch, d_inner, d_state), equal to ``h[:, -1]``.
    """

    y: np.ndarray
    h: np.ndarray
    last_state: np.ndarray


@dataclass(frozen=True)
class S6Grads:
    """Gradients of a scalar loss L, given dL/dy, computed by :func:`s6_backward`.

    du: (batch, seq_len, d_inner), including the D·dy skip term.
    ddelta: (batch, seq_len, d_inner), w.r.t. raw delta (before bias and softplus).
    dA_log: (d_inner, d_state). dB, dC: (batch, seq_len, d_state). dD: (d_inner,).
    ddelta_bias: (d_inner,), ddelta summed over batch and time.
    """

    du: np.ndarray
    ddelta: np.ndarray
    dA_log: np.ndarray
    dB: np.ndarray
    dC: np.ndarray
    dD: np.ndarray
    ddelta_bias: np.ndarray
    dh0: np.ndarray | None = None  # (batch, d_inner, d_state), when an h0 was given


@dataclass(frozen=True)
class S6Inputs:
    """The inputs as float64 arrays, shapes as in the glossary."""

    u: F64
    delta: F64
    A_log: F64
    B: F64
    C: F64
    D: F64
    delta_bias: F64
    h0: F64 | None = None  # the state before t = 0, (batch, d_inner, d_state); None: zeros


def as_f64(name: str, x: ArrayLike) -> F64:
    """``x`` as a float64 array, or SsmvizError naming ``name`` when it is not numeric."""
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise SsmvizError(f"{name} is not a numeric array: {exc}") from None


def check_shape(name: str, arr: F64, dims: tuple[str, ...], sizes: tuple[int, ...]) -> None:
    """SsmvizError naming ``name`` and its ``dims`` unless ``arr`` has shape ``sizes``."""
    if arr.shape != sizes:
        raise SsmvizError(f"{name} has shape {arr.shape}, expected ({', '.join(dims)}) = {sizes}")


def _refuse(changes: Mapping[str, object]) -> str | None:
    if "dt_input" in changes:
        return "convention.dt_input is SSD's (S6's input term is B_bar)"
    return None


#: S6's conventions (its record's ``conventions``): the plain presets; dt_input is SSD's.
RULES = ConventionRules(refuse=_refuse)


def resolve_convention(convention: str | ConventionParams) -> ConventionParams:
    """The convention's parameters (a preset's name or the parameters themselves)."""
    return resolve(convention, RULES)


def apply_convention(x: S6Inputs, conv: ConventionParams, h0: ArrayLike | None = None) -> S6Inputs:
    """The inputs as ``conv`` reads them: no bias or no D is a zero one; ``h0`` checked."""
    if not conv.dt_bias:
        x = replace(x, delta_bias=np.zeros_like(x.delta_bias))
    if not conv.D:
        x = replace(x, D=np.zeros_like(x.D))
    if h0 is not None:
        batch, _, d_inner = x.u.shape
        h0_ = as_f64("h0", h0)
        check_shape("h0", h0_, ("batch", "d_inner", "d_state"),
                     (batch, d_inner, x.A_log.shape[1]))
        x = replace(x, h0=h0_)
    return x


def validate(
    u: ArrayLike,
    delta: ArrayLike,
    A_log: ArrayLike,
    B: ArrayLike,
    C: ArrayLike,
    D: ArrayLike,
    delta_bias: ArrayLike | None,
) -> S6Inputs:
    """Cast to float64 and check every shape against u (batch, seq_len, d_inner) and A_log."""
    u_ = as_f64("u", u)
    if u_.ndim != 3:
        raise SsmvizError(f"u has shape {u_.shape}, expected (batch, seq_len, d_inner)")
    if min(u_.shape) < 1:
        raise SsmvizError(
            f"u has shape {u_.shape}: batch, seq_len and d_inner must each be at least 1"
        )
    batch, seq_len, d_inner = u_.shape
    A_log_ = as_f64("A_log", A_log)
    if A_log_.ndim != 2 or A_log_.shape[0] != d_inner:
        raise SsmvizError(
            f"A_log has shape {A_log_.shape}, expected (d_inner, d_state) = ({d_inner}, d_state)"
        )
    d_state = A_log_.shape[1]
    if d_state < 1:
        raise SsmvizError(f"A_log has shape {A_log_.shape}: d_state must be at least 1")

    bld = ("batch", "seq_len", "d_inner")
    bln = ("batch", "seq_len", "d_state")
    delta_ = as_f64("delta", delta)
    check_shape("delta", delta_, bld, (batch, seq_len, d_inner))
    B_ = as_f64("B", B)
    check_shape("B", B_, bln, (batch, seq_len, d_state))
    C_ = as_f64("C", C)
    check_shape("C", C_, bln, (batch, seq_len, d_state))
    D_ = as_f64("D", D)
    check_shape("D", D_, ("d_inner",), (d_inner,))
    if delta_bias is None:
        bias_ = np.zeros(d_inner)
    else:
        bias_ = as_f64("delta_bias", delta_bias)
        check_shape("delta_bias", bias_, ("d_inner",), (d_inner,))
    return S6Inputs(u_, delta_, A_log_, B_, C_, D_, bias_)
