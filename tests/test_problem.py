"""Problem validation (one-line errors naming the parameter) and deterministic building."""

from __future__ import annotations

import numpy as np
import pytest

from ssmviz.core import families
from ssmviz.core.errors import SsmvizError
from ssmviz.core.problem import ParamInit, Problem, infer_sizes
from ssmviz.core.reference._common import softplus
from ssmviz.core.signals import SignalSpec


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"seq_len": 0}, "seq_len"),
        ({"batch": 0}, "batch"),
        ({"d_inner": 0}, "d_inner"),
        ({"d_state": 0}, "d_state"),
        ({"d_state": 257}, "d_state"),
        ({"seq_len": 1.5}, "seq_len"),
        ({"seq_len": True}, "seq_len"),
        ({"family": "s7"}, "family"),
        ({"convention": "torch"}, "convention"),
        ({"dy": "zeros"}, "dy"),
        ({"seed": -1}, "seed"),
        ({"family": "ssd", "n_heads": 0}, "n_heads"),
        ({"family": "ssd", "d_head": 0}, "d_head"),
        ({"family": "ssd", "n_groups": 0}, "n_groups"),
        ({"family": "ssd", "chunk_len": 0}, "chunk_len"),
        ({"family": "ssd", "n_heads": 6, "n_groups": 4}, "divisible by n_groups"),
        ({"family": "ssd", "n_heads": 4, "d_head": 8, "d_inner": 30}, "n_heads·d_head"),
        ({"signal": SignalSpec(name="triangle")}, "signal"),
        ({"signal": SignalSpec(amplitude=float("nan"))}, "amplitude"),
        ({"init": ParamInit(A="weird")}, "init A"),
        ({"init": ParamInit(dt_min=0.2, dt_max=0.1)}, "dt_min"),
    ],
)
def test_bad_sizes_are_one_line_errors_naming_the_parameter(changes, needle) -> None:
    with pytest.raises(SsmvizError) as info:
        Problem(**changes).validate()
    message = str(info.value)
    assert needle in message
    assert "\n" not in message


def test_ssd_d_inner_matches_heads() -> None:
    p = Problem(family="ssd", n_heads=4, d_head=8, d_inner=32)
    p.validate()
    assert p.inner == 32 and p.sizes()["d_inner"] == 32


@pytest.mark.parametrize("family", ["s6", "ssd"])
@pytest.mark.parametrize("convention", ["mamba", "builderforce"])
def test_build_is_deterministic_and_shaped(family: str, convention: str) -> None:
    p = Problem(
        family=family,
        convention=convention,
        batch=2,
        seq_len=33,
        d_inner=3 if family == "s6" else None,
        d_state=5,
        n_heads=4,
        d_head=2,
        n_groups=2,
        seed=7,
    )
    a, b = p.build(), p.build()
    keys = families.get(family).input_keys
    assert set(a) == set(keys)
    for k in keys:
        assert a[k].dtype == np.float64 and np.array_equal(a[k], b[k]), k
    sizes = infer_sizes(families.get(family), a)
    assert sizes["seq_len"] == 33 and sizes["batch"] == 2 and sizes["d_state"] == 5
    other = p.with_(seed=8).build()
    assert not np.array_equal(a["B"], other["B"])


def test_mamba_defaults() -> None:
    p = Problem(family="s6", d_inner=3, d_state=6, seq_len=64)
    a = p.build()
    assert np.allclose(a["A_log"], np.log(np.arange(1, 7))[None, :].repeat(3, 0))
    assert np.all(a["D"] == 1.0)
    dt = softplus(a["delta_bias"])
    assert np.all((dt >= 1e-3 * 0.999) & (dt <= 0.1 * 1.001))
    # builderforce has no delta_bias: the bias is folded into the raw delta.
    b = p.with_(convention="builderforce").build()
    assert np.all(b["delta_bias"] == 0.0)
    assert np.allclose(b["delta"].mean(axis=(0, 1)), a["delta_bias"], atol=0.1)


def test_changing_one_size_keeps_other_streams() -> None:
    a = Problem(family="s6", seq_len=16, d_inner=2).build()
    b = Problem(family="s6", seq_len=16, d_inner=5).build()
    assert np.array_equal(a["B"], b["B"])  # B does not depend on d_inner


def test_roundtrip_dict() -> None:
    p = Problem(family="ssd", n_heads=2, d_head=3, signal=SignalSpec(name="chirp"), seed=3)
    assert Problem.from_dict(p.to_dict()) == p
    with pytest.raises(SsmvizError, match="unknown problem field 'colour'"):
        Problem.from_dict({"colour": 1})


def test_infer_sizes_reports_missing_key_and_mismatch() -> None:
    a = Problem(family="s6", seq_len=8).build()
    missing = {k: v for k, v in a.items() if k != "dy"}
    with pytest.raises(SsmvizError, match="'dy'"):
        infer_sizes(families.get("s6"), missing)
    bad = dict(a, C=a["C"][:, :4])
    with pytest.raises(SsmvizError, match=r"C has shape \(1, 4, 16\)"):
        infer_sizes(families.get("s6"), bad)
    s = Problem(family="ssd", seq_len=8, n_heads=4, n_groups=2).build()
    with pytest.raises(SsmvizError, match="dt_bias"):
        infer_sizes(families.get("ssd"), dict(s, dt_bias=np.zeros(3)))
