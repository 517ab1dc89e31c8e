"""The chunk decomposition view (SSD): y = Y_diag + Y_off, the blocks of M each part
uses, and the chunk states of the GPU's own buffer against the reference.

Y_diag is the intra-chunk part (the diagonal blocks of M, plus the D·x skip), Y_off the
inter-chunk part (the blocks below them, through the chunk states). For the selected
channel (its head and head position) of batch element 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg

from ssmviz.app.derived import Selection, sizes_of
from ssmviz.app.plots import Line, Plot, cache_static, heatmap_item, quiet_axes, show_image
from ssmviz.app.runner import RunResult
from ssmviz.app.scales import ColourBar, integer_axes
from ssmviz.app.teaching import teaching_for
from ssmviz.app.teaching.base import CURSOR_COLOUR, GPU_COLOUR, REF_COLOUR, TeachingView
from ssmviz.app.teaching.items import (
    BOUND_DETAIL,
    MAX_MATRIX_SIDE,
    Blocks,
    ChunkGrid,
    MatrixImage,
    MatrixPlot,
    RowBand,
    matrix_view,
)
from ssmviz.app.viewdata import DIFF_CMAP, ImageView, image_view, robust_levels
from ssmviz.core import operator as op
from ssmviz.core.check import FORWARD_TOL, element_bound

STATE_TITLES = {"ref": "ref chunk states", "gpu": "GPU chunk states",
                "diff": "GPU − reference"}
DIAG_COLOUR = (44, 160, 44)
OFF_COLOUR = (148, 103, 189)


@dataclass
class ChunksData:
    """One channel's decomposition: curves (seq_len,), blocks (x, y, w, h) in matrix
    units, M of its head for display, chunk-state heatmaps of its head position."""

    head: int
    position: int
    channel: int
    seq_len: int
    chunk_len: int
    n_chunks: int
    y: np.ndarray
    y_diag: np.ndarray
    y_off: np.ndarray
    y_gpu: np.ndarray | None
    diag_rects: list[tuple[float, float, float, float]]
    off_rects: list[tuple[float, float, float, float]]
    matrix: ImageView
    states: dict[str, ImageView]
    bad_slots: tuple[int, ...]
    summary: str
    #: check.compare's element bound: the difference map spans at least ± it.
    diff_bound: float = 0.0


def block_rects(blocks: np.ndarray, block: int, seq_len: int
           ) -> list[tuple[float, float, float, float]]:
    """(x, y, w, h) of the True blocks of ``block`` steps (row chunk r, column chunk c): x
    is columns."""
    out = []
    for r, c in np.argwhere(blocks):
        y0, x0 = r * block, c * block
        out.append((float(x0), float(y0), float(min(block, seq_len - x0)),
                    float(min(block, seq_len - y0))))
    return out


def chunks_data(result: RunResult, sel: Selection) -> ChunksData:
    """The view's numbers for ``result`` and ``sel`` (worker thread)."""
    p = result.problem
    tc = teaching_for(p.family, "chunks")
    s = sizes_of(p.family, result.inputs)
    L, P = s["seq_len"], s["d_head"]
    head, pos = sel.channel // P, sel.channel % P
    inputs = result.inputs
    dec = tc.chunk_decomposition(inputs, convention=p.convention, chunk_len=p.chunk_len)
    Q = dec.chunk_len
    side = op.select(L, MAX_MATRIX_SIDE) if L > MAX_MATRIX_SIDE else None
    M = op.reference_operator(p.family, inputs, convention=p.convention, index=[head],
                              rows=side, cols=side).M[0]
    gpu_states = result.gpu.get("chunk_states")
    cs = tc.chunk_states(inputs, convention=p.convention, chunk_len=Q, head=head,
                          gpu_chunk_states=gpu_states)
    bad_slots: tuple[int, ...] = ()
    if cs.gpu is not None:
        bad = op.bad_elements(cs.gpu, cs.ref)
        bad_slots = tuple(int(k) for k in np.flatnonzero(bad.reshape(bad.shape[0], -1).any(1)))
    ref_img = image_view(cs.ref[:, pos, :], symmetric=True)
    states = {"ref": ref_img}
    bound = 0.0
    if cs.gpu is not None and cs.diff is not None:
        states["gpu"] = image_view(cs.gpu[:, pos, :], levels=ref_img.levels, symmetric=True)
        # At least ±check.compare's element bound: a right kernel's rounding stays pale.
        bound = float(np.min(element_bound(cs.ref, FORWARD_TOL)))
        wide = max(robust_levels(cs.diff[:, pos, :], symmetric=True)[1], bound)
        states["diff"] = image_view(cs.diff[:, pos, :], levels=(-wide, wide), symmetric=True)
    y_gpu = None
    if "y" in result.gpu:
        y_gpu = np.asarray(result.gpu["y"][0, :, head, pos], np.float64)
    y, y_diag, y_off = (np.asarray(a[:, head, pos], np.float64)
                        for a in (dec.y, dec.y_diag, dec.y_off))
    gap = float(np.max(np.abs(y_diag + y_off - y))) if L else 0.0
    parts = [f"batch element 0, head {head}, position {pos}; chunk_len {Q}: "
             f"{dec.n_chunks} chunks; max |Y_diag + Y_off − y| = {gap:.1e}"]
    if cs.gpu is None:
        parts.append("the kernel wrote no chunk states")
    elif bad_slots:
        parts.append("GPU chunk states past the bound in slots "
                     + ", ".join(str(k) for k in bad_slots))
    else:
        parts.append("GPU chunk states match the reference")
    return ChunksData(head, pos, sel.channel, L, Q, dec.n_chunks, y, y_diag, y_off, y_gpu,
                      block_rects(dec.diag_blocks, Q, L), block_rects(dec.off_blocks, Q, L),
                      matrix_view(M, cmap=DIFF_CMAP, symmetric=True, extent=(L, L)), states,
                      bad_slots,
                      "; ".join(parts), bound)


class ChunksView(TeachingView):
    """Y_diag, Y_off and y; the matrix with each part's blocks; the chunk states."""

    name = "chunks"

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        ci = self.plots.ci
        self.curves_plot = Plot(title="y (orange) = Y_diag (green) + Y_off (purple); dashed: "
                                      "their sum, blue: the GPU's y")
        ci.addItem(self.curves_plot, row=0, col=0, colspan=2)
        self.curves_plot.setLabel("bottom", "time step t")
        self.curves = {
            "y_diag": Line(pen=pg.mkPen(DIAG_COLOUR, width=1.5), name="Y_diag"),
            "y_off": Line(pen=pg.mkPen(OFF_COLOUR, width=1.5), name="Y_off"),
            "y_gpu": Line(pen=pg.mkPen(GPU_COLOUR, width=1), name="y GPU"),
            "y": Line(pen=pg.mkPen(REF_COLOUR, width=1.5), name="y reference"),
            "sum": Line(pen=pg.mkPen("k", width=1, style=pg.QtCore.Qt.PenStyle.DashLine),
                        name="Y_diag + Y_off"),
        }
        for c in self.curves.values():
            self.curves_plot.addItem(c)
        self.chunk_lines: list[pg.InfiniteLine] = []
        self.cursor_line = pg.InfiniteLine(angle=90, movable=False,
                                           pen=pg.mkPen(CURSOR_COLOUR, width=2))
        self.curves_plot.addItem(self.cursor_line, ignoreBounds=True)
        self.curves_plot.sigClicked.connect(lambda x: self.cursorRequested.emit(round(x)))

        self.matrix_plot = MatrixPlot(title="M: Y_diag (green), Y_off (purple)")
        self.matrix_plot.titleLabel.set_detail(
            "the blocks of M each part uses: Y_diag the diagonal blocks (green), Y_off the "
            "blocks below them (purple)")
        self.matrix_plot.setLabel("left", "output step t")
        ci.addItem(self.matrix_plot, row=1, col=0, rowspan=3)
        self.matrix = MatrixImage()
        self.grid = ChunkGrid()
        self.diag = Blocks(DIAG_COLOUR)
        self.off = Blocks(OFF_COLOUR)
        self.band = RowBand(CURSOR_COLOUR)
        for item in (self.matrix, self.grid, self.off, self.diag, self.band):
            self.matrix_plot.addItem(item)
        integer_axes(self.matrix_plot, "left", "bottom", cells=True)
        self.bars = {"M": ColourBar(self.matrix_plot, "M")}
        self.matrix_plot.sigRowClicked.connect(self.cursorRequested)

        self.state_plots: dict[str, Plot] = {}
        self.state_images: dict[str, pg.ImageItem] = {}
        for row, (key, title) in enumerate(STATE_TITLES.items(), start=1):
            p = Plot(title=title)
            ci.addItem(p, row=row, col=1)
            p.setLabel("left", "state")
            integer_axes(p, "left", cells=True)
            self.bars[key] = ColourBar(p, title)
            img = heatmap_item()
            p.addItem(img)
            self.state_plots[key], self.state_images[key] = p, img
            p.setMinimumHeight(90)
        self.state_plots["diff"].setLabel("bottom", "chunk slot (0: zeros, last: final)")
        for key in ("gpu", "diff"):
            self.state_plots[key].setXLink(self.state_plots["ref"])
        self.curves_plot.setMinimumHeight(150)
        self.matrix_plot.setMinimumHeight(260)
        self.matrix_plot.setMinimumWidth(260)
        ci.layout.setColumnStretchFactor(0, 3)
        ci.layout.setColumnStretchFactor(1, 2)
        plots = [self.curves_plot, self.matrix_plot, *self.state_plots.values()]
        quiet_axes(plots)
        cache_static(plots)

    @staticmethod
    def prepare(result: RunResult, sel: Selection, options: object) -> ChunksData:
        return chunks_data(result, sel)

    def show_data(self, data: ChunksData) -> None:
        self.data = data
        t = np.arange(data.seq_len, dtype=np.float64)
        self.curves["y_diag"].setData(t, data.y_diag)
        self.curves["y_off"].setData(t, data.y_off)
        self.curves["y"].setData(t, data.y)
        self.curves["sum"].setData(t, data.y_diag + data.y_off)
        if data.y_gpu is not None:
            self.curves["y_gpu"].setData(t, data.y_gpu)
        else:
            self.curves["y_gpu"].setData([], [])
        bounds = np.arange(data.chunk_len, data.seq_len, data.chunk_len)
        while len(self.chunk_lines) < bounds.size:
            line = pg.InfiniteLine(angle=90, movable=False,
                                   pen=pg.mkPen((120, 120, 120, 160), width=1,
                                                style=pg.QtCore.Qt.PenStyle.DotLine))
            self.curves_plot.addItem(line, ignoreBounds=True)
            self.chunk_lines.append(line)
        for i, line in enumerate(self.chunk_lines):
            line.setVisible(i < bounds.size)
            if i < bounds.size:
                line.setValue(float(bounds[i]))
        self.curves_plot.enableAutoRange()
        L = float(data.seq_len)
        self.matrix.show(data.matrix)
        self.bars["M"].show_view(data.matrix)
        self.grid.set_grid(data.seq_len, data.chunk_len)
        self.diag.set_blocks(data.diag_rects)
        self.off.set_blocks(data.off_rects)
        self.matrix_plot.setRange(xRange=(0, L), yRange=(0, L), padding=0.0)
        for key, img in self.state_images.items():
            iv = data.states.get(key)
            bounded = key == "diff" and iv is not None and iv.levels[1] <= data.diff_bound
            self.bars[key].show_view(iv, STATE_TITLES[key] + (f" ({BOUND_DETAIL})" if bounded
                                                              else ""))
            self.state_plots[key].titleLabel.set_detail(BOUND_DETAIL if bounded else "")
            if iv is None:
                img.clear()
                continue
            show_image(img, iv)
            p = self.state_plots[key]
            p.setRange(xRange=(0, iv.extent[0]), yRange=(0, iv.extent[1]), padding=0.0)
            # Slot k is the cell [k, k + 1): its number under its middle.
            slots = int(iv.extent[0])
            step = max(1, slots // 8)
            p.getAxis("bottom").setTicks([[(k + 0.5, str(k)) for k in range(0, slots, step)]])
        self.show_message(data.summary, error=bool(data.bad_slots))
        self.set_cursor(self.cursor)

    def set_cursor(self, t: int) -> None:
        super().set_cursor(t)
        d = self.data
        if d is None:
            return
        t = min(max(self.cursor, 0), d.seq_len - 1)
        self.cursor_line.setValue(t)
        self.band.set_row(t, d.seq_len)
