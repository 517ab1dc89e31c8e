"""Input signal generators for the SSM inputs ``u`` (S6) and ``x`` (SSD).

Every generator returns a float64 array of shape ``(batch, seq_len, channels)``.
Channels differ through a per-channel phase (periodic signals), a per-channel
time shift (impulse, step) or a per-channel seed (noise, random walk), and a
per-channel offset ``channel_offset * c``.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ssmviz.core.errors import SsmvizError
from ssmviz.core.fields import SEED_MAX, check_number

SIGNAL_NAMES = (
    "impulse",
    "step",
    "sine",
    "square",
    "sawtooth",
    "chirp",
    "noise",
    "random_walk",
    "file",
)


@dataclass(frozen=True)
class SignalSpec:
    """What to feed a model's input channels.

    ``frequency`` is in cycles per ``seq_len`` (so a sine with frequency 4 shows
    four periods whatever the length); ``phase_step`` shifts each channel's phase
    by that many radians (or, for impulse/step, its onset by that fraction of the
    sequence); ``channel_offset`` adds ``c * channel_offset`` to channel ``c``;
    ``onset`` is where channel 0's impulse or step starts, a fraction of the sequence in
    [0, 1) (the app's shift+click on the input plot sets it).
    """

    name: str = "sine"
    amplitude: float = 1.0
    frequency: float = 4.0
    offset: float = 0.0
    phase_step: float = 0.5
    channel_offset: float = 0.0
    seed: int = 0
    path: str | None = None  # for name == "file": a .npy or .csv
    onset: float = 0.1

    def validate(self) -> None:
        """Raise SsmvizError (one line naming the field) when the spec is unusable."""
        if self.name not in SIGNAL_NAMES:
            raise SsmvizError(f"signal must be one of {', '.join(SIGNAL_NAMES)}; got '{self.name}'")
        for key in ("amplitude", "frequency", "offset", "phase_step", "channel_offset"):
            check_number(f"signal {key}", getattr(self, key))
        check_number("signal onset", self.onset)
        if not 0.0 <= self.onset < 1.0:
            raise SsmvizError(f"signal onset must be in [0, 1); got {self.onset}")
        if self.frequency < 0:
            raise SsmvizError(f"signal frequency must be ≥ 0; got {self.frequency}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int | np.integer):
            raise SsmvizError(f"signal seed must be an integer; got {self.seed!r}")
        if not 0 <= self.seed <= SEED_MAX:
            raise SsmvizError(f"signal seed must be in [0, {SEED_MAX}]; got {self.seed}")
        if self.name == "file" and not self.path:
            raise SsmvizError("signal 'file' needs a path to a .npy or .csv file")


@dataclass(frozen=True)
class _Grid:
    batch: int
    seq_len: int
    channels: int
    t: np.ndarray = field(repr=False)  # (seq_len,) normalised time in [0, 1)
    c: np.ndarray = field(repr=False)  # (channels,)


def _periodic(
    wave: Callable[[np.ndarray], np.ndarray],
) -> Callable[[SignalSpec, _Grid], np.ndarray]:
    def make(spec: SignalSpec, g: _Grid) -> np.ndarray:
        phase = 2 * np.pi * spec.frequency * g.t[:, None] + spec.phase_step * g.c[None, :]
        return wave(phase)

    return make


def _sine(phase: np.ndarray) -> np.ndarray:
    return np.sin(phase)


def _square(phase: np.ndarray) -> np.ndarray:
    return np.where(np.sin(phase) >= 0.0, 1.0, -1.0)


def _sawtooth(phase: np.ndarray) -> np.ndarray:
    frac = np.mod(phase / (2 * np.pi), 1.0)
    return 2.0 * frac - 1.0


def _onset(spec: SignalSpec, g: _Grid) -> np.ndarray:
    # Channel c starts at a fraction phase_step*c/(2π) of the sequence (wrapped).
    start = np.mod(spec.onset + spec.phase_step * g.c / (2 * np.pi), 1.0)
    return np.floor(start * g.seq_len).astype(np.int64)


def _impulse(spec: SignalSpec, g: _Grid) -> np.ndarray:
    out = np.zeros((g.seq_len, g.channels))
    out[_onset(spec, g), np.arange(g.channels)] = 1.0
    return out


def _step(spec: SignalSpec, g: _Grid) -> np.ndarray:
    idx = np.arange(g.seq_len)[:, None]
    return (idx >= _onset(spec, g)[None, :]).astype(np.float64)


def _chirp(spec: SignalSpec, g: _Grid) -> np.ndarray:
    # Linear chirp from 0 to `frequency` cycles per sequence.
    phase = 2 * np.pi * spec.frequency * (g.t**2)[:, None] + spec.phase_step * g.c[None, :]
    return np.sin(phase)


def _noise_batch(spec: SignalSpec, g: _Grid) -> np.ndarray:
    rng = np.random.default_rng(spec.seed)
    return rng.standard_normal((g.batch, g.seq_len, g.channels))


def _random_walk_batch(spec: SignalSpec, g: _Grid) -> np.ndarray:
    steps = _noise_batch(spec, g) / np.sqrt(max(g.seq_len, 1))
    return np.cumsum(steps, axis=1)


_DETERMINISTIC = {
    "impulse": _impulse,
    "step": _step,
    "sine": _periodic(_sine),
    "square": _periodic(_square),
    "sawtooth": _periodic(_sawtooth),
    "chirp": _chirp,
}
_STOCHASTIC = {"noise": _noise_batch, "random_walk": _random_walk_batch}


def load_signal_file(path: str | Path) -> np.ndarray:
    """Load a signal from ``.npy`` or ``.csv`` as float64 ``(seq_len, channels)`` or 3-D.

    A 1-D array is one channel; a 2-D array is ``(seq_len, channels)``; a 3-D
    ``.npy`` is ``(batch, seq_len, channels)``.
    """
    from ssmviz.core.fileio import regular_file

    p = regular_file(path, "signal")
    try:
        if p.suffix.lower() == ".npy":
            data = np.load(p, allow_pickle=False)
        elif p.suffix.lower() == ".csv":
            with p.open(newline="", encoding="utf-8") as fh:
                rows = [r for r in csv.reader(fh) if r and not r[0].lstrip().startswith("#")]
            if rows and not _is_number(rows[0][0]):
                rows = rows[1:]  # a header line
            data = np.array([[float(v) for v in r] for r in rows], dtype=np.float64)
        else:
            raise SsmvizError(f"signal file must be .npy or .csv: {p.name}")
    except SsmvizError:
        raise
    except Exception as exc:
        raise SsmvizError(f"cannot read signal file {p.name}: {exc}") from exc
    data = np.asarray(data, dtype=np.float64)
    if data.ndim == 1:
        data = data[:, None]
    if data.ndim not in (2, 3) or data.size == 0:
        raise SsmvizError(f"signal file {p.name} must hold a 1-D, 2-D or 3-D array of numbers")
    if not np.all(np.isfinite(data)):
        raise SsmvizError(f"signal file {p.name} contains NaN or Inf")
    return data


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def generate(spec: SignalSpec, batch: int, seq_len: int, channels: int) -> np.ndarray:
    """The signal as float64 of shape ``(batch, seq_len, channels)``.

    Deterministic signals repeat across the batch, shifted in phase by batch
    index so batch entries differ too; noise and random walks are seeded by
    ``spec.seed``.
    """
    spec.validate()
    t = np.arange(seq_len, dtype=np.float64) / max(seq_len, 1)
    c = np.arange(channels, dtype=np.float64)
    grid = _Grid(batch, seq_len, channels, t, c)
    if spec.name == "file":
        data = load_signal_file(spec.path or "")
        out = _fit_file(data, batch, seq_len, channels, spec.path or "")
    elif spec.name in _STOCHASTIC:
        out = _STOCHASTIC[spec.name](spec, grid)
    else:
        make = _DETERMINISTIC[spec.name]
        # Batch entry b continues the channel index, so its phases differ too.
        out = np.stack(
            [make(spec, _Grid(batch, seq_len, channels, t, c + b * channels)) for b in range(batch)]
        )
    out = spec.amplitude * out + spec.offset + spec.channel_offset * c[None, None, :]
    return np.ascontiguousarray(out, dtype=np.float64)


def _fit_file(data: np.ndarray, batch: int, seq_len: int, channels: int, name: str) -> np.ndarray:
    if data.ndim == 2:
        data = np.broadcast_to(data[None], (batch, *data.shape))
    if data.shape[0] not in (1, batch):
        raise SsmvizError(f"signal file {name} has batch {data.shape[0]}, expected 1 or {batch}")
    if data.shape[1] < seq_len:
        raise SsmvizError(
            f"signal file {name} has {data.shape[1]} time steps, seq_len is {seq_len}"
        )
    if data.shape[2] not in (1, channels):
        raise SsmvizError(
            f"signal file {name} has {data.shape[2]} channels, expected 1 or {channels}"
        )
    return np.broadcast_to(data[:, :seq_len, :], (batch, seq_len, channels)).copy()
