"""SSD's sizes, declared once: every other list of them (the problem's fields, the CLI's
flags, the app's controls, an inputs archive's meta, the limits) is read from here.
d_inner = n_heads·d_head; chunk_len is a run size (the arrays' shapes do not carry it)."""

from __future__ import annotations

from collections.abc import Mapping

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.sizes import Size, SizeSet


def check_heads(sizes: Mapping[str, int]) -> None:
    """n_heads must be divisible by n_groups (each group's B and C serve whole heads)."""
    if sizes["n_heads"] % sizes["n_groups"] != 0:
        raise SsmvizError(f"n_heads ({sizes['n_heads']}) must be divisible by n_groups "
                          f"({sizes['n_groups']})")


SIZES = SizeSet((
    Size("batch", 1, 4096, help="independent sequences"),
    Size("seq_len", 256, 1 << 26, help="steps of the scan"),
    Size("d_inner", None, 1 << 16, product_of=("n_heads", "d_head")),
    Size("d_state", 16, 256, help="state size per group"),
    Size("n_heads", 4, 4096, help="SSD heads"),
    Size("d_head", 16, 1024, help="SSD channels per head"),
    Size("n_groups", 1, 4096, help="SSD groups of heads sharing B and C"),
    Size("chunk_len", 64, 4096, run=True, help="SSD chunk length"),
), constraints=check_heads)
