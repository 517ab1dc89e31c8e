"""The one ABI schema: how a kernel's passes are bound and dispatched, as plain data.

ssmviz's own kernels (each family's ``abi.py``), the builderforce kernels (each family's
``builderforce.py``) and users' TOML profiles (parsed by
:mod:`ssmviz.core.external.profiles`, see ``assets/profiles/example.toml``) are all
:class:`AbiProfile` records. A profile names the family and numerical convention, the
params struct (u32 fields, each a formula over the sizes), every buffer (its roles, its
axes, whether it is an input, an output that is overwritten (filled with poison first) or
accumulated (zeroed first), or scratch) and the passes (entry point, workgroup size,
dispatch as formulas of the sizes, binding index -> buffer).

A profile with ``host`` set is run by that family's own host code, which plans the
dispatches itself (multi-level scans whose per-dispatch offsets no static formula
describes): its passes' ``dispatch`` and its buffers' ``dims`` are then documentation
(``rule``, ``layout``), read by the static checks and the tests, never evaluated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ssmviz.core.expr import evaluate, holds

if TYPE_CHECKING:
    from ssmviz.core.families.family import Family

STAGES = ("forward", "backward")
#: How a pass touches a binding: read only; every element it owns written, never read
#: first; read, then overwritten by the same invocation; written and read (scratch).
ACCESS_MODES = ("read", "overwrite", "read-modify-write", "read_write")


@dataclass
class BufferSpec:
    """One buffer: ``roles`` (one, or several stacked on a leading axis) and its axes.

    ``layout``: the buffer's layout in words where ``dims`` cannot say it (ssmviz's own
    kernels: B and C as zero-padded vec4 rows, scratch of a multi-level scan).
    """

    name: str
    roles: list[str]
    dims: list[str]
    io: str  # "in" | "out" | "scratch"
    init: str = "poison"  # outputs/scratch: "poison" (overwritten) | "zero" (accumulated)
    zero_leading: str | None = None  # formula: leading elements zeroed (e.g. an initial state)
    stage: str = "forward"  # the stage that writes it (outputs / scratch)
    layout: str = ""
    # -- layouts a user's profile may give (:mod:`ssmviz.core.external.layouts`) --------
    #: The GPU buffer (an ``[arenas]`` entry) this tensor lives in, at element ``offset``
    #: (a formula over the sizes and ``params[i]``, the params struct's field i).
    arena: str | None = None
    offset: str = "0"
    #: Stacked roles interleaved on the last axis ((a, b) pairs) rather than leading.
    interleave: bool = False
    #: Role axes the buffer does not have: the inputs are made constant along them.
    constant: tuple[str, ...] = ()
    #: io "inout": the role whose values the buffer holds before the run (in place).
    initial: str | None = None
    #: "f32", "u32" or "i32"; ``fill``: given contents, a formula over the flat index i.
    dtype: str = "f32"
    fill: str | None = None
    #: An integer buffer mapping each batch element to a slot of this buffer's first axis.
    slots: str | None = None


@dataclass
class PassSpec:
    """One pass: ``bindings`` maps binding index -> buffer name ("params" = the params
    struct); ``access`` the same indices -> one of :data:`ACCESS_MODES` (documented for
    ssmviz's own kernels; empty for profiles, whose buffers' ``io`` says it).
    ``overrides``: the WGSL override constants its pipelines set; ``rule``, ``does``: its
    dispatch and its work in words."""

    entry: str
    stage: str  # "forward" | "backward"
    workgroup_size: tuple[int, int, int] | None
    dispatch: list[str]  # 3 formulas, or 1 formula folded by split_workgroups
    bindings: dict[int, str]
    export: str | None = None  # glob of the export holding this entry (JS modules)
    access: dict[int, str] = field(default_factory=dict)
    overrides: tuple[str, ...] = ()
    #: A profile's override values: constant name -> formula over the sizes.
    constants: dict[str, str] = field(default_factory=dict)
    workgroup_storage_bytes: int = 0
    rule: str = ""
    does: str = ""

    @property
    def storage_buffers(self) -> int:
        """Storage buffers the pass binds (every binding but the params uniform)."""
        return sum(name != "params" for name in self.bindings.values())


@dataclass
class AbiProfile:
    name: str
    #: The family's record (a profile file names it; the external checks read the record).
    #: None only in a family's own ABI module, which its record is made from: the
    #: registry's built-in profiles carry the record (``external.profiles``).
    family: Family | None
    convention: str | None  # None: the kernel takes the convention as a param
    params: list[str]
    params_binding: int
    sizes: dict[str, str]
    buffers: dict[str, BufferSpec]
    passes: list[PassSpec]
    detect_entry_points: list[str] = field(default_factory=list)
    detect_exports: list[str] = field(default_factory=list)
    not_checked: dict[str, str] = field(default_factory=dict)
    description: str = ""
    tolerance: dict[str, float] = field(default_factory=dict)
    stages: tuple[str, ...] = STAGES
    #: A family's name: its own host code plans and dispatches the passes (their params
    #: hold per-dispatch offsets of a multi-level scan that no static formula describes);
    #: the profile then serves the static checks and the source runs under that host code.
    host: str | None = None
    #: The WGSL file under shaders/ (ssmviz's own kernels).
    shader: str = ""
    #: What the params fields and the override constants mean.
    params_notes: list[str] = field(default_factory=list)
    #: The parameters of ``convention`` (a :class:`~ssmviz.core.reference.conventions.
    #: Convention`); None: the named preset's.
    convention_params: Any = None
    #: Arena buffers (several tensors at offsets in one binding): name -> size formula
    #: ("" = up to the end of the last tensor in it).
    arenas: dict[str, str] = field(default_factory=dict)
    #: Values the host fills into a templated source: name -> formula, or a bool.
    defines: dict[str, str | bool] = field(default_factory=dict)
    #: Conditions over the sizes the kernel needs (see :func:`ssmviz.core.expr.holds`),
    #: e.g. "d_state == 16", "seq_len <= 256", "is_pow2(d_state)"; all must hold.
    constraints: list[str] = field(default_factory=list)

    def violated(self, sizes: Mapping[str, int]) -> str | None:
        """The first constraint ``sizes`` (with the profile's derived sizes) break, else
        None."""
        for cond in self.constraints:
            if not holds(cond, sizes):
                return cond
        return None

    def sizes_for(self, base: Mapping[str, int]) -> dict[str, int]:
        """The base sizes plus the profile's derived sizes, in order."""
        out = dict(base)
        for name, formula in self.sizes.items():
            out[name] = evaluate(formula, out)
        return out

    def entry_points(self) -> list[str]:
        return [p.entry for p in self.passes]

    def pass_named(self, entry: str) -> PassSpec:
        """The pass of ``entry`` (KeyError when there is none)."""
        for p in self.passes:
            if p.entry == entry:
                return p
        raise KeyError(entry)

    @property
    def storage_buffers_per_stage(self) -> int:
        """The most storage buffers one pass binds (the device limit every pass needs)."""
        return max((p.storage_buffers for p in self.passes), default=0)

    @property
    def workgroup_storage_bytes(self) -> int:
        """The most workgroup memory one pass declares."""
        return max((p.workgroup_storage_bytes for p in self.passes), default=0)
