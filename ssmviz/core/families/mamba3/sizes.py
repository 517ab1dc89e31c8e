"""Mamba-3's sizes, declared once: every other list of them (the problem's fields, the
CLI's flags, the app's controls, an inputs archive's meta, the limits) is read from here.

Mamba's names: headdim_qk = d_state, headdim_v = d_head, nheads = n_heads, nheads_qk =
n_groups, chunk_size = chunk_len. d_inner = n_heads·d_head; chunk_len is a run size.
"""

from __future__ import annotations

from collections.abc import Mapping

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.sizes import Size, SizeSet
from ssmviz.core.families.ssd import sizes as ssd_sizes


def check_heads(sizes: Mapping[str, int]) -> None:
    """SSD's head grouping (n_heads divisible by n_groups); d_state even (its rotary pairs)."""
    ssd_sizes.check_heads(sizes)
    if sizes["d_state"] % 2:
        raise SsmvizError(f"d_state must be even for Mamba-3's rotary pairs; got "
                          f"{sizes['d_state']}")


SIZES = SizeSet((
    Size("batch", 1, 4096, help="independent sequences"),
    Size("seq_len", 256, 1 << 26, help="steps of the scan"),
    Size("d_inner", None, 1 << 16, product_of=("n_heads", "d_head")),
    Size("d_state", 16, 256, help="headdim_qk: state size per head"),
    Size("n_heads", 4, 4096, help="nheads"),
    Size("d_head", 16, 1024, help="headdim_v: channels per head"),
    Size("n_groups", 1, 4096, help="nheads_qk: groups of heads sharing B and C"),
    Size("chunk_len", 64, 4096, run=True, help="chunk_size"),
), constraints=check_heads)
