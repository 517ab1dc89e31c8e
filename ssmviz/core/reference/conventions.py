"""Numerical conventions as parameters: what a kernel computes, one switch per choice.

A :class:`Convention` says how a kernel turns its raw inputs into the recurrence
h_t = Ā_t h_{t-1} + B̄_t x_t, y_t = C_t·h_t + D·x_t:

=============  ===========================================================================
``dt``         the step size: ``softplus`` (x itself past 20, as the mamba CUDA kernels),
               ``softplus_stable`` (max(x, 0) + log1p(exp(−|x|)), exact everywhere) or
               ``none`` (the raw input is Δ)
``dt_bias``    whether a bias is added before the transform (False: the reference takes a
               zero bias, whatever the inputs hold)
``A``          the state matrix from the ``A_log`` input: ``exp`` (A = −exp(A_log)),
               ``exp_clamped`` (A = −exp(clamp(A_log, lo, hi)), ``A_clamp`` = (lo, hi)),
               ``softplus`` (A = −softplus(A_log), SSD's builderforce form) or ``raw``
               (the input holds A itself)
``B_bar``      S6's input term: ``euler`` (B̄·u = Δ·B·u) or ``zoh`` (zero-order hold,
               B̄ = (Ā − 1)/A · B)
``D``          whether the skip term D·x is part of y (False: the reference takes D = 0)
``dt_input``   SSD: whether dt scales the input term (h_t = Ā_t h_{t-1} + dt_t·B_t ⊗ x_t)
``gate``       ``none``, or ``silu``: the output is y·silu(z) with an extra input z shaped
               like y (Mamba's gated output); applied around the family's reference by
               :func:`gated` (dy reaches the scan as dy·silu(z))
=============  ===========================================================================

The named conventions are presets (:func:`preset`): ``mamba`` and ``builderforce``
compute exactly what they computed before there were parameters (the same operations in
the same order, so the same bits). Both presets add the bias as given (a builderforce
problem passes a zero one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ssmviz.core.errors import SsmvizError
from ssmviz.core.reference._common import CONVENTIONS, sigmoid, softplus, softplus_grad

F64 = NDArray[np.float64]

DT_FORMS = ("softplus", "softplus_stable", "none")
A_FORMS = ("exp", "exp_clamped", "softplus", "raw")
B_BAR_RULES = ("euler", "zoh")


@dataclass(frozen=True)
class Convention:
    """One numerical convention (see the module docstring); ``name`` the preset it is, or
    ``custom``; ``base`` the preset whose problem inputs it starts from."""

    name: str = "mamba"
    base: str = "mamba"
    dt: str = "softplus"
    dt_bias: bool = True
    A: str = "exp"
    A_clamp: tuple[float, float] | None = None
    B_bar: str = "euler"
    D: bool = True
    dt_input: bool = True
    gate: str = "none"

    # -- step size ------------------------------------------------------------------------
    def step(self, z: ArrayLike) -> F64:
        """Δ from the raw step plus bias ``z``. Any shape."""
        if self.dt == "softplus":
            return softplus(z)
        z = np.asarray(z, np.float64)
        if self.dt == "softplus_stable":
            return np.maximum(z, 0.0) + np.log1p(np.exp(-np.abs(z)))
        return z.copy()

    def step_grad(self, z: ArrayLike) -> F64:
        """dΔ/dz as the transform is implemented. Any shape."""
        if self.dt == "softplus":
            return softplus_grad(z)
        z = np.asarray(z, np.float64)
        if self.dt == "softplus_stable":
            e = np.exp(-np.abs(z))
            return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
        return np.ones_like(z)

    # -- state matrix ---------------------------------------------------------------------
    def a_matrix(self, A_log: ArrayLike) -> F64:
        """A from the ``A_log`` input (negative for a stable recurrence)."""
        a = np.asarray(A_log, np.float64)
        if self.A == "exp":
            return -np.exp(a)
        if self.A == "exp_clamped":
            lo, hi = self.A_clamp or (-np.inf, np.inf)
            return -np.exp(np.clip(a, lo, hi))
        if self.A == "softplus":
            return -softplus(a)
        return a.copy()

    def a_grad(self, A_log: ArrayLike, A: F64) -> F64:
        """dA/dA_log (``A`` = :meth:`a_matrix` of it; returned itself for ``exp``, so the
        presets keep their bits)."""
        a = np.asarray(A_log, np.float64)
        if self.A == "exp":
            return A
        if self.A == "exp_clamped":
            lo, hi = self.A_clamp or (-np.inf, np.inf)
            return np.where((a >= lo) & (a <= hi), A, 0.0)
        if self.A == "softplus":
            return -softplus_grad(a)
        return np.ones_like(a)

    @property
    def zoh(self) -> bool:
        return self.B_bar == "zoh"

    def describe(self) -> str:
        """One line: the preset's name, or every parameter that differs from ``base``."""
        if self.name != "custom":
            return self.name
        base = PRESETS[self.base]
        diff = [f"{k}={getattr(self, k)}" for k in _FIELDS
                if getattr(self, k) != getattr(base, k)]
        return f"custom ({self.base} with {', '.join(diff)})" if diff else self.base


_FIELDS = ("dt", "dt_bias", "A", "A_clamp", "B_bar", "D", "dt_input", "gate")
GATES = ("none", "silu")
#: The extra input a gated convention reads (shaped like y), and its gradient.
GATE_INPUT = "z"

#: The named conventions. S6 reads ``B_bar``, SSD ``A`` and ``dt_input``: builderforce's
#: S6 is zero-order hold with A = −exp(A_log) (SSD's presets are its own, see its
#: ``reference.py``). A family's :class:`ConventionRules` says which presets it has.
PRESETS: dict[str, Convention] = {
    "mamba": Convention(),
    "builderforce": Convention(name="builderforce", base="builderforce", B_bar="zoh"),
}


def _refuse_nothing(changes: Mapping[str, Any]) -> str | None:
    return None


@dataclass(frozen=True)
class ConventionRules:
    """A family's conventions (its record's ``conventions``): ``presets`` (name ->
    parameters), ``step_keys`` (its raw step input and bias: what :func:`adapt_inputs`
    re-expresses) and ``refuse`` (a profile table's changes -> why the family cannot take
    them, one line after "where: ", or None)."""

    presets: Mapping[str, Convention] = field(default_factory=lambda: dict(PRESETS))
    step_keys: tuple[str, str] = ("delta", "delta_bias")
    refuse: Callable[[Mapping[str, Any]], str | None] = _refuse_nothing


#: The rules of a family that declares none (S6's presets, every parameter taken).
DEFAULT_RULES = ConventionRules()


def preset(name: str, rules: ConventionRules = DEFAULT_RULES) -> Convention:
    """The named convention of a family (its ``rules``; SsmvizError for an unknown name)."""
    if name not in rules.presets:
        raise SsmvizError(f"convention is {name!r}, expected one of {', '.join(CONVENTIONS)}")
    return rules.presets[name]


def resolve(convention: str | Convention, rules: ConventionRules = DEFAULT_RULES
            ) -> Convention:
    """A convention given by name (a preset of the family's ``rules``) or as parameters."""
    if isinstance(convention, Convention):
        return convention
    if not isinstance(convention, str):
        raise SsmvizError(f"convention is {convention!r}, expected one of "
                          f"{', '.join(CONVENTIONS)}")
    return preset(convention, rules)


def base_name(convention: str | Convention) -> str:
    """The preset name a convention's problem is built in (``mamba`` or ``builderforce``)."""
    return convention.base if isinstance(convention, Convention) else convention


#: The keys of a profile's ``[convention]`` table and what each may hold.
TABLE_KEYS = {"preset": CONVENTIONS, "dt": DT_FORMS, "dt_bias": (True, False), "A": A_FORMS,
              "A_clamp": "two numbers [lo, hi]", "B_bar": B_BAR_RULES, "D": (True, False),
              "dt_input": (True, False), "gate": GATES}


def parse_convention(where: str, raw: Any, rules: ConventionRules) -> Convention:
    """A profile's ``convention``: a preset's name or a table of parameters over a preset
    (``preset``, default mamba), under a family's ``rules``. A one-line SsmvizError names
    the bad key."""
    if isinstance(raw, str):
        if raw not in CONVENTIONS:
            raise SsmvizError(f"{where}: convention must be {' or '.join(CONVENTIONS)} or a "
                              f"table of parameters; got {raw!r}"[:200])
        return preset(raw, rules)
    if not isinstance(raw, Mapping):
        raise SsmvizError(f"{where}: convention must be a preset name or a table")
    unknown = sorted(set(map(str, raw)) - set(TABLE_KEYS))
    if unknown:
        raise SsmvizError(f"{where}: unknown key 'convention.{unknown[0]}' (known: "
                          f"{', '.join(TABLE_KEYS)})")
    base = raw.get("preset", "mamba")
    if base not in CONVENTIONS:
        raise SsmvizError(f"{where}: convention.preset must be {' or '.join(CONVENTIONS)}; "
                          f"got {base!r}"[:200])
    conv = preset(base, rules)
    changes: dict[str, Any] = {}
    for key, allowed in TABLE_KEYS.items():
        if key == "preset" or key not in raw:
            continue
        value = raw[key]
        if key == "A_clamp":
            ok = (isinstance(value, list) and len(value) == 2
                  and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
                  and value[0] < value[1])
            if not ok:
                raise SsmvizError(f"{where}: convention.A_clamp must be [lo, hi] with lo < hi; "
                                  f"got {value!r}"[:200])
            value = (float(value[0]), float(value[1]))
        elif isinstance(allowed, tuple) and (value not in allowed
                                             or isinstance(value, bool) != isinstance(
                                                 allowed[0], bool)):
            words = " or ".join(str(a).lower() for a in allowed)
            raise SsmvizError(f"{where}: convention.{key} must be {words}; got {value!r}"[:200])
        changes[key] = value
    if changes.get("A", conv.A) == "exp_clamped" and "A_clamp" not in changes:
        raise SsmvizError(f"{where}: convention.A = \"exp_clamped\" needs convention.A_clamp "
                          "= [lo, hi]")
    if "A_clamp" in changes and changes.get("A", conv.A) != "exp_clamped":
        raise SsmvizError(f"{where}: convention.A_clamp applies only with A = \"exp_clamped\"")
    refused = rules.refuse(changes)
    if refused:
        raise SsmvizError(f"{where}: {refused}")
    out = replace(conv, **changes)
    named = preset(base, rules)
    return out if out == named else replace(out, name="custom")


def adapt_inputs(arrays: Mapping[str, np.ndarray], conv: Convention, rules: ConventionRules
                 ) -> dict[str, np.ndarray]:
    """A problem built in ``conv.base`` re-expressed so that ``conv`` gives a stable,
    comparable recurrence: raw A takes −exp(A_log) (the same A), a raw Δ takes the
    softplus it had, and an absent bias or D is zero (the reference then takes what the
    kernel has)."""
    out = {k: np.array(v, np.float64) for k, v in arrays.items()}
    raw, bias = rules.step_keys
    if conv.A == "raw" and "A_log" in out:
        out["A_log"] = -np.exp(out["A_log"])
    if conv.dt == "none" and raw in out:
        out[raw] = softplus(out[raw] + out.get(bias, 0.0))
        if bias in out:
            out[bias] = np.zeros_like(out[bias])
    if not conv.dt_bias and bias in out:
        out[bias] = np.zeros_like(out[bias])
    if not conv.D and "D" in out:
        out["D"] = np.zeros_like(out["D"])
    return out


def silu(z: ArrayLike) -> F64:
    """z·sigmoid(z), float64. Any shape."""
    z = np.asarray(z, np.float64)
    return z * sigmoid(z)


def silu_grad(z: ArrayLike) -> F64:
    """d silu / dz = sigmoid(z)·(1 + z·(1 − sigmoid(z))). Any shape."""
    z = np.asarray(z, np.float64)
    s = sigmoid(z)
    return s * (1.0 + z * (1.0 - s))


def gated(y: F64, dy: F64, z: F64) -> tuple[F64, F64, F64]:
    """The silu gate around a reference: (y·silu(z), the dy the scan sees, dL/dz)."""
    g = silu(z)
    return y * g, dy * g, dy * y * silu_grad(z)
