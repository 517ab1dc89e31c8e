"""The live path's reference reuse: a change that did not touch an input never shows the
result of old inputs, and one that touched only dy runs no new forward."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import ssmviz.core.families.s6.reference as s6_ref
import ssmviz.core.families.ssd.chunked as ssd_chunked
from ssmviz.core import check, families
from ssmviz.core.case import Case
from ssmviz.core.problem import Problem


@pytest.fixture(autouse=True)
def fresh_memo():
    check._MEMO.clear()
    yield
    check._MEMO.clear()


def _count(monkeypatch, module, name: str) -> list[int]:
    calls = [0]
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.mark.parametrize("family", ["s6", "ssd"])
def test_reused_reference_equals_a_fresh_one_after_every_kind_of_change(family, monkeypatch):
    forward = _count(monkeypatch, *((s6_ref, "s6_forward") if family == "s6"
                                    else (ssd_chunked, "ssd_forward_chunked")))
    if family == "s6":
        p = Problem(family="s6", batch=1, seq_len=24, d_inner=3, d_state=4)
    else:
        p = Problem(family="ssd", batch=1, seq_len=24, n_heads=2, d_head=2, n_groups=1,
                    d_state=4, chunk_len=8)
    def live(q: Problem) -> dict:
        return check.reference(Case.of_problem(q), reuse=True)

    def fresh(q: Problem) -> dict:
        return check.reference(Case.of_problem(q))

    # A first run, the same inputs again, dy only, then the forward's inputs (signal,
    # seed, convention) and back: each time what a fresh reference gives.
    steps = [p, p, p.with_(dy="ones"), p.with_(dy="ones", seed=3),
             p.with_(seed=3, convention="builderforce"), p]
    steps.append(p.with_(signal=replace(p.signal, frequency=p.signal.frequency * 2)))
    live_forwards = []
    for q in steps:
        before = forward[0]
        got = live(q)
        live_forwards.append(forward[0] - before)
        _same(got, fresh(q))
    # One forward unless nothing it reads changed (the same inputs; dy only).
    assert live_forwards == [1, 0, 0, 1, 1, 1, 1]


def test_a_changed_element_of_a_forward_input_is_never_reused():
    p = Problem(family="s6", batch=1, seq_len=16, d_inner=2, d_state=2)
    arrays = p.build()
    first = check.reference(Case.of_arrays(families.get("s6"), arrays), reuse=True)
    changed = {k: np.array(v) for k, v in arrays.items()}
    changed["B"][0, 7, 1] += 1e-9  # one element, a tiny change
    again = check.reference(Case.of_arrays(families.get("s6"), changed), reuse=True)
    _same(again, check.reference(Case.of_arrays(families.get("s6"), changed)))
    assert not np.array_equal(again["y"], first["y"])


def test_callers_cannot_change_what_is_kept():
    p = Problem(family="s6", batch=1, seq_len=16, d_inner=2, d_state=2)
    for _ in range(2):  # computed, then reused
        check.reference(Case.of_problem(p), reuse=True).pop("h")  # as check_arrays may
    assert "h" in check.reference(Case.of_problem(p), reuse=True)
