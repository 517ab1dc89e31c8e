"""The scan tree view (S6, seq_len ≤ 64): the tree of the associative operator
(a₁,b₁)∘(a₂,b₂) = (a₁a₂, a₂b₁ + b₂) that ssmviz's S6 forward runs, level by level.

Each node is a box over the steps it stands for, at its level (the leaves (Ā_t, B̄_t u_t)
at the bottom, the states h_t on top), joined to the nodes it is composed from. A node
whose GPU value (read back from the kernel's own buffers) is past the forward bound of
its reference value is outlined red; one the kernel keeps in registers only, dashed.
The table lists (a, b) of the nodes on the cursor step's path, GPU beside reference.
Play / Step shows the levels one at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QLineF, QRectF, Qt, QTimer
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QComboBox, QLabel, QPushButton, QSizePolicy

from ssmviz.app.derived import Selection
from ssmviz.app.plots import Plot, quiet_axes
from ssmviz.app.runner import RunResult
from ssmviz.app.teaching import teaching_for
from ssmviz.app.teaching.base import CURSOR_COLOUR, TeachingView
from ssmviz.core.check import FORWARD_TOL, element_bound
from ssmviz.core.families.s6.teaching import MAX_TREE_SEQ_LEN
from ssmviz.core.families.s6.textbook import s6_blelloch_tree, s6_kogge_stone_tree

#: The kernel chunk lengths the view offers besides the kernel's own.
TREE_CHUNKS = (16, 8, 4, 2)
#: Milliseconds per level while playing.
PLAY_MS = 700
#: Fill of a node by kind.
KIND_COLOURS = {"leaf": (200, 220, 240), "chunk": (255, 224, 178), "carry": (255, 204, 204),
                "block": (230, 210, 240), "state": (200, 235, 200), "ks": (205, 230, 215),
                "up": (255, 224, 178), "down": (255, 204, 204)}
#: The textbook trees the view offers beside the kernel's: key -> (label, builder).
TEXTBOOK = {"kogge_stone": ("Kogge–Stone", s6_kogge_stone_tree),
            "blelloch": ("Blelloch", s6_blelloch_tree)}
BOX_HEIGHT = 0.6


@dataclass
class TreeData:
    """A :class:`~ssmviz.core.families.s6.teaching.ScanTree` and what it looks like:
    ``status`` per node: "ok", "wrong" (GPU past the bound) or "absent" (no GPU value)."""

    tree: object
    status: list[str]
    summary: str
    spans: list[tuple[int, int]]


def tree_data(result: RunResult, sel: Selection, kernel_chunk: int | None = None,
              textbook: str | None = None) -> TreeData:
    """The view's numbers for ``result`` and ``sel`` (worker thread); ``kernel_chunk``: the
    S6 kernel's chunk length for this tree (None: the kernel's own choice); ``textbook``: a
    key of :data:`TEXTBOOK`, that scan instead (reference values only)."""
    p = result.problem
    if textbook:
        label, build = TEXTBOOK[textbook]
        tree = build(result.inputs, convention=p.convention, channel=sel.channel,
                     state=sel.state, batch_index=sel.batch)
        combines = sum(len(n.inputs) == 2 for n in tree.nodes)
        summary = (f"batch element {sel.batch}, channel {tree.channel}, state {tree.state}; "
                   f"textbook {label} scan: {len(tree.levels)} levels, {combines} "
                   f"combinations for seq_len {tree.seq_len} (the kernel's chunked tree does "
                   "about 2·seq_len); reference values only")
        return TreeData(tree, ["ok"] * len(tree.nodes), summary, drawn_spans(tree))
    scan_tree = teaching_for(p.family, "scan_tree").scan_tree
    choice = result.kernel
    note = ""
    gpu = True
    if result.external is not None or (choice is not None and not choice.builtin
                                       and result.report is None):
        gpu, note = False, "the tree of ssmviz's kernel: this kernel's buffers are not read"
    elif result.error:
        gpu, note = False, "reference values only: the kernel did not run"
    elif result.run_source is not None:
        # An edited shader runs only in the isolated worker, under its watchdog.
        gpu, note = False, "reference values only: an edited shader's buffers are not read"
    tree = scan_tree(result.inputs, convention=p.convention, channel=sel.channel,
                        state=sel.state, batch_index=sel.batch, fwd_chunk_len=kernel_chunk,
                        gpu=gpu)
    status = _status(tree)
    wrong = status.count("wrong")
    parts = [f"batch element {sel.batch}, channel {tree.channel}, state {tree.state}; "
             f"kernel chunk_len {tree.chunk_len}; {len(tree.levels)} levels"]
    if gpu:
        parts.append(f"{wrong} node{'s' if wrong != 1 else ''} past the bound" if wrong
                     else "GPU values match the reference")
    parts += [note] if note else []
    parts += list(tree.notes)
    return TreeData(tree, status, "; ".join(parts), drawn_spans(tree))


#: Kinds whose node is a running prefix (their span starts at 0): drawn over the span of
#: the input they add, so each level reads left to right as the kernel walks it.
PREFIX_KINDS = ("carry", "block", "state")


def drawn_spans(tree: object) -> list[tuple[int, int]]:
    """(start, stop) each node is drawn over: its own span, or for a prefix the span of
    its last input (the part it adds)."""
    nodes = tree.nodes
    return [n.drawn if n.drawn is not None
            else (n.stop - 1, n.stop) if n.kind == "ks"  # the textbook's: at its step
            else (nodes[n.inputs[-1]].start, nodes[n.inputs[-1]].stop)
            if n.kind in PREFIX_KINDS and n.inputs else (n.start, n.stop) for n in nodes]


def _status(tree: object) -> list[str]:
    """Per node: "wrong" when a GPU value it has is past the forward bound of its
    reference value (or not finite), "absent" when it has none, else "ok"."""
    nodes = tree.nodes
    bounds = {k: element_bound(np.array([getattr(n, f"{k}_ref") for n in nodes]), FORWARD_TOL)
              for k in ("a", "b")}  # one scale, the whole tree's, as check.compare's
    out = []
    for i, n in enumerate(nodes):
        pairs = [(getattr(n, f"{k}_gpu"), getattr(n, f"{k}_ref"), bounds[k][i])
                 for k in ("a", "b") if getattr(n, f"{k}_gpu") is not None]
        if not pairs:
            out.append("absent")
        elif any(not np.isfinite(g) or abs(g - r) > b for g, r, b in pairs):
            out.append("wrong")
        else:
            out.append("ok")
    return out


def _level_name(tree: object, k: int, ids: tuple[int, ...]) -> str:
    """A level by what it computes: its kinds of node, the Kogge–Stone shift or the
    Blelloch sweep's block length."""
    kinds = sorted({tree.nodes[i].kind for i in ids})
    if kinds == ["ks"]:
        return f"t − {2 ** (k - 1)}"
    depth = (len(tree.levels) - 2) // 2  # Blelloch: log2 of the padded length
    if kinds == ["up"]:  # pairs of blocks summed into one of 2^k steps
        return f"up {2 ** k}"
    if kinds == ["down"]:  # the prefix handed to each block of 2^(2·depth − k) steps
        return f"down {2 ** (2 * depth - k)}"
    return "/".join(kinds)


class TreeItem(pg.GraphicsObject):
    """The nodes as boxes over [start, stop) at y = level, edges to their inputs; levels
    above ``shown`` are not drawn; the cursor's path is outlined."""

    def __init__(self) -> None:
        super().__init__()
        self.boxes: list[QRectF] = []
        self.levels: list[int] = []
        self.kinds: list[str] = []
        self.status: list[str] = []
        self.edges: list[tuple[int, int]] = []
        self.path: set[int] = set()
        self.shown = 0
        self._rect = QRectF()
        self.pens = {"ok": pg.mkPen((90, 90, 90), width=1),
                     "wrong": pg.mkPen("#d62728", width=2),
                     "absent": pg.mkPen((90, 90, 90), width=1, style=Qt.PenStyle.DashLine),
                     "path": pg.mkPen(CURSOR_COLOUR, width=3)}
        for pen in self.pens.values():
            pen.setCosmetic(True)
        self.edge_pen = pg.mkPen((150, 150, 150), width=1)
        self.edge_pen.setCosmetic(True)
        self.brushes = {k: pg.mkBrush(*c) for k, c in KIND_COLOURS.items()}

    def set_tree(self, data: TreeData | None) -> None:
        """Draw ``data``'s tree (None: none)."""
        self.prepareGeometryChange()
        if data is None:
            self.boxes, self.levels, self.kinds, self.status, self.edges = [], [], [], [], []
            self.path = set()
            self._rect = QRectF()
            self.update()
            return
        tree = data.tree
        self.boxes = [QRectF(a + 0.08, n.level - BOX_HEIGHT / 2, max(b - a - 0.16, 0.1),
                             BOX_HEIGHT) for n, (a, b) in zip(tree.nodes, data.spans,
                                                             strict=True)]
        self.levels = [n.level for n in tree.nodes]
        self.kinds = [n.kind for n in tree.nodes]
        self.status = list(data.status)
        self.edges = [(i, n.id) for n in tree.nodes for i in n.inputs]
        top = max(self.levels, default=0)
        self._rect = QRectF(0, -1, tree.seq_len, top + 2)
        self.shown = top
        self.update()

    def set_shown(self, level: int) -> None:
        self.shown = level
        self.update()

    def set_path(self, ids: set[int]) -> None:
        self.path = ids
        self.update()

    def boundingRect(self) -> QRectF:
        return QRectF(self._rect)

    def paint(self, painter: QPainter, *args: object) -> None:
        painter.setPen(self.edge_pen)
        lines = []
        for a, b in self.edges:
            if self.levels[b] > self.shown:
                continue
            ra, rb = self.boxes[a], self.boxes[b]
            if self.levels[a] == self.levels[b]:  # the running prefix: side to side
                y = ra.center().y()
                lines.append(QLineF(ra.right(), y, rb.left(), y))
            else:  # y grows upwards: an input's top to the node's bottom
                lines.append(QLineF(ra.center().x(), ra.bottom(), rb.center().x(), rb.top()))
        painter.drawLines(lines)
        for i, rect in enumerate(self.boxes):
            if self.levels[i] > self.shown:
                continue
            painter.setBrush(self.brushes.get(self.kinds[i], self.brushes["leaf"]))
            painter.setPen(self.pens["path" if i in self.path else self.status[i]])
            painter.drawRect(rect)
            if i in self.path and self.status[i] == "wrong":
                painter.setPen(self.pens["wrong"])
                painter.drawRect(rect)


def _fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:+.6g}"


class ScanTreeView(TeachingView):
    """The kernel's scan tree with Play / Step by level and the cursor path's values."""

    name = "scan_tree"

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.step_back = QPushButton("◀ Level")
        self.play = QPushButton("Play")
        self.step_on = QPushButton("Level ▶")
        self.level_label = QLabel("")
        # It takes the room left (the tool row never widens the dock past the window).
        self.level_label.setSizePolicy(QSizePolicy.Policy.Ignored,
                                       QSizePolicy.Policy.Preferred)
        self.chunk_box = QComboBox()
        self.chunk_box.addItem("kernel chunk: its own", None)
        for q in TREE_CHUNKS:
            self.chunk_box.addItem(f"kernel chunk: {q}", q)
        self.chunk_box.setToolTip("the chunk length the S6 forward runs with for this tree "
                                  "(as its tests do): shorter chunks, a deeper tree")
        self.chunk_box.currentIndexChanged.connect(lambda _i: self.optionsChanged.emit())
        self.tree_box = QComboBox()
        self.tree_box.addItem("kernel's tree", None)
        for key, (label, _build) in TEXTBOOK.items():
            self.tree_box.addItem(label, key)
        self.tree_box.setToolTip("the kernel's own chunk → carry → state tree, or a "
                                 "textbook parallel scan: Kogge–Stone (more work, fewer "
                                 "levels) or Blelloch (up-sweep, down-sweep)")
        self.tree_box.currentIndexChanged.connect(lambda _i: self._tree_changed())
        self.shorter = QPushButton(f"Show at seq_len {MAX_TREE_SEQ_LEN}")
        self.shorter.setToolTip("run this problem with a sequence short enough to draw "
                                "its tree (every other setting kept)")
        self.shorter.clicked.connect(
            lambda: self.problemRequested.emit({"seq_len": MAX_TREE_SEQ_LEN}))
        self.shorter.hide()
        for w in (self.tree_box, self.chunk_box, self.step_back, self.play, self.step_on,
                  self.level_label, self.shorter):
            self.tools.addWidget(w)
        self.tools.setStretchFactor(self.level_label, 1)
        self.step_back.clicked.connect(lambda: self.step(-1))
        self.step_on.clicked.connect(lambda: self.step(+1))
        self.play.clicked.connect(self.toggle_play)
        self.timer = QTimer(self, interval=PLAY_MS)
        self.timer.timeout.connect(self._tick)
        self.tree_plot = Plot(title="scan tree: (a₁,b₁)∘(a₂,b₂) = (a₁a₂, a₂b₁ + b₂)")
        self.plots.ci.addItem(self.tree_plot, row=0, col=0)
        self.tree_plot.setLabel("bottom", "time step t")
        self.tree_plot.setMinimumHeight(200)
        self.tree_plot.sigClicked.connect(lambda x: self.cursorRequested.emit(int(np.floor(x))))
        self.item = TreeItem()
        self.tree_plot.addItem(self.item)
        self.cursor_line = pg.InfiniteLine(angle=90, movable=False,
                                           pen=pg.mkPen(CURSOR_COLOUR, width=1))
        self.tree_plot.addItem(self.cursor_line, ignoreBounds=True)
        self.table = pg.LabelItem("", justify="left")
        self.plots.ci.addItem(self.table, row=1, col=0)
        self.plots.ci.layout.setRowStretchFactor(0, 3)
        self.plots.ci.layout.setRowStretchFactor(1, 2)
        quiet_axes([self.tree_plot])

    @property
    def chunk_len(self) -> int | None:
        return self.chunk_box.currentData()

    @property
    def textbook(self) -> str | None:
        return self.tree_box.currentData()

    def _tree_changed(self) -> None:
        self.chunk_box.setEnabled(not self.textbook)  # the textbook has no chunks
        self.optionsChanged.emit()

    def options(self) -> tuple[int | None, str | None]:
        return self.chunk_len, self.textbook

    def set_options(self, **options: object) -> None:
        if "tree_chunk_len" in options:
            q = options["tree_chunk_len"]
            i = 0 if q is None else self.chunk_box.findData(q)
            if i < 0:  # a session's own chunk length
                self.chunk_box.addItem(f"kernel chunk: {q}", q)
                i = self.chunk_box.count() - 1
            self.chunk_box.setCurrentIndex(i)

    @staticmethod
    def prepare(result: RunResult, sel: Selection, options: object) -> TreeData:
        chunk_len, textbook = options
        return tree_data(result, sel, chunk_len, textbook)

    def show_error(self, text: str, result: RunResult) -> None:
        """No tree: nothing to play; past seq_len 64, one click runs it at 64."""
        self.timer.stop()
        self.play.setText("Play")
        self.data = None
        self.item.set_tree(None)
        self.table.setText("")
        self.level_label.setText("")
        self._enable(False)
        self.shorter.setVisible(result.problem.seq_len > MAX_TREE_SEQ_LEN)
        self.show_message(text, error=True)

    def _enable(self, on: bool) -> None:
        """Play / Level with a tree; without one they are disabled and out of the way
        (the "Show at seq_len 64" button takes their room)."""
        for w in (self.step_back, self.play, self.step_on):
            w.setEnabled(on)
            w.setVisible(on)

    def show_data(self, data: TreeData) -> None:
        self.data = data
        self.shorter.hide()
        self._enable(True)
        self.item.set_tree(data)
        tree = data.tree
        self.tree_plot.setRange(xRange=(0, tree.seq_len), yRange=(-0.6, len(tree.levels) - 0.4),
                                padding=0.02)
        # Each level named by what it computes (its kinds of node).
        self.tree_plot.getAxis("left").setTicks([[
            (k, _level_name(tree, k, ids)) for k, ids in enumerate(tree.levels)]])
        self.show_message(data.summary, error="wrong" in data.status)
        self._show_level()
        self.set_cursor(self.cursor)

    # -- levels ------------------------------------------------------------------------------
    def top_level(self) -> int:
        return len(self.data.tree.levels) - 1 if self.data is not None else 0

    def step(self, by: int) -> None:
        if self.data is None:
            return
        self.item.set_shown(min(max(self.item.shown + by, 0), self.top_level()))
        self._show_level()

    def toggle_play(self) -> None:
        if self.timer.isActive():
            self.timer.stop()
        elif self.data is not None:
            if self.item.shown >= self.top_level():
                self.item.set_shown(0)
            self.timer.start()
            self._show_level()
        self.play.setText("Pause" if self.timer.isActive() else "Play")

    def _tick(self) -> None:
        if self.item.shown >= self.top_level():
            self.timer.stop()
            self.play.setText("Play")
            return
        self.step(+1)

    def _show_level(self) -> None:
        if self.data is None:
            return
        k = self.item.shown
        tree = self.data.tree
        kinds = sorted({tree.nodes[i].kind for i in tree.levels[k]})
        self.level_label.setText(f"level {k} of {self.top_level()} ({', '.join(kinds)})")

    # -- the cursor's path -------------------------------------------------------------------
    def set_cursor(self, t: int) -> None:
        super().set_cursor(t)
        d = self.data
        if d is None:
            return
        tree = d.tree
        t = min(max(self.cursor, 0), tree.seq_len - 1)
        self.cursor_line.setValue(t + 0.5)
        path = [n for n, (a, b) in zip(tree.nodes, d.spans, strict=True) if a <= t < b]
        path.sort(key=lambda n: (n.level, n.start))
        self.item.set_path({n.id for n in path})
        rows = "".join(
            f"<tr><td>{n.level}</td><td>{n.kind}</td><td>[{n.start}, {n.stop})</td>"
            f"<td>{_fmt(n.a_ref)}</td><td>{_fmt(n.a_gpu)}</td><td>{_fmt(n.b_ref)}</td>"
            f"<td>{_fmt(n.b_gpu)}</td>"
            f"<td style='color:{'#d62728' if d.status[n.id] == 'wrong' else '#444'}'>"
            f"{d.status[n.id]}</td></tr>" for n in path)
        head = ("<tr><th>level</th><th>kind</th><th>steps</th><th>a ref</th><th>a GPU</th>"
                "<th>b ref</th><th>b GPU</th><th></th></tr>")
        self.table.setText(f"<b>the nodes drawn over step t = {t}</b> (over its steps: a = Π Ā, "
                           "b = the state reached from 0)"
                           f"<table cellspacing='0' cellpadding='2'>{head}{rows}</table>",
                           size="9pt")
