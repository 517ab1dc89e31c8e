"""What a GPU submission is made of: compute passes (:class:`Dispatch`), buffers to read
back (:class:`Readback`), the time a submission took (:class:`TimedResult`), the staging
and timestamp queries kept between submissions (:class:`SubmitCache`), the poison pattern
of unwritten outputs and the folding of a long workgroup grid."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ssmviz.core.errors import LimitError

#: Quiet-NaN bit pattern written into outputs before a dispatch; an element that
#: still holds it afterwards was never written by the kernel.
POISON_U32 = 0x7FC0DEAD


@dataclass
class Dispatch:
    """One compute pass: a pipeline, its bind group 0 and the workgroup grid."""

    pipeline: Any
    bindings: dict[int, Any]
    workgroups: tuple[int, int, int]
    label: str = ""
    # The bind group made on first encode and what it was made of (pipeline, then the
    # bound buffers): repeated runs of a dispatch list skip create_bind_group.
    _group: Any = field(default=None, init=False, repr=False, compare=False)
    _group_of: tuple = field(default=(), init=False, repr=False, compare=False)

    def bind_group(self, device: Any) -> Any:
        """Bind group 0 over ``bindings``; made once and reused while the pipeline and the
        bound buffers stay the same objects."""
        items = sorted(self.bindings.items())
        keys = tuple(k for k, _ in items)
        bufs = tuple(buf for _, buf in items)
        if self._group is not None:
            pipeline, old_keys, old_bufs = self._group_of
            if (
                pipeline is self.pipeline
                and old_keys == keys
                and all(a is b for a, b in zip(old_bufs, bufs, strict=True))
            ):
                return self._group
        group = device.create_bind_group(
            layout=self.pipeline.get_bind_group_layout(0),
            entries=[
                {"binding": k, "resource": {"buffer": buf, "offset": 0, "size": buf.size}}
                for k, buf in items
            ],
        )
        # Holding the buffers keeps them (and their ids) alive while the group is cached.
        self._group, self._group_of = group, (self.pipeline, keys, bufs)
        return group


class Readback(NamedTuple):
    """One buffer to read back: ``prod(shape)`` elements (all without a shape) from byte
    ``offset`` on (a multiple of 4)."""

    buffer: Any
    dtype: Any = np.float32
    shape: Sequence[int] | None = None
    offset: int = 0


@dataclass
class TimedResult:
    """GPU time of a submission; ``source`` says how it was measured."""

    seconds: float = 0.0
    per_dispatch: list[float] = field(default_factory=list)
    source: str = "untimed"  # "gpu-timestamps" | "wall-clock" | "untimed"


class SubmitCache:
    """The staging buffer and timestamp queries of one submission, kept for the next
    submission of the same sizes (a prepared problem's repeated runs) instead of being made
    and destroyed each time. Use from one thread at a time; :meth:`destroy` frees them."""

    def __init__(self) -> None:
        self.staging: Any = None
        self.query_set: Any = None
        self.resolve: Any = None
        self.n_queries = 0

    def destroy(self) -> None:
        """Free what is held; the next submission makes new ones."""
        for obj in (self.staging, self.query_set, self.resolve):
            if obj is not None:
                obj.destroy()
        self.staging = self.query_set = self.resolve = None
        self.n_queries = 0



def split_workgroups(total: int, limit: int = 65535) -> tuple[int, int, int]:
    """Fold a 1-D workgroup count into ``(x, y, 1)`` with ``x * y >= total``.

    Kernels recover the linear id as ``wid.x + wid.y * num_workgroups.x`` and
    must guard ids ``>= total``.
    """
    total = max(int(total), 1)
    if total <= limit:
        return (total, 1, 1)
    y = -(-total // limit)
    if y > limit:
        raise LimitError(
            f"dispatch needs {total} workgroups, more than max-compute-workgroups-per-dimension"
            f"² = {limit * limit} (exceeded by {total - limit * limit})"
        )
    x = -(-total // y)
    return (x, y, 1)

