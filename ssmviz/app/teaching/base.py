"""What every teaching view shares: its plots widget, a tool row, a message line, and
the split between :meth:`TeachingView.prepare` (numbers, off the UI thread) and
:meth:`TeachingView.show_data` (setData / setImage on the UI thread)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, ClassVar

import pyqtgraph as pg
from PySide6.QtCore import QSize, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget

from ssmviz.app.derived import Selection
from ssmviz.app.plots import layout_minimum, release_menus, unindexed
from ssmviz.app.runner import RunResult
from ssmviz.core.families import Family

#: Curves of the teaching views: GPU under reference, as in the time plots.
GPU_COLOUR = "#1f77b4"
REF_COLOUR = "#ff7f0e"
DIFF_COLOUR = "#d62728"
CURSOR_COLOUR = "#2ca02c"


class ViewPlots(pg.GraphicsLayoutWidget):
    """A teaching view's plot scene (what the view exports as PNG and SVG)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setBackground("w")
        unindexed(self)

    def minimumSizeHint(self) -> QSize:  # Qt override
        return layout_minimum(self)


class TeachingView(QWidget):
    """One teaching view. Subclasses set :attr:`name`, build their plots in ``__init__``
    and implement :meth:`prepare` (a static function of a run, safe on any thread: numpy
    only) and :meth:`show_data`.

    ``optionsChanged`` asks the panel for a new :meth:`prepare` (e.g. log colours);
    ``cursorRequested(t)`` asks the window to move the time cursor (a click on a row);
    ``problemRequested(changes)`` asks it to run the problem with ``changes`` (a dict of
    Problem fields, e.g. a shorter seq_len the view can show).
    """

    name: ClassVar[str] = ""
    optionsChanged = Signal()
    cursorRequested = Signal(int)
    problemRequested = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(2, 2, 2, 2)
        self.tools = QHBoxLayout()
        self.tools.setContentsMargins(4, 0, 4, 0)
        outer.addLayout(self.tools)
        self.message = QLabel("")
        self.message.setWordWrap(True)
        self.message.setObjectName("teachingMessage")
        outer.addWidget(self.message)
        self.plots = ViewPlots()
        outer.addWidget(self.plots, 1)
        #: The data on screen (what :meth:`show_data` got last), None before any.
        self.data: Any = None
        self.cursor = 0

    # -- the panel's interface -----------------------------------------------------------------
    def options(self) -> Hashable:
        """What, besides the run and the selection, :meth:`prepare` depends on."""
        return ()

    def set_options(self, **options: Any) -> None:
        """Options from a session (e.g. ``log_colour``); unknown ones do not apply here."""

    def set_family(self, family: Family) -> None:
        """The problem's family changed (tools that only one family has)."""

    @staticmethod
    def prepare(result: RunResult, sel: Selection, options: Any) -> Any:
        """The view's numbers for ``result`` and ``sel`` (worker thread)."""
        raise NotImplementedError

    def show_data(self, data: Any) -> None:
        """Put prepared data on the plots (UI thread)."""
        raise NotImplementedError

    def set_cursor(self, t: int) -> None:
        """The time cursor moved to step ``t`` (UI thread: cheap updates only)."""
        self.cursor = int(t)

    #: Whether the view has numbers per cursor step (:meth:`cursor_numbers`).
    has_cursor_numbers: ClassVar[bool] = False

    @staticmethod
    def cursor_numbers(data: Any, t: int) -> Any:
        """Numbers for cursor step ``t`` of ``data`` (worker thread)."""
        raise NotImplementedError

    def show_cursor_numbers(self, t: int, numbers: Any) -> None:
        """Put :meth:`cursor_numbers` on the plots (UI thread)."""

    def show_error(self, text: str, result: RunResult) -> None:
        """:meth:`prepare` failed on ``result`` with the one line ``text``."""
        self.show_message(text, error=True)

    def show_message(self, text: str, *, error: bool = False) -> None:
        self.message.setText(text)
        self.message.setStyleSheet("color: #b00020; font-weight: bold;" if error else "")
        self.message.setVisible(bool(text))

    def all_plots(self) -> list[pg.PlotItem]:
        return [it for it in self.plots.ci.items if isinstance(it, pg.PlotItem)]

    def release(self) -> None:
        """Free pyqtgraph's menus and the scene (the window is closing)."""
        release_menus(self.all_plots())
        self.plots.close()
