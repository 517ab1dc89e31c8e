"""Fuzzing the inputs reader (ssmviz.core.inputs): random keys, dtypes, shapes and meta,
whole or corrupted; the only exception it may raise is a one-line SsmvizError."""

from __future__ import annotations

import io
import json
import os
import tempfile
import zipfile

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ssmviz.core import families
from ssmviz.core.errors import SsmvizError
from ssmviz.core.inputs import open_inputs

DTYPES = [
    np.float16, np.float32, np.float64, np.longdouble, np.int8, np.int64, np.uint16, np.bool_,
    np.complex64, np.complex128, "<U4", "S3", [("a", "<f4"), ("b", "<i4")], object,
    "datetime64[s]",
]
S6_INPUT_KEYS = families.get("s6").input_keys
SSD_INPUT_KEYS = families.get("ssd").input_keys
KEYS = st.sampled_from([*S6_INPUT_KEYS, *SSD_INPUT_KEYS, "meta", "gpu_y", "ref_y", "junk", ""])
SHAPES = st.lists(st.integers(0, 4), min_size=0, max_size=4).map(tuple)
_DIR = tempfile.mkdtemp(prefix="ssmviz-fuzz-npz-")


def _array(dtype, shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype is object:
        a = np.empty(shape, dtype=object)
        a.fill({"x": 1})
        return a
    a = np.zeros(shape, dtype=dtype)
    if a.dtype.kind in "fc" and a.size:
        a[...] = rng.standard_normal(shape)
        if seed % 7 == 0:
            a.flat[0] = np.nan
    return a


def _meta(draw) -> np.ndarray:
    kind = max(0, draw(st.integers(-6, 6)))  # half of them plausible
    if kind == 0:  # a plausible meta
        family = draw(st.sampled_from(["s6", "ssd", "S6", "", None, 3]))
        sizes = draw(st.dictionaries(st.sampled_from(["batch", "seq_len", "d_state", "chunk_len",
                                                      "junk"]),
                                     st.one_of(st.integers(-2, 2**40), st.text(max_size=3),
                                               st.booleans(), st.none()), max_size=4))
        conv = draw(st.sampled_from(["mamba", "builderforce", "torch", None]))
        return np.array(json.dumps({"family": family, "convention": conv, "sizes": sizes}))
    if kind == 1:
        return np.array(draw(st.text(max_size=30)))  # usually not JSON
    if kind == 2:
        depth = draw(st.integers(1, 200_000))
        return np.array("[" * depth + "]" * depth)  # deep nesting
    if kind == 3:
        return np.arange(draw(st.integers(0, 5)), dtype=np.float64)  # not a string
    if kind == 4:
        return np.array(json.dumps(draw(st.one_of(st.lists(st.integers(), max_size=3),
                                                  st.integers(), st.none()))))
    if kind == 5:
        return np.array(b"\xff\xfe bytes")
    return np.array(json.dumps({"sizes": [1, 2]}))


@st.composite
def archives(draw) -> bytes:
    buf = io.BytesIO()
    arrays: dict[str, np.ndarray] = {}
    if draw(st.booleans()):
        # A whole family's keys with consistent shapes: reaches the size and dtype checks.
        fam = draw(st.sampled_from(["s6", "ssd"]))
        b, L, d, n = (draw(st.sampled_from([1, 1, 2, 3, 5, 0])) for _ in range(4))
        h, p, g = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
        if fam == "s6":
            shapes = {"u": (b, L, d), "delta": (b, L, d), "A_log": (d, n), "B": (b, L, n),
                      "C": (b, L, n), "D": (d,), "delta_bias": (d,), "dy": (b, L, d)}
        else:
            shapes = {"x": (b, L, h, p), "dt": (b, L, h), "A_log": (h,), "B": (b, L, g, n),
                      "C": (b, L, g, n), "D": (h,), "dt_bias": (h,), "dy": (b, L, h, p)}
        main = draw(st.sampled_from(DTYPES[:3]))
        for k, shape in shapes.items():
            dtype = draw(st.sampled_from(DTYPES)) if draw(st.integers(0, 9)) == 0 else main
            if draw(st.integers(0, 15)) == 0:
                shape = draw(SHAPES)
            arrays[k] = _array(dtype, shape, draw(st.integers(0, 99)))
    for k in draw(st.lists(KEYS, max_size=3)):
        arrays[k or "empty"] = _array(draw(st.sampled_from(DTYPES)), draw(SHAPES),
                                      draw(st.integers(0, 99)))
    if draw(st.integers(0, 2)) == 0:
        arrays["meta"] = _meta(draw)
    np.savez(buf, **arrays)
    data = bytearray(buf.getvalue())
    corrupt = draw(st.integers(0, 9))
    if corrupt == 1 and data:  # truncated
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif corrupt == 2 and data:  # flipped bytes
        for _ in range(draw(st.integers(1, 8))):
            i = draw(st.integers(0, len(data) - 1))
            data[i] ^= draw(st.integers(1, 255))
    elif corrupt == 3:
        data = bytearray(draw(st.binary(max_size=200)))
    return bytes(data)


def _exercise(path: str) -> None:
    f = open_inputs(path)
    for family in dict.fromkeys([f.meta_family or f.guess_family(), families.get("s6"),
                                  families.get("ssd")]):
        try:
            f.sizes(family)
            arrays = f.load(family)
        except SsmvizError as exc:
            assert "\n" not in str(exc)
            continue
        for a in arrays.values():
            assert a.dtype in (np.float32, np.float64)


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                    HealthCheck.data_too_large])
@given(archives())
def test_inputs_reader_raises_only_one_line_errors(blob: bytes) -> None:
    path = os.path.join(_DIR, "fuzz.npz")
    with open(path, "wb") as fh:
        fh.write(blob)
    try:
        _exercise(path)
    except SsmvizError as exc:
        assert "\n" not in str(exc) and str(exc)


def test_huge_header_shapes_are_judged_without_reading_data(tmp_path) -> None:
    # Headers claiming 2^60 elements: sizes come from the headers, no allocation.
    path = tmp_path / "huge.npz"
    with zipfile.ZipFile(path, "w") as zf:
        for key in S6_INPUT_KEYS:
            shape = {"A_log": (1 << 20, 16), "D": (1 << 20,), "delta_bias": (1 << 20,)}.get(
                key, (1 << 20, 1 << 20, 1 << 20) if key in ("u", "delta", "dy")
                else (1 << 20, 1 << 20, 16))
            header = io.BytesIO()
            np.lib.format.write_array_header_2_0(
                header, {"descr": "<f4", "fortran_order": False, "shape": shape})
            zf.writestr(f"{key}.npy", b"\x93NUMPY\x02\x00" + header.getvalue()[8:])
    f = open_inputs(str(path))
    assert f.sizes(families.get("s6")) == {"batch": 1 << 20, "seq_len": 1 << 20, "d_inner": 1 << 20,
                             "d_state": 16}
