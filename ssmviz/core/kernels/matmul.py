"""A tiled fp32 matmul kernel (``shaders/matmul.wgsl``): the benchmark's yardstick.

``c = a · b`` with a (m, k), b (k, n), c (m, n), row-major float32. Each 256-thread workgroup
computes a 128 x 128 tile from two stages of workgroup-memory tiles (K step 8, written out, the
step loop unrolled by two), 8 x 8 outputs per thread. a and b are read as vec4 rows: they are
uploaded zero-padded to whole vec4s.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ssmviz.core.dispatch import POISON_U32, Dispatch, Readback
from ssmviz.core.errors import SsmvizError
from ssmviz.core.kernels._base import ShaderKernel

SHADER = "matmul.wgsl"
ENTRY = "matmul"
#: Output tile per workgroup (TILE x TILE), K step and threads per workgroup; match the shader.
TILE = 128
TILE_K = 8
WORKGROUP = 256
STAGES = 2
WORKGROUP_STORAGE_BYTES = STAGES * 2 * TILE * TILE_K * 4

#: The kernel's ABI: bindings (index, name, shape, access) and dispatch.
MATMUL_ABI: dict[str, Any] = {
    "shader": SHADER,
    "entry_point": ENTRY,
    "workgroup_size": WORKGROUP,
    "dispatch": "split_workgroups(ceil(m/128) * ceil(n/128)) folded into (x, y, 1)",
    "params": ["m", "n", "k", "tiles_n", "total", "k4", "n4", "pad0"],
    "bindings": [
        {"index": 0, "name": "params", "role": "uniform", "access": "uniform"},
        {"index": 1, "name": "a", "shape": "(m, 4 k4) vec4 rows, k4 = ceil(k / 4), zero-padded",
         "access": "read"},
        {"index": 2, "name": "b", "shape": "(4 k4, 4 n4), n4 = ceil(n / 4), zero-padded",
         "access": "read"},
        {"index": 3, "name": "c", "shape": "(m, n)", "access": "overwrite"},
    ],
}


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


class MatmulKernel(ShaderKernel):
    """fp32 ``a · b`` on the shared GPU runtime."""

    SHADER = SHADER

    @staticmethod
    def flops(m: int, n: int, k: int) -> int:
        """2·m·n·k: one multiply and one add per term."""
        return 2 * int(m) * int(n) * int(k)

    def _check(self, m: int, n: int, k: int) -> None:
        for name, v in (("m", m), ("n", n), ("k", k)):
            if v < 1:
                raise SsmvizError(f"matmul size {name} must be >= 1, got {v}")
        k_pad, n_pad = 4 * _ceil(k, 4), 4 * _ceil(n, 4)
        largest = 4 * max(m * k_pad, k_pad * n_pad, m * n)
        self.rt.require(storage_binding_bytes=largest, buffer_bytes=largest,
                        workgroup_storage_bytes=WORKGROUP_STORAGE_BYTES,
                        invocations_per_workgroup=WORKGROUP, storage_buffers_per_stage=3,
                        what="matmul")

    def _dispatch(self, m: int, n: int, k: int, a_buf: Any, b_buf: Any, c_buf: Any) -> Dispatch:
        tiles_n = _ceil(n, TILE)
        total = _ceil(m, TILE) * tiles_n
        vals = [m, n, k, tiles_n, total, _ceil(k, 4), _ceil(n, 4), 0]
        params = self.rt.uniform(np.array(vals, dtype=np.uint32))
        return self.dispatch(ENTRY, {0: params, 1: a_buf, 2: b_buf, 3: c_buf}, total)

    def _upload_padded(self, a: np.ndarray, b: np.ndarray) -> tuple[Any, Any]:
        """a and b as the shader reads them: zero-padded to (m, 4 k4) and (4 k4, 4 n4)."""
        k, n = a.shape[1], b.shape[1]
        k_pad, n_pad = 4 * _ceil(k, 4), 4 * _ceil(n, 4)
        if k_pad != k:
            a = np.pad(a, ((0, 0), (0, k_pad - k)))
        if (k_pad, n_pad) != b.shape:
            b = np.pad(b, ((0, k_pad - k), (0, n_pad - n)))
        return self.upload(a, "a"), self.upload(b, "b")

    def prepare(self, m: int, n: int, k: int, *, seed: int = 0) -> list[Dispatch]:
        """One dispatch of an (m, k) · (k, n) product on random buffers, for timing."""
        self._check(m, n, k)
        rng = np.random.default_rng(seed)
        a_buf, b_buf = self._upload_padded(rng.standard_normal((m, k), dtype=np.float32),
                                           rng.standard_normal((k, n), dtype=np.float32))
        c_buf = self.rt.empty(4 * m * n, label="c")
        return [self._dispatch(m, n, k, a_buf, b_buf, c_buf)]

    def run(self, a: np.ndarray, b: np.ndarray, *, poison: bool = True) -> np.ndarray:
        """``a · b`` as float32; a: (m, k), b: (k, n) -> (m, n)."""
        a = np.asarray(a)
        b = np.asarray(b)
        if a.ndim != 2 or b.ndim != 2:
            raise SsmvizError(f"matmul needs 2-D a and b, got shapes {a.shape} and {b.shape}")
        if a.shape[1] != b.shape[0]:
            raise SsmvizError(f"matmul inner sizes differ: a {a.shape}, b {b.shape}")
        m, k = a.shape
        n = b.shape[1]
        self._check(m, n, k)
        c_buf = self.rt.empty(4 * m * n, fill_u32=POISON_U32 if poison else None, label="c")
        d = self._dispatch(m, n, k, *self._upload_padded(a, b), c_buf)
        # The pass and the readback in one submission.
        return self.rt.run_and_read([[d]], reads=[Readback(c_buf, np.float32, (m, n))])[1][0]
