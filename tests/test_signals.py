"""Signal generators: shapes, channel differences, determinism, file loading."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ssmviz.core.errors import SsmvizError
from ssmviz.core.signals import SIGNAL_NAMES, SignalSpec, generate, load_signal_file

GENERATED = [n for n in SIGNAL_NAMES if n != "file"]


@pytest.mark.parametrize("name", GENERATED)
def test_shape_and_channels_differ(name: str) -> None:
    x = generate(SignalSpec(name=name, seed=3), batch=2, seq_len=128, channels=3)
    assert x.shape == (2, 128, 3) and x.dtype == np.float64
    assert np.all(np.isfinite(x))
    assert not np.array_equal(x[:, :, 0], x[:, :, 1]), "channels must differ"
    assert np.array_equal(x, generate(SignalSpec(name=name, seed=3), 2, 128, 3))


def test_amplitude_offset_frequency() -> None:
    base = generate(SignalSpec(name="sine", frequency=2, phase_step=0), 1, 100, 1)[0, :, 0]
    assert np.allclose(base, np.sin(2 * np.pi * 2 * np.arange(100) / 100))
    scaled = generate(
        SignalSpec(name="sine", frequency=2, phase_step=0, amplitude=3, offset=1), 1, 100, 1
    )[0, :, 0]
    assert np.allclose(scaled, 3 * base + 1)
    off = generate(SignalSpec(name="step", channel_offset=0.5), 1, 10, 3)
    assert np.allclose(off[0, 0], [0.0, 0.5, 1.0])


def test_impulse_and_step() -> None:
    imp = generate(SignalSpec(name="impulse"), 1, 50, 4)
    assert np.all(imp.sum(axis=1) == 1.0)
    step = generate(SignalSpec(name="step"), 1, 50, 2)
    assert np.all(np.diff(step, axis=1) >= 0) and step[0, -1, 0] == 1.0


def test_noise_seeded() -> None:
    a = generate(SignalSpec(name="noise", seed=1), 1, 64, 2)
    b = generate(SignalSpec(name="noise", seed=2), 1, 64, 2)
    assert not np.array_equal(a, b)


def test_file_npy_and_csv(tmp_path: Path) -> None:
    data = np.arange(20, dtype=np.float64).reshape(10, 2)
    np.save(tmp_path / "s.npy", data)
    (tmp_path / "s.csv").write_text("a,b\n" + "\n".join(f"{r[0]},{r[1]}" for r in data))
    for name in ("s.npy", "s.csv"):
        x = generate(SignalSpec(name="file", path=str(tmp_path / name)), 2, 8, 2)
        assert x.shape == (2, 8, 2) and np.array_equal(x[1], data[:8])
    with pytest.raises(SsmvizError, match="time steps"):
        generate(SignalSpec(name="file", path=str(tmp_path / "s.npy")), 1, 11, 2)
    (tmp_path / "bad.csv").write_text("1,2\n3,x\n")
    with pytest.raises(SsmvizError, match=r"bad\.csv"):
        load_signal_file(tmp_path / "bad.csv")
    with pytest.raises(SsmvizError, match="not found"):
        load_signal_file(tmp_path / "none.npy")
