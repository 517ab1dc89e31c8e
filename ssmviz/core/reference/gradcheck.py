"""Central finite-difference gradient checks in float64, for any kernel family.

:func:`finite_difference_grads` and :func:`compare_grads` know nothing about
S6 or SSD: they take a scalar loss over a dict of named arrays;
:func:`gradcheck_sum_loss` applies them to the loss sum(y * dy) of a forward (the test
suite's ``tests/gradchecks.py`` wires that to each family's reference).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ssmviz.core.errors import SsmvizError

_TINY = float(np.finfo(np.float64).tiny)


@dataclass(frozen=True)
class GradCheckResult:
    """One gradient compared against finite differences.

    rel_err is ||fd - analytic||_2 / max(||fd||_2, tiny) over the checked elements;
    max_abs_err is the largest |fd - analytic| there; n_checked counts them.
    """

    name: str
    max_abs_err: float
    rel_err: float
    n_checked: int


def finite_difference_grads(
    loss: Callable[[dict[str, np.ndarray]], float],
    inputs: dict[str, np.ndarray],
    names: Sequence[str],
    *,
    eps: float = 1e-6,
    max_elements: int | None = None,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Central differences (L(x + eps) - L(x - eps)) / 2eps of ``loss`` w.r.t. named inputs.

    Args:
        loss: maps a dict of float64 arrays (same keys and shapes as ``inputs``)
            to a scalar. It receives the same dict every call, with one element
            perturbed; it must not keep or modify it.
        inputs: the point at which to differentiate; arrays of any shape.
        names: the keys of ``inputs`` to differentiate with respect to.
        eps: absolute step.
        max_elements: if given, perturb only this many elements per name, a
            random subset drawn with ``seed``; the others are NaN in the result.

    Returns:
        name -> float64 array of the input's shape.
    """
    if not eps > 0:
        raise SsmvizError(f"eps is {eps}, expected a positive step")
    if max_elements is not None and max_elements < 1:
        raise SsmvizError(f"max_elements is {max_elements}, expected at least 1 or None")
    for name in names:
        if name not in inputs:
            raise SsmvizError(f"names includes {name!r}, which is not among the inputs")
    point = {k: np.array(v, dtype=np.float64) for k, v in inputs.items()}  # private copies
    rng = np.random.default_rng(seed)
    grads: dict[str, np.ndarray] = {}
    for name in names:
        arr = point[name]
        flat = arr.reshape(-1)  # a view: perturbing it perturbs arr
        if max_elements is None or max_elements >= flat.size:
            indices = np.arange(flat.size)
        else:
            indices = np.sort(rng.choice(flat.size, size=max_elements, replace=False))
        out = np.full(flat.size, np.nan)
        for i in indices:
            orig = flat[i]
            flat[i] = orig + eps
            plus = float(loss(point))
            flat[i] = orig - eps
            minus = float(loss(point))
            flat[i] = orig
            out[i] = (plus - minus) / (2.0 * eps)
        grads[name] = out.reshape(arr.shape)
    return grads


def compare_grads(
    analytic: Mapping[str, np.ndarray], numeric: Mapping[str, np.ndarray]
) -> dict[str, GradCheckResult]:
    """Compare each numeric gradient with the analytic one of the same key.

    Only the non-NaN numeric entries count. Returns key -> :class:`GradCheckResult`.
    """
    results: dict[str, GradCheckResult] = {}
    for name, fd in numeric.items():
        if name not in analytic:
            raise SsmvizError(f"analytic gradients lack {name!r}, which the numeric ones have")
        fd = np.asarray(fd, dtype=np.float64)
        an = np.asarray(analytic[name], dtype=np.float64)
        if an.shape != fd.shape:
            raise SsmvizError(f"analytic {name} has shape {an.shape}, numeric has {fd.shape}")
        mask = ~np.isnan(fd)
        diff = fd[mask] - an[mask]
        n = int(mask.sum())
        max_abs = float(np.max(np.abs(diff))) if n else 0.0
        rel = float(np.linalg.norm(diff) / max(float(np.linalg.norm(fd[mask])), _TINY))
        results[name] = GradCheckResult(name=name, max_abs_err=max_abs, rel_err=rel, n_checked=n)
    return results


def gradcheck_sum_loss(
    forward: Callable[[dict[str, np.ndarray]], np.ndarray],
    grads: object,
    point: dict[str, np.ndarray],
    names: Sequence[str],
    dy: np.ndarray,
    *,
    eps: float = 1e-6,
    max_elements: int | None = None,
    seed: int = 0,
) -> dict[str, GradCheckResult]:
    """Check analytic gradients of L = sum(forward(p) * dy) against finite differences.

    ``forward`` maps a dict like ``point`` to y; ``grads`` holds the analytic gradient of
    each of ``names`` as attribute ``d<name>``. ``eps``, ``max_elements`` and ``seed`` are
    as in :func:`finite_difference_grads`. Returns results keyed ``d<name>``.
    """

    def loss(p: dict[str, np.ndarray]) -> float:
        return float(np.sum(forward(p) * dy))

    numeric = finite_difference_grads(
        loss, point, names, eps=eps, max_elements=max_elements, seed=seed
    )
    analytic = {f"d{k}": getattr(grads, f"d{k}") for k in names}
    return compare_grads(analytic, {f"d{k}": v for k, v in numeric.items()})
