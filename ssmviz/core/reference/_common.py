"""Float64 helpers shared by the S6 and SSD references: softplus and its kin, and
the names of the two conventions.

All functions take array-likes, compute in float64 and return float64 arrays
of the input's shape.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ssmviz.core.errors import SsmvizError

#: The numerical conventions both references implement (see ``kernel-abi.md``).
CONVENTIONS: tuple[str, ...] = ("mamba", "builderforce")

# Above this the mamba CUDA kernels return x itself: log1p(exp(x)) - x < 2.1e-9 there.
SOFTPLUS_THRESHOLD = 20.0


def softplus(x: ArrayLike) -> NDArray[np.float64]:
    """Stable softplus: ``x`` for ``x > 20``, ``log1p(exp(x))`` otherwise. Any shape."""
    x = np.asarray(x, dtype=np.float64)
    # Clamp before exp so large inputs never overflow (their branch is overwritten anyway).
    # In place in one array: the references call this on every run.
    out = np.minimum(x, SOFTPLUS_THRESHOLD, out=np.empty_like(x))
    np.log1p(np.exp(out, out=out), out=out)
    np.copyto(out, x, where=x > SOFTPLUS_THRESHOLD)
    return out


def sigmoid(x: ArrayLike) -> NDArray[np.float64]:
    """Stable logistic sigmoid ``1 / (1 + exp(-x))``, the derivative of softplus. Any shape."""
    x = np.asarray(x, dtype=np.float64)
    e = np.abs(x, out=np.empty_like(x))
    np.exp(np.negative(e, out=e), out=e)  # exp(-|x|), in (0, 1]: never overflows
    s = np.where(x >= 0, 1.0, e)
    s /= 1.0 + e  # 1 / (1 + e) for x >= 0, e / (1 + e) below
    return s


def softplus_grad(x: ArrayLike) -> NDArray[np.float64]:
    """Derivative of :func:`softplus` as implemented: 1 above the threshold, sigmoid below.

    This is what the mamba CUDA backward uses; it differs from :func:`sigmoid`
    by less than 2.1e-9, only for ``x > 20``.
    """
    x = np.asarray(x, dtype=np.float64)
    g = sigmoid(x)
    np.copyto(g, 1.0, where=x > SOFTPLUS_THRESHOLD)
    return g


def inverse_softplus(y: ArrayLike) -> NDArray[np.float64]:
    """Inverse of softplus, ``y + log(-expm1(-y))``; needs ``y > 0``. Any shape.

    Used to turn a step size ``dt`` into the bias ``delta_bias`` / ``dt_bias``
    that gives ``softplus(bias) == dt``.
    """
    y = np.asarray(y, dtype=np.float64)
    if not np.all(y > 0):
        raise SsmvizError("inverse_softplus needs every value > 0 (softplus is always positive)")
    return y + np.log(-np.expm1(-y))
