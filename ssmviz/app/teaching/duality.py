"""The SSD duality view: why chunking works.

Top: M = L ∘ (C·B̄ᵀ) with the mask L and C·B̄ᵀ beside M. Middle: a chosen block below the
diagonal, its singular values (at most d_state of them are not ~0: the block is a
(Q × d_state)·(d_state × Q) product) and the chunk states. Bottom: y and the share of it
that one step of the chunked algorithm computes (diagonal blocks, chunk states, state
passing, state → output); choosing a step outlines the blocks of M it uses. Numbers from
:mod:`ssmviz.core.families.ssd.duality` (float64, off the UI thread).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QComboBox, QLabel

from ssmviz.app.derived import Selection, sizes_of
from ssmviz.app.plots import Line, Plot, cache_static, heatmap_item, quiet_axes, show_image
from ssmviz.app.runner import RunResult
from ssmviz.app.scales import ColourBar, integer_axes
from ssmviz.app.teaching import teaching_for
from ssmviz.app.teaching.base import CURSOR_COLOUR, REF_COLOUR, TeachingView
from ssmviz.app.teaching.chunks import block_rects
from ssmviz.app.teaching.items import Blocks, ChunkGrid, MatrixImage, MatrixPlot, matrix_view
from ssmviz.app.viewdata import DIFF_CMAP, VALUE_CMAP, ImageView, image_view, robust_levels
from ssmviz.core.families.ssd.duality import STEPS, Duality

#: The step's share of y, and the block outline.
STEP_COLOUR = (44, 160, 44)
BLOCK_COLOUR = (214, 39, 40)
#: The block selector lists at most this many blocks (the nearest to the diagonal first).
MAX_BLOCK_CHOICES = 64
#: What each step computes, for the message line.
STEP_TEXT = {
    "all": "y = y_diag + y_off: every block of M",
    "diag": "step 1 · diagonal blocks: y_diag = (M on the diagonal blocks)·x + D·x, an "
            "ordinary (quadratic) attention inside each chunk",
    "states": "step 2 · chunk states: each chunk's state S_c from its own inputs "
              "(d_state numbers); read out in the next chunk they give the first blocks "
              "below the diagonal",
    "passing": "step 3 · state passing: H_{c+1} = exp(Σ a over chunk c)·H_c + S_c carries "
               "the states past one chunk: the blocks further below",
    "output": "step 4 · state → output: y_off_i = exp(a_{t0} + … + a_i)·C_i·H_c, every "
              "block below the diagonal (steps 2 + 3)",
}


@dataclass
class DualityData:
    """The view's numbers: the core's :class:`Duality` plus its images."""

    d: Duality
    channel: int
    seq_len: int
    images: dict[str, ImageView]
    block_image: ImageView | None
    states_image: ImageView
    step_rects: dict[str, list[tuple[float, float, float, float]]]
    block_rect: tuple[float, float, float, float] | None
    summary: str


def block_choices(n_chunks: int) -> list[tuple[int, int]]:
    """The blocks (r, c), r > c, the selector offers: nearest the diagonal first."""
    pairs = [(c + k, c) for k in range(1, n_chunks) for c in range(n_chunks - k)]
    return pairs[:MAX_BLOCK_CHOICES]


def duality_data(result: RunResult, sel: Selection, block: tuple[int, int] | None
                 ) -> DualityData:
    """The view's numbers for ``result`` and ``sel`` (worker thread)."""
    p = result.problem
    tc = teaching_for(p.family, "duality")
    s = sizes_of(p.family, result.inputs)
    L, P = s["seq_len"], s["d_head"]
    head, pos = sel.channel // P, sel.channel % P
    if block is not None and block[0] * p.chunk_len >= L:
        block = None  # a block of a longer problem: the default one
    d: Duality = tc.duality(result.inputs, convention=p.convention, chunk_len=p.chunk_len,
                            head=head, position=pos, block=block)
    ext = (float(L), float(L))
    m_iv = matrix_view(d.M, cmap=DIFF_CMAP, symmetric=True, extent=ext)
    images = {
        "mask": matrix_view(d.mask, cmap=VALUE_CMAP, levels=(0.0, 1.0), extent=ext),
        "cb": matrix_view(np.tril(d.cb), cmap=DIFF_CMAP, symmetric=True, extent=ext),
        "M": m_iv,
    }
    f = d.factors
    block_iv = block_rect = None
    if f is not None:
        block_iv = matrix_view(f.block, cmap=DIFF_CMAP, symmetric=True)
        block_rect = (float(f.cols.start), float(f.rows.start),
                      float(f.cols.stop - f.cols.start), float(f.rows.stop - f.rows.start))
    states_iv = image_view(d.states, symmetric=True,
                           levels=robust_levels(d.states, symmetric=True))
    rects = {k: block_rects(b, d.chunk_len, L) for k, b in d.step_blocks.items()}
    parts = [f"batch element 0, head {head}, position {pos} (channel {sel.channel}); "
             f"chunk_len {d.chunk_len}: {d.n_chunks} chunks, d_state {d.d_state}"]
    if f is not None:
        parts.append(f"block ({f.r}, {f.c}) has rank {f.rank} ≤ d_state {d.d_state} "
                     f"(σ_{d.d_state + 1}/σ_1 = "
                     + (f"{f.singular[d.d_state] / f.singular[0]:.1e})"
                        if f.singular.size > d.d_state and f.singular[0] > 0 else "—)"))
    else:
        parts.append("one chunk: no block below the diagonal")
    return DualityData(d, sel.channel, L, images, block_iv, states_iv, rects, block_rect,
                       "; ".join(parts))


class DualityView(TeachingView):
    """M = L ∘ (C·B̄ᵀ), a factored block with its singular values, the chunk states, and y
    with one step's share."""

    name = "duality"

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.tools.addWidget(QLabel("step:"))
        self.step_box = QComboBox()
        self.step_box.addItem("all: y = y_diag + y_off", "all")
        for key, label in STEPS.items():
            self.step_box.addItem(label, key)
        self.step_box.setToolTip("one step of the chunked algorithm: the blocks of M it uses "
                                 "and its share of y")
        self.step_box.currentIndexChanged.connect(lambda _i: self._show_step())
        self.tools.addWidget(self.step_box)
        self.tools.addWidget(QLabel("block:"))
        self.block_box = QComboBox()
        self.block_box.setToolTip("the block below the diagonal (row chunk, column chunk) "
                                  "that is factored")
        self.block_box.currentIndexChanged.connect(lambda _i: self._block_chosen())
        self.tools.addWidget(self.block_box)
        self.tools.addStretch(1)
        self._block: tuple[int, int] | None = None
        ci = self.plots.ci
        self.maps: dict[str, MatrixPlot] = {}
        self.images: dict[str, MatrixImage] = {}
        self.bars: dict[str, ColourBar] = {}
        for col, (key, title) in enumerate((("mask", "L (decays)"), ("cb", "C·B̄ᵀ"),
                                            ("M", "M = L ∘ C·B̄ᵀ"))):
            p = MatrixPlot(title=title)
            ci.addItem(p, row=0, col=col)
            integer_axes(p, "left", "bottom", cells=True)
            p.setMinimumHeight(150)
            img = MatrixImage()
            p.addItem(img)
            grid = ChunkGrid()
            p.addItem(grid)
            p.ssmviz_grid = grid
            p.sigRowClicked.connect(self.cursorRequested)
            if col:
                p.setXLink(self.maps["mask"])
                p.setYLink(self.maps["mask"])
            self.maps[key], self.images[key] = p, img
            self.bars[key] = ColourBar(p, title)
        self.step_blocks = Blocks(STEP_COLOUR)
        self.block_outline = Blocks(BLOCK_COLOUR)
        self.maps["M"].addItem(self.step_blocks)
        self.maps["M"].addItem(self.block_outline)
        self.block_plot = MatrixPlot(title="the block")
        ci.addItem(self.block_plot, row=1, col=0)
        integer_axes(self.block_plot, "left", "bottom", cells=True)
        self.block_image = MatrixImage()
        self.block_plot.addItem(self.block_image)
        self.bars["block"] = ColourBar(self.block_plot, "the block")
        self.sv_plot = Plot(title="its singular values")
        ci.addItem(self.sv_plot, row=1, col=1)
        self.sv_plot.setLogMode(y=True)
        self.sv_plot.setLabel("bottom", "k")
        integer_axes(self.sv_plot, "bottom")
        self.sv_plot.getAxis("bottom").setLabel("k")
        self.sv = pg.ScatterPlotItem(size=7, pen=pg.mkPen(None), brush=pg.mkBrush(BLOCK_COLOUR),
                                     hoverable=True,
                                     tip=lambda x, y, data: f"σ_{x:.0f} = {10 ** y:.3g}")
        self.sv_plot.addItem(self.sv)
        self.rank_line = pg.InfiniteLine(angle=90, movable=False,
                                         pen=pg.mkPen((80, 80, 80), width=1,
                                                      style=pg.QtCore.Qt.PenStyle.DashLine),
                                         label="d_state", labelOpts={"position": 0.9})
        self.sv_plot.addItem(self.rank_line, ignoreBounds=True)
        self.states_plot = Plot(title="chunk states H")
        ci.addItem(self.states_plot, row=1, col=2)
        self.states_plot.setLabel("left", "state")
        self.states_plot.setLabel("bottom", "chunk slot")
        integer_axes(self.states_plot, "left", "bottom", cells=True)
        self.states_image = heatmap_item()
        self.states_plot.addItem(self.states_image)
        self.bars["states"] = ColourBar(self.states_plot, "chunk states H")
        self.y_plot = Plot(title="y (orange) and the step's share (green)")
        ci.addItem(self.y_plot, row=2, col=0, colspan=3)
        self.y_plot.setLabel("bottom", "time step t")
        integer_axes(self.y_plot, "bottom")
        self.y_curve = Line(pen=pg.mkPen(REF_COLOUR, width=1.5))
        self.share_curve = Line(pen=pg.mkPen(STEP_COLOUR, width=1.5))
        self.y_plot.addItem(self.y_curve)
        self.y_plot.addItem(self.share_curve)
        self.cursor_line = pg.InfiniteLine(angle=90, movable=False,
                                           pen=pg.mkPen(CURSOR_COLOUR, width=1))
        self.y_plot.addItem(self.cursor_line, ignoreBounds=True)
        self.y_plot.sigClicked.connect(lambda x: self.cursorRequested.emit(round(x)))
        self.y_plot.setMinimumHeight(110)
        for r, k in ((0, 3), (1, 2), (2, 2)):
            ci.layout.setRowStretchFactor(r, k)
        plots = [*self.maps.values(), self.block_plot, self.sv_plot, self.states_plot,
                 self.y_plot]
        quiet_axes(plots)
        cache_static(plots)

    @property
    def step(self) -> str:
        return str(self.step_box.currentData())

    def options(self) -> tuple[int, int] | None:
        return self._block

    def _block_chosen(self) -> None:
        text = self.block_box.currentData()  # "r,c" (Qt keeps no Python tuple)
        block = tuple(int(v) for v in text.split(",")) if text else None
        if block != self._block:
            self._block = block
            self.optionsChanged.emit()

    @staticmethod
    def prepare(result: RunResult, sel: Selection, options: object) -> DualityData:
        return duality_data(result, sel, options)

    def show_data(self, data: DualityData) -> None:
        self.data = data
        d = data.d
        L = float(data.seq_len)
        for key, p in self.maps.items():
            self.images[key].show(data.images[key])
            self.bars[key].show_view(data.images[key])
            p.ssmviz_grid.set_grid(data.seq_len, d.chunk_len)
            p.setRange(xRange=(0, L), yRange=(0, L), padding=0.0)
        self._fill_blocks(d)
        f = d.factors
        self.bars["block"].show_view(data.block_image)
        if f is None:
            self.block_image.clear()
            self.sv.setData([], [])
            self.block_outline.set_blocks([])
        else:
            self.block_image.show(data.block_image)
            w, h = data.block_image.extent
            self.block_plot.setRange(xRange=(0, w), yRange=(0, h), padding=0.0)
            self.block_plot.setTitle(f"({f.r},{f.c}): rank {f.rank}")
            k = np.arange(1, f.singular.size + 1, dtype=np.float64)
            floor = max(float(f.singular[0]) * 1e-17, 1e-300)
            self.sv.setData(k, np.log10(np.maximum(f.singular, floor)))
            self.rank_line.setValue(d.d_state + 0.5)
            self.sv_plot.setXRange(0.5, f.singular.size + 0.5, padding=0.0)
            self.block_outline.set_blocks([data.block_rect])
        show_image(self.states_image, data.states_image)
        self.bars["states"].show_view(data.states_image)
        sw, sh = data.states_image.extent
        self.states_plot.setRange(xRange=(0, sw), yRange=(0, sh), padding=0.0)
        self._show_step()
        self.set_cursor(self.cursor)

    def _fill_blocks(self, d: Duality) -> None:
        choices = block_choices(d.n_chunks)
        keys = [f"{r},{c}" for r, c in choices]
        if [self.block_box.itemData(i) for i in range(self.block_box.count())] == keys:
            return
        self.block_box.blockSignals(True)
        self.block_box.clear()
        for (r, c), key in zip(choices, keys, strict=True):
            self.block_box.addItem(f"({r}, {c})", key)
        if d.factors is not None:
            self.block_box.setCurrentIndex(max(0, self.block_box.findData(
                f"{d.factors.r},{d.factors.c}")))
        self.block_box.blockSignals(False)
        self.block_box.setEnabled(bool(choices))

    def _show_step(self) -> None:
        data = self.data
        if data is None:
            return
        d, step = data.d, self.step
        t = np.arange(data.seq_len, dtype=np.float64)
        self.y_curve.setData(t, d.y)
        if step == "all":
            self.share_curve.setData([], [])
            self.step_blocks.set_blocks([])
            self.y_plot.setTitle("y (orange) = y_diag + y_off")
        else:
            share = d.shares[step]
            self.share_curve.setData(t, share)
            self.step_blocks.set_blocks(data.step_rects[step])
            part = float(np.linalg.norm(share)) / max(float(np.linalg.norm(d.y)), 1e-300)
            self.y_plot.setTitle(f"y (orange) and {STEPS[step]}'s share (green, its blocks "
                                 f"outlined in M): ‖share‖/‖y‖ = {part:.2g}")
        self.show_message(f"{data.summary}. {STEP_TEXT[step]}.")

    def set_cursor(self, t: int) -> None:
        super().set_cursor(t)
        if self.data is not None:
            self.cursor_line.setValue(min(max(self.cursor, 0), self.data.seq_len - 1))
