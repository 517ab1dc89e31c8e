"""Per-tensor layouts of a user's profile: canonical arrays <-> the kernel's GPU buffers.

A tensor (:class:`~ssmviz.core.families.abi.BufferSpec`) holds one role, or several
stacked on a leading axis (``interleave``: on the last axis, as (a, b) pairs). Its
``dims`` are its axes in its own order (any permutation of the role's axes; SSD's
d_inner may stand for n_heads × d_head). Besides:

- ``constant``: role axes the tensor lacks (B constant over time): inputs are made
  constant along them before the reference runs, and the tensor holds index 0;
- axes in ``dims`` that the role lacks (B per channel): an input is repeated along them;
- ``slots``: the batch axis goes through an integer buffer, element b of the role living
  at index ``slots[b]`` of the tensor's pool axis (the one axis of ``dims`` the role
  lacks, in place of batch);
- ``arena``/``offset``: the tensor lives at an element offset inside a GPU buffer shared
  with others (an ``[arenas]`` entry); ``offset`` is a formula over the sizes that may
  name ``params[i]``, the params struct's field i;
- ``dtype``/``fill``: a u32/i32 (or f32) buffer with given contents, a formula over the
  flat index ``i``;
- io ``inout``: a buffer that is an input and an output. Its input roles are uploaded,
  its output roles poisoned (or zeroed) and judged; ``initial`` names the role a
  single-role tensor holds before the run (in place: h0 in, last_state out).

Everything here is host-side numpy (:mod:`.execute` allocates and dispatches), down to
the labels of the tensors read back (:func:`tensor_label`: ``out_buf (y)``, ``h_cache[h]``).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ssmviz.core import families
from ssmviz.core.dispatch import POISON_U32
from ssmviz.core.errors import SsmvizError
from ssmviz.core.expr import evaluate
from ssmviz.core.families.abi import AbiProfile, BufferSpec

#: Elements a ``fill`` formula is evaluated for, at most (given contents are small).
MAX_FILL = 1 << 16

_PARAMS_REF = re.compile(r"params\[(\d+)\]")


def input_roles(family: families.Family) -> set[str]:
    """Roles a buffer uploads by default: the family's inputs and its extra inputs."""
    return family.every_input | set(family.roles.extra_inputs)


def uploaded(prof: AbiProfile, spec: BufferSpec) -> list[str]:
    """The roles of ``spec`` whose values are uploaded before the run."""
    if spec.io == "in":
        return list(spec.roles)
    if spec.io == "inout":
        ins = input_roles(prof.family)
        return [r for r in spec.roles if r in ins]
    return []


def judged(prof: AbiProfile, spec: BufferSpec) -> list[str]:
    """The roles of ``spec`` read back and compared with the reference."""
    if spec.io not in ("out", "inout"):
        return []
    up = set(uploaded(prof, spec))
    return [r for r in spec.roles if r not in up and r != "scratch"]


def formula_with_params(prof: AbiProfile, text: str) -> str:
    """``text`` with each ``params[i]`` replaced by field i's formula (in parentheses)."""
    def sub(m: re.Match[str]) -> str:
        i = int(m.group(1))
        if i >= len(prof.params):
            raise SsmvizError(f"'{text}': params[{i}] does not exist (the params struct has "
                              f"{len(prof.params)} fields)")
        return f"({prof.params[i]})"
    return _PARAMS_REF.sub(sub, text)


def eval_with_params(prof: AbiProfile, text: str, sizes: Mapping[str, int]) -> int:
    env = dict(sizes) | {"total": 0, "convention": 0, "reverse": 0}
    return evaluate(formula_with_params(prof, text), env)


# -- one role's layout ---------------------------------------------------------------------------


def _axes(prof: AbiProfile, spec: BufferSpec, role: str) -> tuple[list[str], list[str], str | None]:
    """(the role's axes left after ``constant``, the tensor's axes with splits expanded,
    the pool axis standing for batch under ``slots``)."""
    from ssmviz.core.external.profiles import expanded_dims, role_axes

    want = [a for a in role_axes(prof.family)[role] if a not in spec.constant]
    exp = expanded_dims(prof.family, spec.dims, tuple(want))
    pool = None
    if spec.slots is not None:
        extra = [a for a in exp if a not in want]
        pool = extra[0] if extra else None
    return want, exp, pool


def part_shape(spec: BufferSpec, sizes: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(evaluate(d, sizes) for d in spec.dims)


def tensor_shape(spec: BufferSpec, sizes: Mapping[str, int]) -> tuple[int, ...]:
    """The tensor's shape: its dims, with stacked roles leading (or last, interleaved)."""
    dims = part_shape(spec, sizes)
    n = len(spec.roles)
    if n == 1 or spec.roles == ["scratch"]:
        return dims
    return (*dims, n) if spec.interleave else (n, *dims)


def _encode_role(prof: AbiProfile, spec: BufferSpec, role: str, value: np.ndarray,
                 sizes: Mapping[str, int], slots: np.ndarray | None) -> np.ndarray:
    """A canonical float64 array of ``role`` -> its part of the tensor, in the tensor's
    axes (float64)."""
    from ssmviz.core.external.profiles import role_axes

    full = list(role_axes(prof.family)[role])
    arr = np.asarray(value, np.float64)
    for ax in spec.constant:  # the runner made the inputs constant along it
        i = full.index(ax)
        arr = arr.take(0, axis=i)
        full.pop(i)
    want, exp, pool = _axes(prof, spec, role)
    src_axes = [pool if (a == "batch" and pool) else a for a in want]
    arr = arr.transpose([src_axes.index(a) for a in exp if a in src_axes])
    present = [a for a in exp if a in src_axes]
    if pool is not None:
        assert slots is not None
        ax = present.index(pool)
        shape = list(arr.shape)
        shape[ax] = sizes[pool]
        out = np.zeros(shape)
        idx = [slice(None)] * arr.ndim
        idx[ax] = slots
        out[tuple(idx)] = arr
        arr = out
    for pos, a in enumerate(exp):
        if a not in src_axes:
            arr = np.expand_dims(arr, pos)
    arr = np.broadcast_to(arr, tuple(sizes[a] for a in exp))
    return arr.reshape(part_shape(spec, sizes))


def _decode_role(prof: AbiProfile, spec: BufferSpec, role: str, part: np.ndarray,
                 sizes: Mapping[str, int], slots: np.ndarray | None) -> np.ndarray:
    """A part of the tensor read back -> the canonical array of ``role`` (its dtype kept)."""
    want, exp, pool = _axes(prof, spec, role)
    arr = part.reshape(tuple(sizes[a] for a in exp))
    if pool is not None:
        assert slots is not None
        arr = arr.take(slots, axis=exp.index(pool))
        exp = ["batch" if a == pool else a for a in exp]
    return np.ascontiguousarray(arr.transpose([exp.index(a) for a in want]))


def _parts(spec: BufferSpec, tensor: np.ndarray) -> list[np.ndarray]:
    if len(spec.roles) == 1:
        return [tensor]
    return [tensor[..., k] for k in range(len(spec.roles))] if spec.interleave \
        else list(tensor)


# -- GPU buffers -------------------------------------------------------------------------------


@dataclass
class GpuBuffer:
    """One binding's buffer: the tensors in it (name -> element offset) and its size."""

    name: str
    elements: int
    tensors: dict[str, int] = field(default_factory=dict)
    dtype: str = "f32"


def gpu_buffers(prof: AbiProfile, bound: set[str], sizes: Mapping[str, int]
                ) -> dict[str, GpuBuffer]:
    """The buffers the bound names need (a tensor, or an arena of several), with every
    tensor's offset; SsmvizError when tensors of one arena overlap or pass its size."""
    out: dict[str, GpuBuffer] = {}
    for name in sorted(bound):
        if name in prof.arenas:
            members = [s for s in prof.buffers.values() if s.arena == name]
            gb = GpuBuffer(name, 0)
        else:
            members = [prof.buffers[name]]
            gb = GpuBuffer(name, 0, dtype=prof.buffers[name].dtype)
        spans = []
        for spec in members:
            off = eval_with_params(prof, spec.offset, sizes)
            n = int(np.prod(tensor_shape(spec, sizes)))
            if off < 0:
                raise SsmvizError(f"buffers.{spec.name}.offset = {off} is negative")
            gb.tensors[spec.name] = off
            spans.append((off, off + n, spec.name))
        spans.sort()
        for (_, end, a), (start, _, b) in itertools.pairwise(spans):
            if start < end:
                raise SsmvizError(f"buffers.{b}.offset: it overlaps buffers.{a} in arena "
                                  f"'{name}' (element {start} < {end})")
        need = max((e for _, e, _ in spans), default=0)
        size = prof.arenas.get(name, "")
        gb.elements = eval_with_params(prof, size, sizes) if size else need
        if gb.elements < need:
            raise SsmvizError(f"arenas.{name}: size {gb.elements} < {need} elements, the end "
                              f"of buffers.{spans[-1][2]}")
        out[name] = gb
    return out


def given_contents(spec: BufferSpec, sizes: Mapping[str, int]) -> np.ndarray:
    """The ``fill`` contents of a tensor, flat (int64 for integer dtypes)."""
    n = int(np.prod(tensor_shape(spec, sizes)))
    if n > MAX_FILL:
        raise SsmvizError(f"buffers.{spec.name}.fill: {n} elements; given contents are "
                          f"evaluated for at most {MAX_FILL}")
    assert spec.fill is not None
    vals = [evaluate(spec.fill, dict(sizes) | {"i": i}) for i in range(n)]
    return np.array(vals, np.int64 if spec.dtype != "f32" else np.float64)


def slot_values(prof: AbiProfile, spec: BufferSpec, sizes: Mapping[str, int]) -> np.ndarray:
    """The slot of each batch element for a tensor with ``slots``: checked distinct and
    inside its pool axis."""
    assert spec.slots is not None
    src = prof.buffers[spec.slots]
    slots = given_contents(src, sizes).astype(np.int64)
    if slots.size != sizes["batch"]:
        raise SsmvizError(f"buffers.{spec.name}.slots: buffers.{spec.slots} holds "
                          f"{slots.size} values; one per batch element ({sizes['batch']}) needed")
    pool = next(a for a in _axes(prof, spec, spec.roles[0])[1]
                if a not in _axes(prof, spec, spec.roles[0])[0])
    if slots.min() < 0 or slots.max() >= sizes[pool] or len(set(slots.tolist())) != slots.size:
        raise SsmvizError(f"buffers.{spec.slots}.fill: the slots {slots.tolist()[:8]} must be "
                          f"distinct and in 0..{sizes[pool] - 1} ({pool})")
    return slots


def _bits(values: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "f32":
        return np.asarray(values, np.float32).view(np.uint32)
    return (np.asarray(values, np.int64) & 0xFFFFFFFF).astype(np.uint32)


def initial_contents(prof: AbiProfile, gb: GpuBuffer, values: Mapping[str, np.ndarray],
                     sizes: Mapping[str, int], produced: bool) -> np.ndarray | None:
    """The 32-bit words a buffer holds before the run, or None for a plain output filled
    on the GPU. ``produced``: its output roles are written by a stage that runs (else
    they are uploaded from ``values``, as a later stage's input)."""
    specs = [prof.buffers[t] for t in gb.tensors]
    if len(specs) == 1 and gb.name not in prof.arenas and specs[0].offset == "0" \
            and not uploaded(prof, specs[0]) and specs[0].fill is None \
            and specs[0].initial is None and produced:
        return None
    words = np.full(gb.elements, POISON_U32, np.uint32)
    for spec in specs:
        off = gb.tensors[spec.name]
        shape = tensor_shape(spec, sizes)
        n = int(np.prod(shape))
        if spec.fill is not None:
            words[off:off + n] = _bits(given_contents(spec, sizes), spec.dtype)
            continue
        slots = slot_values(prof, spec, sizes) if spec.slots else None
        ups = set(uploaded(prof, spec)) if produced else set(spec.roles) - {"scratch"}
        tensor = np.zeros(shape, np.float64)
        parts = _parts(spec, tensor)
        fill = np.zeros(shape, np.uint32) + (0 if spec.init == "zero" else POISON_U32)
        fparts = _parts(spec, fill)
        for k, role in enumerate(spec.roles):
            source = role if role in ups else (spec.initial if len(spec.roles) == 1 else None)
            if source is None:
                continue
            parts[k][...] = _encode_role(prof, spec, role, values[source], sizes, slots)
            fparts[k][...] = _bits(parts[k], "f32")
        if slots is not None and spec.io != "in":
            # Slots no batch element uses must come back unchanged: zeros, not poison.
            fill[fill == POISON_U32] = 0
        flat = fill.reshape(-1)
        if spec.zero_leading:
            flat[:max(0, min(evaluate(spec.zero_leading, sizes), n))] = 0
        words[off:off + n] = flat
    return words


def read_roles(prof: AbiProfile, gb: GpuBuffer, words: np.ndarray, sizes: Mapping[str, int]
               ) -> dict[str, dict[str, np.ndarray]]:
    """A buffer read back (uint32 words) -> tensor name -> judged role -> canonical float32."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for tname, off in gb.tensors.items():
        spec = prof.buffers[tname]
        roles = judged(prof, spec)
        if not roles:
            continue
        shape = tensor_shape(spec, sizes)
        n = int(np.prod(shape))
        tensor = words[off:off + n].view(np.float32).reshape(shape)
        slots = slot_values(prof, spec, sizes) if spec.slots else None
        parts = dict(zip(spec.roles, _parts(spec, tensor), strict=True))
        out[tname] = {r: _decode_role(prof, spec, r, parts[r], sizes, slots) for r in roles}
    return out


def make_constant(prof: AbiProfile, arrays: dict[str, np.ndarray]) -> None:
    """Make each input constant along the axes a tensor of it lacks (``constant``), in
    place: the value at index 0 is repeated."""
    from ssmviz.core.external.profiles import role_axes

    for spec in prof.buffers.values():
        for role in uploaded(prof, spec):
            if role not in arrays:
                continue
            axes = role_axes(prof.family)[role]
            for ax in spec.constant:
                i = axes.index(ax)
                first = np.take(arrays[role], [0], axis=i)
                arrays[role] = np.repeat(first, arrays[role].shape[i], axis=i)


def canonical(prof: AbiProfile, raw: Mapping[str, np.ndarray], sizes: Mapping[str, int]
              ) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    gbufs = gpu_buffers(prof, set(raw), sizes)
    for name, data in raw.items():
        for tname, roles in read_roles(prof, gbufs[name], data, sizes).items():
            spec = prof.buffers[tname]
            for role, arr in roles.items():
                out[tensor_label(spec, role)] = arr
    return out


def tensor_label(spec: BufferSpec, role: str) -> str:
    if len(spec.roles) > 1:
        return f"{spec.name}[{role}]"
    return spec.name if spec.name == role else f"{spec.name} ({role})"


def role_of_label(prof: AbiProfile, label: str) -> tuple[BufferSpec, str]:
    """The buffer and role behind a verdict / output label (``h_cache[h]`` → h_cache, h)."""
    for spec in prof.buffers.values():
        for role in spec.roles:
            if tensor_label(spec, role) == label:
                return spec, role
    raise KeyError(label)
