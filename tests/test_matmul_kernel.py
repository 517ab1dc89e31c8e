"""The tiled fp32 matmul kernel against numpy on odd sizes (runs on lavapipe in CI)."""

from __future__ import annotations

import numpy as np
import pytest

from ssmviz.core.dispatch import POISON_U32, Readback
from ssmviz.core.errors import SsmvizError
from ssmviz.core.kernels.matmul import WORKGROUP_STORAGE_BYTES, MatmulKernel
from ssmviz.core.resources import shader_source
from tests.kernel_helpers import declared_workgroup_storage


@pytest.fixture(scope="module")
def kernel(runtime) -> MatmulKernel:
    return MatmulKernel(runtime)


@pytest.mark.parametrize(
    ("m", "n", "k"), [(1, 1, 1), (37, 129, 65), (130, 7, 300), (257, 131, 19), (128, 256, 8)]
)
def test_matches_numpy(kernel: MatmulKernel, m: int, n: int, k: int) -> None:
    rng = np.random.default_rng(m * 1000 + n + k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = kernel.run(a, b)
    assert c.shape == (m, n)
    assert not np.any(c.view(np.uint32) == POISON_U32), "elements never written"
    want = a.astype(np.float64) @ b.astype(np.float64)
    err = np.linalg.norm(c - want) / np.linalg.norm(want)
    assert err <= 1e-6 * max(1.0, np.sqrt(k)), err
    # Deterministic: same bits again.
    assert np.array_equal(kernel.run(a, b).view(np.uint32), c.view(np.uint32))


def test_bad_shapes(kernel: MatmulKernel) -> None:
    with pytest.raises(SsmvizError, match="inner"):
        kernel.run(np.zeros((3, 4), np.float32), np.zeros((5, 2), np.float32))
    with pytest.raises(SsmvizError, match="2-D"):
        kernel.run(np.zeros(3, np.float32), np.zeros((3, 2), np.float32))


def test_flops_and_prepare(kernel: MatmulKernel, runtime) -> None:
    assert MatmulKernel.flops(3, 5, 7) == 210
    dispatches = kernel.prepare(200, 70, 33)
    assert len(dispatches) == 1
    assert runtime.run(dispatches, timed=True).source in ("gpu-timestamps", "wall-clock")
    # The prepared product is a real one: c = a · b on the buffers it was given (a and b
    # zero-padded to whole vec4 rows).
    binds = dispatches[0].bindings
    a, b, c = runtime.read_many(
        [Readback(binds[1], np.float32, (200, 36)), Readback(binds[2], np.float32, (36, 72)),
         Readback(binds[3], np.float32, (200, 70))]
    )  # fmt: skip
    assert not a[:, 33:].any() and not b[33:].any() and not b[:, 70:].any()
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert want.shape == (200, 72)
    want = want[:, :70]
    assert np.linalg.norm(c - want) / np.linalg.norm(want) <= 1e-6 * np.sqrt(33)


def test_workgroup_storage() -> None:
    declared = declared_workgroup_storage(shader_source("matmul.wgsl"))
    assert declared == WORKGROUP_STORAGE_BYTES <= 16384
