"""The window asks for a run with a typed RunAsk; the scheduler sends it as a RunRequest."""

from __future__ import annotations

import dataclasses

import pytest

from ssmviz.app.runner import RunAsk, RunRequest
from ssmviz.core.problem import Problem
from tests import test_app

pytestmark = pytest.mark.qt
make_window = test_app.make_window  # the window fixture (leak checks included)


def test_a_request_is_the_ask_with_its_generation() -> None:
    ask = RunAsk(Problem(family="ssd", seq_len=8), points=77)
    req = RunRequest.of(ask, 5, 1.5)
    assert (req.generation, req.requested_at) == (5, 1.5)
    for f in dataclasses.fields(RunAsk):
        assert getattr(req, f.name) is getattr(ask, f.name), f.name
    with pytest.raises(dataclasses.FrozenInstanceError):
        ask.problem = Problem()  # type: ignore[misc]


def test_the_window_asks_with_a_run_ask(make_window) -> None:
    w = make_window()
    ask = w._make_request()
    assert isinstance(ask, RunAsk)
    assert ask.problem == w.controls.problem() and ask.kernel == w.shader_panel.choice()
    assert ask.points == w.time_plots.envelope_points()
