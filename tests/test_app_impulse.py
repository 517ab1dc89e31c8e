"""Shift+click on the input plot places (or moves) an impulse on the chosen channel."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QPointF, Qt

from ssmviz.core.errors import SsmvizError
from ssmviz.core.signals import SignalSpec, generate
from tests import test_app
from tests.test_app import SMALL, _run

make_window = test_app.make_window

pytestmark = [pytest.mark.qt]


class _Click:
    """A left click at a scene position, with or without Shift."""

    def __init__(self, pos: QPointF, shift: bool) -> None:
        self._pos, self._shift, self.accepted = pos, shift, False

    def button(self):
        return Qt.MouseButton.LeftButton

    def modifiers(self):
        return (Qt.KeyboardModifier.ShiftModifier if self._shift
                else Qt.KeyboardModifier.NoModifier)

    def scenePos(self) -> QPointF:
        return self._pos

    def accept(self) -> None:
        self.accepted = True


def test_onset_places_channel_zeros_impulse_and_is_checked() -> None:
    u = generate(SignalSpec(name="impulse", onset=0.5, phase_step=0.0), 1, 40, 2)
    assert np.flatnonzero(u[0, :, 0]).tolist() == [20] and u[0, 20, 1] == 1.0
    with pytest.raises(SsmvizError, match=r"signal onset must be in \[0, 1\)"):
        SignalSpec(onset=1.0).validate()


@pytest.mark.gpu
def test_shift_click_on_the_input_places_an_impulse_a_click_moves_the_cursor(
        qtbot, make_window) -> None:
    w = make_window(SMALL)  # a sine input
    w.show()
    qtbot.waitExposed(w)
    w.controls.set_selection(0, 1, 0)
    plot = w.time_plots.plots["input"]
    vb = plot.getViewBox()
    at = vb.mapViewToScene(QPointF(20.2, 0.0))
    moved = []
    w.time_plots.cursorMoved.connect(moved.append)
    plot.mouseClickEvent(_Click(at, shift=False))
    assert moved and moved[-1] == 20 and w.controls.problem().signal.name == "sine"
    _run(qtbot, w, lambda: plot.mouseClickEvent(_Click(at, shift=True)))
    u = w.result.inputs["u"][0]
    assert w.controls.problem().signal.name == "impulse"
    assert np.flatnonzero(u[:, 1]).tolist() == [20]  # the chosen channel, at the click
    # Again elsewhere: the impulse moves.
    _run(qtbot, w, lambda: w.time_plots.impulseRequested.emit(33))
    assert np.flatnonzero(w.result.inputs["u"][0][:, 1]).tolist() == [33]
