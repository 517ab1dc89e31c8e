"""The family travels as its registry record; files keep writing its name."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from ssmviz.core import families
from ssmviz.core.errors import SsmvizError
from ssmviz.core.problem import Problem

ROOT = Path(__file__).resolve().parent.parent
SESSIONS = sorted((ROOT / "assets" / "sessions").rglob("*.json"))


def _subset(saved: object, now: object, where: str = "problem") -> None:
    """Every value the older file holds is written again the same (newer fields may add)."""
    if isinstance(saved, dict):
        assert isinstance(now, dict), where
        for key, value in saved.items():
            _subset(value, now[key], f"{where}.{key}")
    else:
        assert saved == now, where


@pytest.mark.parametrize("path", SESSIONS, ids=lambda p: p.name)
def test_a_session_saved_before_loads_and_saves_the_same(path: Path) -> None:
    from ssmviz.app.session import Session

    written = json.loads(path.read_text(encoding="utf-8"))
    session = Session.load(path)
    family = session.problem.family
    assert isinstance(family, families.Family)
    assert family is families.get(written["problem"]["family"])
    again = json.loads(session.to_json())
    assert again["problem"]["family"] == written["problem"]["family"]  # the name, as before
    _subset(written["problem"], again["problem"])


def test_a_problem_holds_the_record_and_writes_the_name() -> None:
    p = Problem(family="ssd")
    assert p.family is families.get("ssd") and Problem(family=p.family) == p
    assert p.to_dict()["family"] == "ssd"
    assert Problem.from_dict(p.to_dict()) == p
    assert pickle.loads(pickle.dumps(p)) == p  # the kernel worker: by the family's name
    with pytest.raises(SsmvizError, match=r"^problem\.family must be a string; got 3"):
        Problem.from_dict({"family": 3})
    with pytest.raises(SsmvizError, match=r"^family must be one of s6, ssd, mamba3"):
        Problem.from_dict({"family": "s4"})
