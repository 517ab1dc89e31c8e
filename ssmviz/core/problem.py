"""One dataclass that describes an SSM problem, and the arrays it builds.

A :class:`Problem` names the family (``s6`` or ``ssd``), the numerical
convention (``mamba`` or ``builderforce``, see :mod:`ssmviz.core.reference._common`), the sizes,
the input signal, the parameter initialisation and the seed. ``build()`` turns
it, deterministically, into every input array including the upstream gradient
``dy``. Arrays are float64; the GPU runners cast to float32.

S6 arrays (keys as ``ssmviz check --export`` writes them):
    u, delta, dy       (batch, seq_len, d_inner)   delta is raw: Δ = softplus(delta + delta_bias)
    A_log              (d_inner, d_state)           A = -exp(A_log)
    B, C               (batch, seq_len, d_state)
    D, delta_bias      (d_inner,)
SSD arrays:
    x, dy              (batch, seq_len, n_heads, d_head)
    dt                 (batch, seq_len, n_heads)    raw: dt_eff = softplus(dt + dt_bias)
    A_log, D, dt_bias  (n_heads,)
    B, C               (batch, seq_len, n_groups, d_state)
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from ssmviz.core.errors import SsmvizError
from ssmviz.core.fields import SEED_MAX, check_number, typed_fields
from ssmviz.core.reference._common import CONVENTIONS, inverse_softplus
from ssmviz.core.signals import SignalSpec, generate

FAMILIES = ("s6", "ssd")
A_INITS = ("mamba", "constant", "random")
DY_KINDS = ("random", "ones")

S6_INPUT_KEYS = ("u", "delta", "A_log", "B", "C", "D", "delta_bias", "dy")
SSD_INPUT_KEYS = ("x", "dt", "A_log", "B", "C", "D", "dt_bias", "dy")
S6_GRAD_KEYS = ("du", "ddelta", "dA_log", "dB", "dC", "dD", "ddelta_bias")
SSD_GRAD_KEYS = ("dx", "ddt", "dA_log", "dB", "dC", "dD", "ddt_bias")

#: Largest sizes the app and CLI accept before even asking the device (keeps a typo
#: like seq_len=10**12 from allocating); the device limits are checked separately.
MAX_SIZE = {
    "batch": 4096,
    "seq_len": 1 << 26,
    "d_inner": 1 << 16,
    "d_state": 256,
    "n_heads": 4096,
    "d_head": 1024,
    "n_groups": 4096,
    "chunk_len": 4096,
}


def _check_int(name: str, value: object, minimum: int, maximum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise SsmvizError(f"{name} must be an integer; got {value!r}")
    if value < minimum:
        raise SsmvizError(f"{name} must be ≥ {minimum}; got {value}")
    if maximum is not None and value > maximum:
        raise SsmvizError(f"{name} must be ≤ {maximum}; got {value}")


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

    def validate(self) -> None:
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


@dataclass(frozen=True)
class Problem:
    """Everything needed to build a problem's inputs.

    For ``s6`` the sizes are batch, seq_len, d_inner, d_state. For ``ssd`` they
    are batch, seq_len, n_heads, d_head, n_groups, d_state, chunk_len, with
    d_inner = n_heads·d_head (``d_inner`` may be left ``None``; when given it must
    match).
    """

    family: str = "s6"
    convention: str = "mamba"
    batch: int = 1
    seq_len: int = 256
    d_inner: int | None = None
    d_state: int = 16
    n_heads: int = 4
    d_head: int = 16
    n_groups: int = 1
    chunk_len: int = 64
    signal: SignalSpec = field(default_factory=SignalSpec)
    init: ParamInit = field(default_factory=ParamInit)
    dy: str = "random"
    seed: int = 0

    # -- sizes ----------------------------------------------------------------------------
    @property
    def inner(self) -> int:
        """d_inner: given for S6 (default 4), n_heads·d_head for SSD."""
        if self.family == "ssd":
            return self.n_heads * self.d_head
        return 4 if self.d_inner is None else self.d_inner

    def sizes(self) -> dict[str, int]:
        """The sizes that matter for this family, by their paper names."""
        s = {"batch": self.batch, "seq_len": self.seq_len, "d_inner": self.inner}
        s["d_state"] = self.d_state
        if self.family == "ssd":
            s |= {
                "n_heads": self.n_heads,
                "d_head": self.d_head,
                "n_groups": self.n_groups,
                "chunk_len": self.chunk_len,
            }
        return s

    def validate(self) -> None:
        """Raise SsmvizError with a one-line message naming the first bad parameter."""
        if self.family not in FAMILIES:
            raise SsmvizError(f"family must be one of {', '.join(FAMILIES)}; got '{self.family}'")
        if self.convention not in CONVENTIONS:
            raise SsmvizError(
                f"convention must be one of {', '.join(CONVENTIONS)}; got '{self.convention}'"
            )
        names = ["batch", "seq_len", "d_state"]
        names += ["n_heads", "d_head", "n_groups", "chunk_len"] if self.family == "ssd" else []
        if self.d_inner is not None:  # None: the default (S6) or n_heads·d_head (SSD)
            names.insert(2, "d_inner")
        for name in names:
            _check_int(name, getattr(self, name), 1, MAX_SIZE[name])
        if self.family == "ssd":
            if self.d_inner is not None and self.d_inner != self.n_heads * self.d_head:
                raise SsmvizError(
                    f"d_inner must equal n_heads·d_head = {self.n_heads}·{self.d_head} = "
                    f"{self.n_heads * self.d_head}; got {self.d_inner}"
                )
            if self.n_heads % self.n_groups != 0:
                raise SsmvizError(
                    f"n_heads ({self.n_heads}) must be divisible by n_groups ({self.n_groups})"
                )
        if self.dy not in DY_KINDS:
            raise SsmvizError(f"dy must be one of {', '.join(DY_KINDS)}; got '{self.dy}'")
        _check_int("seed", self.seed, 0, SEED_MAX)
        self.signal.validate()
        self.init.validate()

    # -- arrays ---------------------------------------------------------------------------
    def _rng(self, name: str) -> np.random.Generator:
        return _stream(self.seed, name)

    def _normal(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """Standard normals of stream ``name`` (read-only; cached while small)."""
        return _standard_normal(self.seed, name, tuple(int(n) for n in shape))

    def _dt_sample(self, count: int) -> np.ndarray:
        lo, hi = np.log(self.init.dt_min), np.log(self.init.dt_max)
        return np.exp(self._rng("dt").uniform(lo, hi, size=count))

    def _A_log(self, shape: tuple[int, ...], per_state_axis: int | None) -> np.ndarray:
        init = self.init
        if init.A == "constant":
            return np.full(shape, np.log(init.A_value))
        if init.A == "random":
            return np.log(self._rng("A").uniform(0.5, 16.0, size=shape))
        if per_state_axis is not None:  # S6: log(1..d_state) for every channel
            n = shape[per_state_axis]
            return np.broadcast_to(np.log(np.arange(1, n + 1, dtype=np.float64)), shape).copy()
        return np.log(self._rng("A").uniform(1.0, 16.0, size=shape))

    def _dy(self, shape: tuple[int, ...]) -> np.ndarray:
        if self.dy == "ones":
            return np.ones(shape)
        return self._normal("dy", shape).copy()

    def build(self) -> dict[str, np.ndarray]:
        """Every input array of the problem, float64, keyed as the export writes them."""
        self.validate()
        return self._build_s6() if self.family == "s6" else self._build_ssd()

    def _build_s6(self) -> dict[str, np.ndarray]:
        b, L, d, n = self.batch, self.seq_len, self.inner, self.d_state
        bias = inverse_softplus(self._dt_sample(d))
        noise = self.init.delta_noise * self._normal("delta", (b, L, d))
        if self.convention == "builderforce":
            # builderforce has no delta_bias: fold the bias into the raw delta.
            delta, delta_bias = noise + bias, np.zeros(d)
        else:
            delta, delta_bias = noise, bias
        scale = self.init.bc_scale
        return {
            "u": generate(self.signal, b, L, d),
            "delta": delta,
            "A_log": self._A_log((d, n), per_state_axis=1),
            "B": scale * self._normal("B", (b, L, n)),
            "C": scale * self._normal("C", (b, L, n)),
            "D": np.full(d, self.init.D),
            "delta_bias": delta_bias,
            "dy": self._dy((b, L, d)),
        }

    def _build_ssd(self) -> dict[str, np.ndarray]:
        b, L, h, p = self.batch, self.seq_len, self.n_heads, self.d_head
        g, n = self.n_groups, self.d_state
        scale = self.init.bc_scale
        return {
            "x": generate(self.signal, b, L, h * p).reshape(b, L, h, p),
            "dt": self.init.delta_noise * self._normal("delta", (b, L, h)),
            "A_log": self._A_log((h,), per_state_axis=None),
            "B": scale * self._normal("B", (b, L, g, n)),
            "C": scale * self._normal("C", (b, L, g, n)),
            "D": np.full(h, self.init.D),
            "dt_bias": inverse_softplus(self._dt_sample(h)),
            "dy": self._dy((b, L, h, p)),
        }

    # -- (de)serialisation ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (sessions and export metadata)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "problem") -> Problem:
        """Inverse of :meth:`to_dict`. Unknown keys and values of the wrong JSON type are a
        one-line SsmvizError naming the field (``where.signal.amplitude``); missing keys
        keep their defaults. Ranges are :meth:`validate`'s."""
        nested = {
            "signal": lambda v, name: SignalSpec(**typed_fields(SignalSpec, v, name)),
            "init": lambda v, name: ParamInit(**typed_fields(ParamInit, v, name)),
        }
        return cls(**typed_fields(cls, data, where, nested))

    def with_(self, **changes: Any) -> Problem:
        """A copy with some fields changed."""
        return replace(self, **changes)


# -- user-supplied inputs (``--inputs PATH.npz``) --------------------------------------------


def infer_sizes(family: str, arrays: Mapping[str, np.ndarray]) -> dict[str, int]:
    """Infer and cross-check the sizes of user-given inputs.

    Raises SsmvizError naming the first missing key or the first array whose
    shape does not match the others.
    """
    keys = S6_INPUT_KEYS if family == "s6" else SSD_INPUT_KEYS
    for key in keys:
        if key not in arrays:
            raise SsmvizError(f"inputs lack the key '{key}' (need {', '.join(keys)})")
    a = {k: np.asarray(arrays[k]) for k in keys}
    if family == "s6":
        if a["u"].ndim != 3:
            raise SsmvizError(f"u must be (batch, seq_len, d_inner); got shape {a['u'].shape}")
        batch, seq_len, d_inner = a["u"].shape
        if a["A_log"].ndim != 2:
            raise SsmvizError(f"A_log must be (d_inner, d_state); got shape {a['A_log'].shape}")
        d_state = a["A_log"].shape[1]
        sizes = {"batch": batch, "seq_len": seq_len, "d_inner": d_inner, "d_state": d_state}
        expected = {
            "u": ((batch, seq_len, d_inner), "(batch, seq_len, d_inner)"),
            "delta": ((batch, seq_len, d_inner), "(batch, seq_len, d_inner)"),
            "A_log": ((d_inner, d_state), "(d_inner, d_state)"),
            "B": ((batch, seq_len, d_state), "(batch, seq_len, d_state)"),
            "C": ((batch, seq_len, d_state), "(batch, seq_len, d_state)"),
            "D": ((d_inner,), "(d_inner,)"),
            "delta_bias": ((d_inner,), "(d_inner,)"),
            "dy": ((batch, seq_len, d_inner), "(batch, seq_len, d_inner)"),
        }
    else:
        if a["x"].ndim != 4:
            raise SsmvizError(
                f"x must be (batch, seq_len, n_heads, d_head); got shape {a['x'].shape}"
            )
        batch, seq_len, n_heads, d_head = a["x"].shape
        if a["B"].ndim != 4:
            raise SsmvizError(
                f"B must be (batch, seq_len, n_groups, d_state); got shape {a['B'].shape}"
            )
        n_groups, d_state = a["B"].shape[2:]
        sizes = {
            "batch": batch,
            "seq_len": seq_len,
            "d_inner": n_heads * d_head,
            "n_heads": n_heads,
            "d_head": d_head,
            "n_groups": n_groups,
            "d_state": d_state,
        }
        bl = "(batch, seq_len, "
        expected = {
            "x": ((batch, seq_len, n_heads, d_head), bl + "n_heads, d_head)"),
            "dt": ((batch, seq_len, n_heads), bl + "n_heads)"),
            "A_log": ((n_heads,), "(n_heads,)"),
            "B": ((batch, seq_len, n_groups, d_state), bl + "n_groups, d_state)"),
            "C": ((batch, seq_len, n_groups, d_state), bl + "n_groups, d_state)"),
            "D": ((n_heads,), "(n_heads,)"),
            "dt_bias": ((n_heads,), "(n_heads,)"),
            "dy": ((batch, seq_len, n_heads, d_head), bl + "n_heads, d_head)"),
        }
    for key, (shape, text) in expected.items():
        if a[key].shape != shape:
            raise SsmvizError(f"{key} has shape {a[key].shape}, expected {text} = {shape}")
        if not np.issubdtype(a[key].dtype, np.number):
            raise SsmvizError(f"{key} must hold numbers; got dtype {a[key].dtype}")
    for name, value in sizes.items():
        if value < 1:
            raise SsmvizError(f"{name} inferred from the inputs is {value}; it must be ≥ 1")
    if family == "ssd" and sizes["n_heads"] % sizes["n_groups"] != 0:
        raise SsmvizError(
            f"n_heads ({sizes['n_heads']}) must be divisible by n_groups ({sizes['n_groups']})"
        )
    return sizes
