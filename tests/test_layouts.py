"""Host-side layouts (no GPU): canonical arrays -> a buffer's words -> canonical again,
for every layout feature, and the positions they land at."""

from __future__ import annotations

import numpy as np

from ssmviz.core.dispatch import POISON_U32
from ssmviz.core.external.layouts import gpu_buffers, initial_contents, read_roles
from ssmviz.core.external.profiles import parse_profile_text

SIZES = {"batch": 2, "seq_len": 3, "d_inner": 4, "d_state": 5}

HEAD = """
name = "t"
family = "s6"
params = ["batch", "seq_len", "d_inner", "d_state"]
[sizes]
n_slots = "batch + 2"
[arenas.mem]
size = "1000"
[[passes]]
entry = "k"
dispatch = ["1", "1", "1"]
bindings = { 0 = "params", 1 = "mem", 2 = "pool", 3 = "slots" }
[buffers.slots]
dtype = "u32"
dims = ["batch"]
fill = "n_slots - 1 - i"
"""


def _prof(tables: str):
    prof = parse_profile_text(HEAD + tables)
    return prof, prof.sizes_for(SIZES)


def _values(rng: np.random.Generator) -> dict[str, np.ndarray]:
    b, t, d, n = SIZES.values()
    return {"u": rng.normal(size=(b, t, d)), "A_bar": rng.normal(size=(b, t, d, n)),
            "Bu": rng.normal(size=(b, t, d, n)), "B": rng.normal(size=(b, t, n)),
            "h0": rng.normal(size=(b, d, n)), "last_state": rng.normal(size=(b, d, n))}


def test_offsets_axis_order_interleave_and_repeat_land_where_the_kernel_reads() -> None:
    prof, sizes = _prof("""
[buffers.u]
role = "u"
dims = ["batch", "d_inner", "seq_len"]
arena = "mem"
offset = 7
[buffers.pairs]
role = ["A_bar", "Bu"]
interleave = true
io = "in"
dims = ["batch", "seq_len", "d_inner", "d_state"]
arena = "mem"
offset = "params[0] * 100"
[buffers.B]
role = "B"
constant = ["batch", "seq_len"]
dims = ["d_inner", "d_state"]
arena = "mem"
offset = "500"
[buffers.pool]
role = "last_state"
initial = "h0"
io = "inout"
dims = ["n_slots", "d_inner", "d_state"]
slots = "slots"
""")
    v = _values(np.random.default_rng(0))
    gbs = gpu_buffers(prof, {"mem", "pool", "slots"}, sizes)
    mem = initial_contents(prof, gbs["mem"], v, sizes, produced=True).view(np.float32)
    assert np.all(mem[:7].view(np.uint32) == POISON_U32)  # nothing there
    u = mem[7:7 + 24].reshape(2, 4, 3)  # (batch, d_inner, seq_len)
    np.testing.assert_array_equal(u, np.float32(v["u"].transpose(0, 2, 1)))
    pairs = mem[200:200 + 2 * 120].reshape(2, 3, 4, 5, 2)  # offset params[0] * 100 = 200
    np.testing.assert_array_equal(pairs[..., 0], np.float32(v["A_bar"]))
    np.testing.assert_array_equal(pairs[..., 1], np.float32(v["Bu"]))
    B = mem[500:520].reshape(4, 5)  # B[0, 0] repeated along d_inner
    np.testing.assert_array_equal(B, np.broadcast_to(np.float32(v["B"][0, 0]), (4, 5)))
    pool = initial_contents(prof, gbs["pool"], v, sizes, produced=True).view(np.float32)
    pool = pool.reshape(4, 4, 5)  # slots = [3, 2]; slots 0 and 1 unused: zeros
    np.testing.assert_array_equal(pool[3], np.float32(v["h0"][0]))
    np.testing.assert_array_equal(pool[2], np.float32(v["h0"][1]))
    assert not pool[:2].any()
    # Read back, the pool's judged role is gathered through the slots.
    back = read_roles(prof, gbs["pool"], pool.reshape(-1).view(np.uint32), sizes)
    np.testing.assert_array_equal(back["pool"]["last_state"], np.float32(v["h0"]))
    assert initial_contents(prof, gbs["slots"], v, sizes, produced=True).tolist() == [3, 2]


def test_mixed_stack_uploads_the_input_part_and_poisons_the_output_part() -> None:
    prof, sizes = _prof("""
[buffers.pool]
role = "last_state"
dims = ["batch", "d_inner", "d_state"]
[buffers.uy]
role = ["u", "y"]
dims = ["batch", "seq_len", "d_inner"]
arena = "mem"
""")
    v = _values(np.random.default_rng(1))
    gb = gpu_buffers(prof, {"mem"}, sizes)["mem"]
    words = initial_contents(prof, gb, v, sizes, produced=True)
    np.testing.assert_array_equal(words[:24].view(np.float32).reshape(2, 3, 4),
                                  np.float32(v["u"]))
    assert np.all(words[24:48] == POISON_U32)
    out = read_roles(prof, gb, words, sizes)
    assert set(out["uy"]) == {"y"}


def test_zero_leading_applies_to_host_built_contents() -> None:
    prof, sizes = _prof("""
[buffers.pool]
role = "last_state"
dims = ["batch", "d_inner", "d_state"]
[buffers.y]
role = "y"
dims = ["batch", "seq_len", "d_inner"]
arena = "mem"
zero_leading = "5"
""")
    gb = gpu_buffers(prof, {"mem"}, sizes)["mem"]
    words = initial_contents(prof, gb, {}, sizes, produced=True)
    assert not words[:5].any() and np.all(words[5:24] == POISON_U32)
