"""One dataclass that describes an SSM problem, and the arrays it builds.

A :class:`Problem` holds the family (its registry record: ``s6``, ``ssd``, ``mamba3``, see
:mod:`ssmviz.core.families`; a problem made from a name looks it up once, when it is made),
the numerical convention (``mamba`` or ``builderforce``, see
:mod:`ssmviz.core.reference._common`), the sizes, the input signal, the parameter
initialisation and the seed. ``build()`` turns it, deterministically, into every input
array including the upstream gradient ``dy`` (the family's ``build_arrays``, with the
seeded draws below). Arrays are float64; the GPU runners cast to float32. Each family's
``arrays`` module lists its keys and shapes.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, is_dataclass, make_dataclass, replace
from typing import Any

import numpy as np

from ssmviz.core import families
from ssmviz.core.errors import SsmvizError
from ssmviz.core.fields import SEED_MAX, check_int, check_number, check_string, typed_fields
from ssmviz.core.reference._common import CONVENTIONS
from ssmviz.core.signals import SignalSpec

A_INITS = ("mamba", "constant", "random")
#: Whether Δ, B and C change with the step (Mamba) or not (an LTI system, as S4).
SELECTIONS = ("selective", "lti")
DY_KINDS = ("random", "ones")


#: Random input blocks up to this many elements are kept: a live re-run after a control
#: change rebuilds the same ones (same seed and sizes) and only the signal differs.
_CACHED_ELEMENTS = 1 << 20


def _stream(seed: int, name: str) -> np.random.Generator:
    # One stream per array, so changing one size does not reshuffle the others.
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def _draw_normal(seed: int, name: str, shape: tuple[int, ...]) -> np.ndarray:
    out = _stream(seed, name).standard_normal(shape)
    out.flags.writeable = False
    return out


_draw_normal_cached = functools.lru_cache(maxsize=16)(_draw_normal)


def _standard_normal(seed: int, name: str, shape: tuple[int, ...]) -> np.ndarray:
    if int(np.prod(shape)) <= _CACHED_ELEMENTS:
        return _draw_normal_cached(seed, name, shape)
    return _draw_normal(seed, name, shape)


@dataclass(frozen=True)
class ParamInit:
    """How the parameters are initialised.

    ``A``: ``mamba`` (S6: A_log = log(1..d_state) per channel; SSD: log of a
    seeded uniform sample in [1, 16] per head), ``constant`` (A_log =
    log(A_value) everywhere) or ``random`` (log of uniform [0.5, 16]).
    The step size bias is the inverse softplus of a log-uniform sample in
    [dt_min, dt_max], as mamba does; ``delta_noise`` is the std of the raw
    delta/dt around it. B and C are seeded standard normals times ``bc_scale``.
    """

    A: str = "mamba"
    A_value: float = 1.0
    dt_min: float = 1e-3
    dt_max: float = 0.1
    delta_noise: float = 0.1
    D: float = 1.0
    bc_scale: float = 1.0
    #: ``selective``: Δ, B and C drawn per step; ``lti``: every step takes step 0's (a
    #: time-invariant system: M is Toeplitz, a plain convolution).
    selection: str = "selective"

    def validate(self) -> None:
        if self.selection not in SELECTIONS:
            raise SsmvizError(f"init selection must be one of {', '.join(SELECTIONS)}; "
                              f"got '{self.selection}'")
        if self.A not in A_INITS:
            raise SsmvizError(f"init A must be one of {', '.join(A_INITS)}; got '{self.A}'")
        for key in ("A_value", "dt_min", "dt_max"):
            check_number(f"init {key}", getattr(self, key), positive=True)
        if self.dt_min > self.dt_max:
            raise SsmvizError(
                f"init dt_min/dt_max must satisfy 0 < dt_min ≤ dt_max; got {self.dt_min}, "
                f"{self.dt_max}"
            )
        for key in ("delta_noise", "D", "bc_scale"):
            check_number(f"init {key}", getattr(self, key))
        if self.delta_noise < 0:
            raise SsmvizError(f"init delta_noise must be ≥ 0; got {self.delta_noise}")


class _ProblemBase:
    """What every :class:`Problem` does (its fields are made below, from the families'
    size declarations)."""

    family: families.Family
    convention: str
    signal: SignalSpec
    init: ParamInit
    dy: str
    seed: int

    def __post_init__(self) -> None:
        # A problem made from a family's name (a test, a sweep case) holds its record.
        if not isinstance(self.family, families.Family):
            object.__setattr__(self, "family", families.get(self.family))

    # -- sizes ----------------------------------------------------------------------------
    @property
    def inner(self) -> int:
        """d_inner: given, the family's default, or derived (SSD: n_heads·d_head)."""
        return self.sizes()["d_inner"]

    def sizes(self) -> dict[str, int]:
        """The sizes that matter for this family, by their paper names."""
        return self.family.problem_sizes(self)

    def validate(self) -> None:
        """Raise SsmvizError with a one-line message naming the first bad parameter."""
        fam = self.family
        if self.convention not in CONVENTIONS:
            raise SsmvizError(
                f"convention must be one of {', '.join(CONVENTIONS)}; got '{self.convention}'"
            )
        fam.check_problem(self)
        if self.dy not in DY_KINDS:
            raise SsmvizError(f"dy must be one of {', '.join(DY_KINDS)}; got '{self.dy}'")
        check_int("seed", self.seed, 0, SEED_MAX)
        self.signal.validate()
        self.init.validate()

    # -- arrays: the seeded draws every family builds from -------------------------------
    def _rng(self, name: str) -> np.random.Generator:
        return _stream(self.seed, name)

    def draw_normal(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """Standard normals of stream ``name`` (read-only; cached while small)."""
        return _standard_normal(self.seed, name, tuple(int(n) for n in shape))

    def draw_dt(self, count: int) -> np.ndarray:
        """``count`` step sizes, log-uniform in [dt_min, dt_max] (stream ``dt``)."""
        lo, hi = np.log(self.init.dt_min), np.log(self.init.dt_max)
        return np.exp(self._rng("dt").uniform(lo, hi, size=count))

    def draw_A_log(self, shape: tuple[int, ...], per_state_axis: int | None) -> np.ndarray:
        """A_log by ``init.A``; ``per_state_axis``: mamba's log(1..d_state) along that axis
        (S6), else (None) a seeded log-uniform in [1, 16]."""
        init = self.init
        if init.A == "constant":
            return np.full(shape, np.log(init.A_value))
        if init.A == "random":
            return np.log(self._rng("A").uniform(0.5, 16.0, size=shape))
        if per_state_axis is not None:  # S6: log(1..d_state) for every channel
            n = shape[per_state_axis]
            return np.broadcast_to(np.log(np.arange(1, n + 1, dtype=np.float64)), shape).copy()
        return np.log(self._rng("A").uniform(1.0, 16.0, size=shape))

    def per_step(self, a: np.ndarray) -> np.ndarray:
        """A per-step input (batch, seq_len, ...) as drawn, or (``init.selection`` "lti")
        with every step equal to step 0."""
        if self.init.selection != "lti":
            return a
        return np.broadcast_to(a[:, :1], a.shape).copy()

    def draw_dy(self, shape: tuple[int, ...]) -> np.ndarray:
        """The upstream gradient: ones, or standard normals (stream ``dy``)."""
        if self.dy == "ones":
            return np.ones(shape)
        return self.draw_normal("dy", shape).copy()

    def build(self) -> dict[str, np.ndarray]:
        """Every input array of the problem, float64, keyed as the export writes them."""
        self.validate()
        return self.family.build_arrays(self)

    # -- (de)serialisation ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (sessions and export metadata): the family by its name."""
        return {f.name: (self.family.name if f.name == "family" else
                         asdict(v) if is_dataclass(v := getattr(self, f.name)) else v)
                for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "problem") -> Problem:
        """Inverse of :meth:`to_dict`. Unknown keys and values of the wrong JSON type are a
        one-line SsmvizError naming the field (``where.signal.amplitude``); missing keys
        keep their defaults. Ranges are :meth:`validate`'s."""
        nested = {
            "family": lambda v, name: families.get(check_string(name, v)),
            "signal": lambda v, name: SignalSpec(**typed_fields(SignalSpec, v, name)),
            "init": lambda v, name: ParamInit(**typed_fields(ParamInit, v, name)),
        }
        return cls(**typed_fields(cls, data, where, nested))

    def with_(self, **changes: Any) -> Problem:
        """A copy with some fields changed."""
        return replace(self, **changes)


def _size_fields() -> list[tuple[str, str, Any]]:
    """The Problem's size fields: every size a built-in family declares, in declaration
    order. A size some family derives (d_inner = n_heads·d_head) is ``int | None``,
    default None (the family's default or product); the others are ``int``, with the
    default of the first family that declares them."""
    return [(name, "int" if default is not None else "int | None", field(default=default))
            for name, default in families.problem_defaults().items()]


Problem = make_dataclass(
    "Problem",
    [("family", "families.Family", field(default=families.default())),
     ("convention", "str", field(default="mamba")),
     *_size_fields(),
     ("signal", "SignalSpec", field(default_factory=SignalSpec)),
     ("init", "ParamInit", field(default_factory=ParamInit)),
     ("dy", "str", field(default="random")),
     ("seed", "int", field(default=0))],
    bases=(_ProblemBase,),
    frozen=True,
    namespace={"__doc__": """Everything needed to build a problem's inputs.

    family, convention, one field per size that a built-in family declares (its
    ``sizes.py``: S6: batch, seq_len, d_inner, d_state; SSD and Mamba-3 also n_heads,
    d_head, n_groups, chunk_len, with d_inner = n_heads·d_head), the signal, the parameter
    init, dy and the seed. A family uses the sizes it declares; ``d_inner`` may be left
    ``None``: the family's default (S6) or what the other sizes make it (SSD; when given it
    must match).
    """},
)
Problem.__module__ = __name__


# -- user-supplied inputs (``--inputs PATH.npz``) --------------------------------------------


def infer_sizes(family: families.Family, arrays: Mapping[str, np.ndarray]) -> dict[str, int]:
    """Infer and cross-check the sizes of user-given inputs (the family's ``infer_sizes``).

    Raises SsmvizError naming the first missing key or the first array whose
    shape does not match the others.
    """
    return family.infer_sizes(arrays)
