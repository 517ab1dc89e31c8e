"""Finite-difference checks of the S6 and SSD reference backwards (test helpers).

Wire each family's float64 reference to
:func:`ssmviz.core.reference.gradcheck.gradcheck_sum_loss`, for the loss L = sum(y * dy).
"""

from __future__ import annotations

import numpy as np

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.s6.reference import s6_backward, s6_forward
from ssmviz.core.families.ssd.chunked import ssd_backward_chunked, ssd_forward_chunked
from ssmviz.core.families.ssd.reference import ssd_backward_recurrent, ssd_forward_recurrent
from ssmviz.core.reference.gradcheck import GradCheckResult, gradcheck_sum_loss

__all__ = ["SSD_PARAMS", "s6_gradcheck", "ssd_gradcheck"]

# Differentiated inputs, in the positional order of the ssd_* functions.
SSD_PARAMS = ("x", "dt", "A_log", "B", "C", "D", "dt_bias")


def ssd_gradcheck(
    inputs: dict[str, np.ndarray],
    *,
    chunk_len: int | None = None,
    convention: str = "mamba",
    eps: float = 1e-6,
) -> dict[str, GradCheckResult]:
    """Compare the analytic SSD gradients with central finite differences of sum(y * dy).

    ``inputs`` holds x (batch, seq_len, n_heads, d_head), dt (batch, seq_len, n_heads),
    A_log, D, dt_bias (n_heads,), B, C (batch, seq_len, n_groups, d_state) and dy (like x).
    ``chunk_len`` None checks the recurrent backward, an integer the chunked one (the loss
    then uses the chunked forward too). Every element is perturbed, so keep sizes small.
    Returns results keyed dx, ddt, dA_log, dB, dC, dD, ddt_bias.
    """
    missing = [k for k in (*SSD_PARAMS, "dy") if k not in inputs]
    if missing:
        raise SsmvizError(f"ssd_gradcheck inputs lack {', '.join(missing)}")
    point = {k: np.asarray(inputs[k], dtype=np.float64) for k in SSD_PARAMS}
    dy = np.asarray(inputs["dy"], dtype=np.float64)

    if chunk_len is None:

        def forward(p: dict[str, np.ndarray]) -> np.ndarray:
            return ssd_forward_recurrent(*(p[k] for k in SSD_PARAMS), convention=convention).y

        grads = ssd_backward_recurrent(*(point[k] for k in SSD_PARAMS), dy, convention=convention)
    else:

        def forward(p: dict[str, np.ndarray]) -> np.ndarray:
            return ssd_forward_chunked(
                *(p[k] for k in SSD_PARAMS), chunk_len=chunk_len, convention=convention
            ).y

        grads = ssd_backward_chunked(
            *(point[k] for k in SSD_PARAMS), dy, chunk_len=chunk_len, convention=convention
        )

    return gradcheck_sum_loss(forward, grads, point, SSD_PARAMS, dy, eps=eps)


_S6_PARAMS = ("u", "delta", "A_log", "B", "C", "D", "delta_bias")


def s6_gradcheck(
    inputs: dict[str, np.ndarray],
    *,
    convention: str = "mamba",
    eps: float = 1e-6,
    max_elements: int | None = None,
    seed: int = 0,
) -> dict[str, GradCheckResult]:
    """Check :func:`s6_backward` against finite differences of L = sum(y * dy).

    ``inputs`` holds u, delta, A_log, B, C, D, dy and optionally delta_bias
    (missing or None: zeros, still checked), shaped as in :func:`s6_forward`.
    Returns results keyed du, ddelta, dA_log, dB, dC, dD, ddelta_bias.
    ``max_elements``/``seed`` subsample as in :func:`finite_difference_grads`.
    """
    missing = [k for k in (*_S6_PARAMS[:-1], "dy") if k not in inputs]
    if missing:
        raise SsmvizError(f"s6_gradcheck inputs lack {', '.join(missing)}")
    point = {k: np.asarray(inputs[k], dtype=np.float64) for k in _S6_PARAMS[:-1]}
    bias = inputs.get("delta_bias")
    point["delta_bias"] = (
        np.zeros(point["D"].shape) if bias is None else np.asarray(bias, dtype=np.float64)
    )
    dy = np.asarray(inputs["dy"], dtype=np.float64)

    def forward(p: dict[str, np.ndarray]) -> np.ndarray:
        return s6_forward(*(p[k] for k in _S6_PARAMS), convention=convention).y  # type: ignore[arg-type]

    grads = s6_backward(*(point[k] for k in _S6_PARAMS), dy, convention=convention)  # type: ignore[arg-type]
    return gradcheck_sum_loss(
        forward, grads, point, _S6_PARAMS, dy, eps=eps, max_elements=max_elements, seed=seed
    )
