"""S6's sizes, declared once: every other list of them (the problem's fields, the CLI's
flags, the app's controls, an inputs archive's meta, the limits) is read from here."""

from __future__ import annotations

from ssmviz.core.families.sizes import Size, SizeSet

SIZES = SizeSet((
    Size("batch", 1, 4096, help="batch size"),
    Size("seq_len", 256, 1 << 26, help="sequence length"),
    Size("d_inner", 4, 1 << 16, help="channels (S6); SSD: must equal n_heads·d_head"),
    Size("d_state", 16, 256, help="state size N"),
))
