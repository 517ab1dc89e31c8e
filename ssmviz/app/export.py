"""Export: plots to PNG (pyqtgraph) and SVG (Qt), the selection's time series to CSV, arrays to NPZ.

Every file is written atomically (:mod:`ssmviz.core.fileio`): a failed export keeps the
old file and leaves no partial one.

The NPZ has the keys of ``ssmviz check --export`` (inputs under their names,
``gpu_<name>``, ``ref_<name>``, a JSON ``meta``): CheckReport.export_npz writes it.
When the GPU part failed, the same layout is written without ``gpu_`` keys.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pyqtgraph as pg
import pyqtgraph.exporters as pg_exporters
from PySide6.QtCore import QRectF, QSize
from PySide6.QtGui import QPainter
from PySide6.QtSvg import QSvgGenerator
from PySide6.QtWidgets import QGraphicsItem

from ssmviz.app.derived import Trace, csv_columns
from ssmviz.app.runner import RunResult
from ssmviz.core.errors import SsmvizError
from ssmviz.core.fileio import write_file


def _export_svg(widget: pg.GraphicsLayoutWidget, path: Path) -> None:
    # pyqtgraph 0.14's SVGExporter cannot parse the "Z" path tokens Qt ≥ 6.11 writes,
    # so the scene is painted straight into Qt's SVG generator (still vector output).
    rect = widget.ci.sceneBoundingRect()
    gen = QSvgGenerator()
    gen.setFileName(str(path))
    gen.setSize(QSize(int(rect.width()), int(rect.height())))
    gen.setViewBox(QRectF(0, 0, rect.width(), rect.height()))
    gen.setTitle("ssmviz plots")
    painter = QPainter()
    if not painter.begin(gen):
        raise SsmvizError(f"cannot write {path}")
    try:
        widget.scene().render(painter, QRectF(0, 0, rect.width(), rect.height()), rect)
    finally:
        painter.end()


def export_image(widget: pg.GraphicsLayoutWidget, path: str | Path) -> Path:
    """The whole plot scene to PNG (pyqtgraph's ImageExporter) or SVG (by suffix).

    Items cached as screen pixmaps (axes, titles) are drawn afresh for it, so an SVG gets
    vector text and a PNG of another size no scaled pixmaps.
    """
    path = Path(path)
    if path.suffix.lower() not in (".png", ".svg"):
        raise SsmvizError(f"image export needs .png or .svg; got '{path.suffix}'")
    cached = [(it, it.cacheMode()) for it in widget.scene().items()
              if it.cacheMode() != QGraphicsItem.CacheMode.NoCache]
    for it, _ in cached:
        it.setCacheMode(QGraphicsItem.CacheMode.NoCache)
    try:
        # Atomic: written beside the target (same suffix) and renamed over it.
        return write_file(path, lambda tmp: _export_image(widget, tmp))
    finally:
        for it, mode in cached:
            it.setCacheMode(mode)


def _export_image(widget: pg.GraphicsLayoutWidget, path: Path) -> Path:
    item = widget.ci  # the top-level GraphicsLayout: every plot of the widget
    if path.suffix.lower() == ".svg":
        _export_svg(widget, path)
        if not path.is_file():
            raise SsmvizError(f"cannot write {path}")
        return path
    if path.suffix.lower() == ".png":
        exporter = pg_exporters.ImageExporter(item)
        # A width that keeps the scene's aspect; pyqtgraph wants an int here.
        rect = item.boundingRect()
        exporter.parameters()["width"] = max(int(rect.width()), 64)
    else:
        raise SsmvizError(f"image export needs .png or .svg; got '{path.suffix}'")
    try:
        exporter.export(str(path))
    except OSError as exc:
        raise SsmvizError(f"cannot write {path}: {exc.strerror or exc}") from exc
    if not path.is_file():
        raise SsmvizError(f"cannot write {path}")
    return path


def export_csv(tr: Trace, path: str | Path) -> Path:
    """One row per time step of the selection: t, input, Δ, Ā, B̄u, h, y, error, tolerance."""
    cols = csv_columns(tr)

    def write(tmp: Path) -> None:
        with tmp.open("w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(list(cols))
            for row in zip(*cols.values(), strict=True):
                w.writerow([f"{v:.17g}" if isinstance(v, float | np.floating) else v for v in row])

    return write_file(path, write)


def export_npz(result: RunResult, path: str | Path) -> Path:
    """Inputs, ``gpu_*``, ``ref_*`` and ``meta``: the keys of ``ssmviz check --export``."""
    path = Path(path)
    if result.report is not None:
        result.report.export_npz(str(path))
        return path
    data = {k: np.asarray(v) for k, v in result.inputs.items()}
    data |= {f"ref_{k}": np.asarray(v) for k, v in result.ref.items()}
    meta = {
        "family": result.problem.family.name,
        "convention": result.problem.convention,
        "sizes": result.problem.sizes(),
        "error": result.error,
        "reference_seconds": result.reference_seconds,
    }
    data["meta"] = np.array(json.dumps(meta))
    return write_file(path, lambda tmp: np.savez(tmp, **data))
