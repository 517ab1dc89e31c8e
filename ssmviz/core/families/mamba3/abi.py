"""The ABI of ``shaders/mamba3.wgsl``: bindings, passes and Params of the Mamba-3 SISO kernels.

:data:`MAMBA3_ABI` is an :class:`~ssmviz.core.families.abi.AbiProfile`; the family's host
code (:mod:`.kernel`) dispatches its passes in the order listed, one invocation per item
(64 a workgroup, folded by ``split_workgroups``). No pass accumulates across workgroups (no
atomics), so no output needs zeroing. Shapes as in the shader's header and
:mod:`.reference`.
"""

from __future__ import annotations

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.abi import AbiProfile, BufferSpec, PassSpec
from ssmviz.core.families.family import RoleSpec
from ssmviz.core.families.mamba3 import complex_ssd

SHADER = "mamba3.wgsl"
WORKGROUP = 64

INPUTS = ("x", "dt", "adt", "trap", "angles", "B", "C", "B_bias", "C_bias", "D", "dy")
PARAM_FIELDS = ("batch", "seq_len", "n_heads", "d_head", "n_groups", "d_state", "n_angles",
                "chunk_len", "n_chunks", "reverse", "store_states", "total")

_BLHP = ["batch", "seq_len", "n_heads", "d_head"]
_BLH = ["batch", "seq_len", "n_heads"]
_BLHJ = ["batch", "seq_len", "n_heads", "n_angles"]
_BLGN = ["batch", "seq_len", "n_groups", "d_state"]
_HN = ["n_heads", "d_state"]
_CHPN = ["batch", "n_chunks", "n_heads", "d_head", "d_state"]
_CHQQ = ["batch", "n_chunks", "n_heads", "chunk_len", "chunk_len"]

#: (name, axes, io, stage, layout) by binding index; 0 is the Params uniform.
_TABLE: dict[int, tuple[str, list[str], str, str, str]] = {
    1: ("x", _BLHP, "in", "forward", ""),
    2: ("dt", _BLH, "in", "forward", "Δ, after softplus (mamba's DT)"),
    3: ("adt", _BLH, "in", "forward", "A·Δ, the log-decay (mamba's ADT)"),
    4: ("trap", _BLH, "in", "forward", "raw: λ = sigmoid(trap)"),
    5: ("angles", _BLHJ, "in", "forward", "raw: rate = π·tanh(angles)"),
    6: ("B", _BLGN, "in", "forward", ""),
    7: ("C", _BLGN, "in", "forward", ""),
    8: ("B_bias", _HN, "in", "forward", ""),
    9: ("C_bias", _HN, "in", "forward", ""),
    10: ("D", ["n_heads"], "in", "forward", ""),
    11: ("dy", _BLHP, "in", "forward", ""),
    12: ("y", _BLHP, "out", "forward", ""),
    13: ("final_state", ["batch", "n_heads", "d_head", "d_state"], "out", "forward", ""),
    14: ("chunk_states", ["batch", "chunk_slot", "n_heads", "d_head", "d_state"], "out",
         "forward", "(batch, n_chunks + 1, n_heads, d_head, d_state); h at chunk ends"),
    15: ("dx", _BLHP, "out", "backward", ""),
    16: ("ddt", _BLH, "out", "backward", ""),
    17: ("dadt", _BLH, "out", "backward", ""),
    18: ("dtrap", _BLH, "out", "backward", ""),
    19: ("dangles", _BLHJ, "out", "backward", ""),
    20: ("dB", _BLGN, "out", "backward", ""),
    21: ("dC", _BLGN, "out", "backward", ""),
    22: ("dB_bias", _HN, "out", "backward", ""),
    23: ("dC_bias", _HN, "out", "backward", ""),
    24: ("dD", ["n_heads"], "out", "backward", ""),
    25: ("step_terms", ["6", *_BLH], "scratch", "forward", "cum, to_end, s, σ', q·k, γ"),
    26: ("phase", _BLHJ, "scratch", "forward", "in-chunk angle sums"),
    27: ("angle_off", ["batch", "n_chunks", "n_heads", "n_angles"], "scratch", "forward",
         "angle entering each chunk, mod 2π"),
    28: ("qk_rot", ["2", "batch", "seq_len", "n_heads", "d_state"], "scratch", "forward",
         "q̂, k̂ per head"),
    29: ("cb", _CHQQ, "scratch", "forward", "q̂_t·k̂_s·decay, s ≤ t"),
    30: ("chunk_local", _CHPN, "scratch", "forward", ""),
    31: ("states_in", _CHPN, "scratch", "forward", "S entering each chunk"),
    32: ("y_ssm", _BLHP, "scratch", "forward", "S_t·q̂_t"),
    33: ("dyx", _CHQQ, "scratch", "backward", "dy_t·x_s·decay, s ≤ t"),
    34: ("dlocal", _CHPN, "scratch", "backward", ""),
    35: ("dstates", _CHPN, "scratch", "backward", ""),
    36: ("v", _BLHP, "scratch", "backward", "G_t·k̂_t"),
    37: ("dqk", ["2", "batch", "seq_len", "n_heads", "d_state"], "scratch", "backward",
         "dq̂, dk̂, then dq, dk"),
    38: ("step_grads", ["3", *_BLH], "scratch", "backward", "ds, dγ, dcum"),
    39: ("dphase", _BLHJ, "scratch", "backward", ""),
    40: ("dangle_sums", ["batch", "n_chunks", "n_heads", "n_angles"], "scratch", "backward",
         ""),
    41: ("boundary", ["batch", "n_chunks", "n_heads"], "scratch", "backward", ""),
    42: ("partials", ["batch", "n_chunks", "n_heads", "2·d_state + 1"], "scratch",
         "backward", ""),
}
BUFFERS: dict[int, BufferSpec] = {
    i: BufferSpec(name, [name] if io != "scratch" else ["scratch"], dims, io, stage=stage,
                  layout=layout)
    for i, (name, dims, io, stage, layout) in _TABLE.items()
}
INDEX = {spec.name: i for i, spec in BUFFERS.items()}

# (entry point, stage, items (one invocation each), buffers it binds).
PASS_TABLE: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("m3_prep", "forward", "batch*n_chunks*n_heads",
     ("dt", "adt", "trap", "angles", "B", "C", "B_bias", "C_bias", "step_terms", "phase")),
    ("m3_angle_carry", "forward", "batch*n_heads*n_angles", ("phase", "angle_off")),
    ("m3_rotate", "forward", "batch*seq_len*n_heads*d_state/2",
     ("B", "C", "B_bias", "C_bias", "phase", "angle_off", "qk_rot")),
    ("m3_cb", "forward", "batch*n_chunks*n_heads*chunk_len²", ("adt", "qk_rot", "cb")),
    ("m3_chunk_state", "forward", "batch*n_chunks*n_heads*d_head*d_state",
     ("x", "step_terms", "qk_rot", "chunk_local")),
    ("m3_state_pass", "forward", "batch*n_heads*d_head*d_state",
     ("x", "final_state", "chunk_states", "step_terms", "qk_rot", "chunk_local", "states_in")),
    ("m3_chunk_out", "forward", "batch*seq_len*n_heads*d_head",
     ("x", "D", "y", "step_terms", "qk_rot", "cb", "states_in", "y_ssm")),
    ("m3_dyx", "backward", "batch*n_chunks*n_heads*chunk_len²", ("x", "adt", "dy", "dyx")),
    ("m3_dchunk_state", "backward", "batch*n_chunks*n_heads*d_head*d_state",
     ("dy", "step_terms", "qk_rot", "dlocal")),
    ("m3_dstate_pass", "backward", "batch*n_heads*d_head*d_state",
     ("step_terms", "dlocal", "dstates")),
    ("m3_boundary", "backward", "batch*n_chunks*n_heads", ("states_in", "dstates", "boundary")),
    ("m3_dx", "backward", "batch*seq_len*n_heads*d_head",
     ("D", "dy", "dx", "step_terms", "qk_rot", "cb", "dstates", "v")),
    ("m3_dqk", "backward", "batch*seq_len*n_heads*d_state",
     ("x", "dy", "step_terms", "qk_rot", "states_in", "dyx", "dstates", "dqk")),
    ("m3_step", "backward", "batch*seq_len*n_heads",
     ("x", "B", "C", "B_bias", "C_bias", "dy", "step_terms", "phase", "angle_off", "qk_rot",
      "y_ssm", "v", "dqk", "step_grads", "dphase")),
    ("m3_dangle_chunk", "backward", "batch*n_chunks*n_heads*n_angles",
     ("dphase", "dangle_sums")),
    ("m3_dangle_carry", "backward", "batch*n_heads*n_angles", ("dangle_sums",)),
    ("m3_dt_chunk", "backward", "batch*n_chunks*n_heads",
     ("dt", "trap", "angles", "ddt", "dadt", "dtrap", "dangles", "step_grads", "dphase",
      "dangle_sums", "boundary")),
    ("m3_dbc", "backward", "batch*seq_len*n_groups*d_state", ("dB", "dC", "dqk")),
    ("m3_partials", "backward", "batch*n_chunks*n_heads*(2·d_state + 1)",
     ("x", "dy", "dqk", "partials")),
    ("m3_param_reduce", "backward", "n_heads*(2·d_state + 1)",
     ("dB_bias", "dC_bias", "dD", "partials")),
)

PASSES = [
    PassSpec(entry, stage, (WORKGROUP, 1, 1), ["1"],
             {0: "params"} | {INDEX[n]: n for n in sorted(names, key=INDEX.__getitem__)},
             rule=f"split_workgroups(ceil({items} / {WORKGROUP})) folded into (x, y, 1)")
    for entry, stage, items, names in PASS_TABLE
]

MAMBA3_ABI = AbiProfile(
    name="ssmviz-mamba3",
    family=None,  # the record, made from this ABI, is filled in by the registry
    convention="mamba",
    params=list(PARAM_FIELDS),
    params_binding=0,
    sizes={},
    buffers={b.name: b for b in BUFFERS.values()},
    passes=PASSES,
    detect_entry_points=[p.entry for p in PASSES],
    description=f"ssmviz's own Mamba-3 SISO kernels ({SHADER})",
    host="mamba3",
    shader=SHADER,
    constraints=["d_state % 2 == 0"],  # rotary pairs (the size probe keeps to them)
    params_notes=[
        "reverse 1 runs workgroups in reverse order (race probe); total = workgroups of this "
        "dispatch; chunk_len is clamped to seq_len; the linear workgroup id is "
        "wid.x + wid.y * num_workgroups.x; store_states 0 leaves chunk_states unwritten",
    ],
)


# -- how external profiles name Mamba-3's tensors ---------------------------------------------


def derive(sizes: dict[str, int]) -> dict[str, int]:
    """d_inner = n_heads·d_head, n_chunks and chunk_slot from the sizes (checked)."""
    if sizes["n_heads"] % sizes["n_groups"]:
        raise SsmvizError(f"n_heads ({sizes['n_heads']}) must be divisible by n_groups "
                          f"({sizes['n_groups']})")
    out = dict(sizes)
    out.setdefault("n_angles", out["d_state"] // 2)
    out["d_inner"] = out["n_heads"] * out["d_head"]
    out["n_chunks"] = -(-out["seq_len"] // out["chunk_len"])
    out["chunk_slot"] = out["n_chunks"] + 1
    out["re_im"] = 2
    return out


#: builderforce complex_ssd's own tensors (its other ones share mamba's names and axes):
#: A_log holds [log|A|, arg A] per head, re_im = 2; dt is raw there (Δ = softplus(dt + dt_bias)).
COMPLEX_SSD_AXES: dict[str, tuple[str, ...]] = {
    "A_log": ("n_heads", "re_im"), "dA_log": ("n_heads", "re_im"),
    "dt_bias": ("n_heads",), "ddt_bias": ("n_heads",),
}
#: mamba's Z: out = y·silu(z), z shaped like y (``convention.gate = "silu"``).
GATE_AXES = dict.fromkeys(("z", "dz"), tuple(_BLHP))

ROLES = RoleSpec(
    axes={spec.name: tuple(spec.dims) for spec in BUFFERS.values() if spec.io != "scratch"}
    | COMPLEX_SSD_AXES | GATE_AXES,
    sizes=("batch", "seq_len", "d_inner", "n_heads", "d_head", "n_groups", "d_state",
           "n_angles", "chunk_len", "n_chunks", "chunk_slot", "re_im"),
    defaults={"batch": 1, "seq_len": 37, "n_heads": 4, "d_head": 4, "n_groups": 2,
              "d_state": 8, "chunk_len": 8},
    derive=derive,
    split={"d_inner": ("n_heads", "d_head")},
    findings=complex_ssd.findings,
    extra_inputs={"z": "dz"},
)
