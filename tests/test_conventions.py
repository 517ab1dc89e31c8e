"""Conventions as parameters: the presets keep their bits, every parameter changes the
reference as documented, and the gradients of custom conventions (and of an initial
state) match finite differences."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ssmviz.core import families
from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.s6.reference import s6_backward, s6_forward
from ssmviz.core.families.ssd.chunked import ssd_backward_chunked, ssd_forward_chunked
from ssmviz.core.reference.conventions import Convention, parse_convention, preset
from ssmviz.core.reference.gradcheck import compare_grads, finite_difference_grads


def _s6_inputs(seed: int = 0, b: int = 2, t: int = 9, d: int = 3, n: int = 4) -> dict:
    rng = np.random.default_rng(seed)
    return {"u": rng.normal(size=(b, t, d)), "delta": rng.normal(size=(b, t, d)),
            "A_log": rng.normal(size=(d, n)) * 0.5, "B": rng.normal(size=(b, t, n)),
            "C": rng.normal(size=(b, t, n)), "D": rng.normal(size=d),
            "delta_bias": rng.normal(size=d) * 0.3}


def test_presets_are_the_named_conventions_bit_for_bit() -> None:
    x = _s6_inputs()
    for name in ("mamba", "builderforce"):
        a = s6_forward(**x, convention=name)
        b = s6_forward(**x, convention=preset(name))
        assert a.y.tobytes() == b.y.tobytes()
        ga = s6_backward(**x, dy=np.ones_like(x["u"]), convention=name)
        gb = s6_backward(**x, dy=np.ones_like(x["u"]), convention=preset(name))
        assert ga.dA_log.tobytes() == gb.dA_log.tobytes()


def test_each_parameter_changes_the_s6_reference_as_documented() -> None:
    x = _s6_inputs()
    base = preset("mamba")
    y0 = s6_forward(**x, convention=base).y
    # No D: y loses exactly D·u.
    no_d = s6_forward(**x, convention=replace(base, name="custom", D=False)).y
    np.testing.assert_allclose(y0 - no_d, x["D"] * x["u"], atol=1e-12)
    # Raw A holding -exp(A_log) is the mamba convention.
    raw = replace(base, name="custom", A="raw")
    y_raw = s6_forward(**(x | {"A_log": -np.exp(x["A_log"])}), convention=raw).y
    np.testing.assert_allclose(y_raw, y0, rtol=1e-12, atol=1e-12)
    # A raw Δ holding softplus(delta + bias) is the mamba convention too.
    none = replace(base, name="custom", dt="none")
    dt = np.log1p(np.exp(x["delta"] + x["delta_bias"]))
    y_none = s6_forward(**(x | {"delta": dt, "delta_bias": 0 * x["D"]}), convention=none).y
    np.testing.assert_allclose(y_none, y0, rtol=1e-12, atol=1e-12)
    # A clamp that cuts: the same as A_log clipped by hand.
    clamp = replace(base, name="custom", A="exp_clamped", A_clamp=(-0.2, 0.1))
    y_c = s6_forward(**x, convention=clamp).y
    y_clip = s6_forward(**(x | {"A_log": np.clip(x["A_log"], -0.2, 0.1)}), convention=base).y
    np.testing.assert_allclose(y_c, y_clip, rtol=1e-12, atol=1e-12)
    assert not np.allclose(y_c, y0)
    # No bias: the bias is ignored.
    nb = s6_forward(**x, convention=replace(base, name="custom", dt_bias=False)).y
    y_zero_bias = s6_forward(**(x | {"delta_bias": 0 * x["D"]}), convention=base).y
    assert nb.tobytes() == y_zero_bias.tobytes()


@pytest.mark.parametrize("conv", [
    Convention(name="custom", dt="softplus_stable", A="exp_clamped", A_clamp=(-0.3, 0.4),
               B_bar="zoh"),
    Convention(name="custom", dt="none", A="raw", D=False),
    Convention(name="custom", A="softplus", dt_bias=False),
])
def test_custom_s6_gradients_match_finite_differences(conv: Convention) -> None:
    x = _s6_inputs(seed=3, b=1, t=6, d=2, n=3)
    if conv.dt == "none":
        x["delta"] = np.abs(x["delta"]) + 0.1
    if conv.A == "raw":
        x["A_log"] = -np.exp(x["A_log"])
    x["A_log"][0, 0] = 0.9  # outside the clamp, where its gradient is zero
    x["h0"] = np.random.default_rng(5).normal(size=(1, 2, 3))
    dy = np.random.default_rng(4).normal(size=x["u"].shape)

    def loss(a: dict) -> float:
        return float(np.sum(s6_forward(**a, convention=conv).y * dy))

    names = ["u", "delta", "A_log", "B", "C", "h0"]
    fd = finite_difference_grads(loss, x, names)
    g = s6_backward(**x, dy=dy, convention=conv)
    ana = {"u": g.du, "delta": g.ddelta, "A_log": g.dA_log, "B": g.dB, "C": g.dC, "h0": g.dh0}
    for r in compare_grads(ana, fd).values():
        assert r.rel_err < 1e-6, r


def test_h0_is_the_state_before_the_first_step() -> None:
    x = _s6_inputs(b=1, t=8)
    whole = s6_forward(**x)
    head = s6_forward(**{k: v[:, :3] if v.ndim == 3 else v for k, v in x.items()})
    tail = s6_forward(**{k: v[:, 3:] if v.ndim == 3 else v for k, v in x.items()},
                      h0=head.last_state)
    np.testing.assert_allclose(tail.y, whole.y[:, 3:], rtol=1e-12, atol=1e-12)


def test_ssd_parameters() -> None:
    rng = np.random.default_rng(1)
    b, t, h, p, g, n = 1, 10, 2, 3, 1, 4
    x = {"x": rng.normal(size=(b, t, h, p)), "dt": rng.normal(size=(b, t, h)),
         "A_log": rng.normal(size=h) * 0.3, "B": rng.normal(size=(b, t, g, n)),
         "C": rng.normal(size=(b, t, g, n)), "D": rng.normal(size=h),
         "dt_bias": rng.normal(size=h) * 0.2}
    for name in ("mamba", "builderforce"):
        a = ssd_forward_chunked(**x, chunk_len=4, convention=name).y
        conv = preset(name, families.get("ssd").conventions)
        c = ssd_forward_chunked(**x, chunk_len=4, convention=conv).y
        assert a.tobytes() == c.tobytes()
    # builderforce's SSD is mamba's with A = -softplus(A_log) and no dt on the input.
    conv = replace(preset("mamba", families.get("ssd").conventions), name="custom", A="softplus",
                   dt_input=False)
    np.testing.assert_array_equal(ssd_forward_chunked(**x, chunk_len=4, convention=conv).y,
                                  ssd_forward_chunked(**x, chunk_len=4,
                                                      convention="builderforce").y)
    conv = replace(conv, A="exp_clamped", A_clamp=(-0.1, 0.1), dt="softplus_stable")
    dy = rng.normal(size=x["x"].shape)

    def loss(a: dict) -> float:
        return float(np.sum(ssd_forward_chunked(**a, chunk_len=4, convention=conv).y * dy))

    fd = finite_difference_grads(loss, x, ["dt", "A_log"])
    gr = ssd_backward_chunked(**x, dy=dy, chunk_len=4, convention=conv)
    for r in compare_grads({"dt": gr.ddt, "A_log": gr.dA_log}, fd).values():
        assert r.rel_err < 1e-6, r


@pytest.mark.parametrize(("raw", "words"), [
    ({"dt": "exp"}, "convention.dt must be"),
    ({"A": "exp_clamped"}, "needs convention.A_clamp"),
    ({"A_clamp": [1, 2]}, "applies only with A"),
    ({"wat": 1}, "unknown key 'convention.wat'"),
    ({"D": "no"}, "convention.D must be"),
    ({"dt_input": False}, "dt_input is SSD's"),
    ({"preset": "torch"}, "convention.preset must be"),
])
def test_bad_convention_tables_name_the_key(raw: dict, words: str) -> None:
    with pytest.raises(SsmvizError, match=words.replace("(", r"\(").replace(".", r"\.")):
        parse_convention("p.toml", raw, families.get("s6").conventions)


def test_a_table_equal_to_a_preset_is_that_preset() -> None:
    assert parse_convention("p", {"preset": "builderforce"},
                            families.get("s6").conventions) == preset("builderforce")
    c = parse_convention("p", {"A": "exp_clamped", "A_clamp": [-10, 5], "B_bar": "zoh"},
                         families.get("s6").conventions)
    assert c.name == "custom" and c.zoh and c.A_clamp == (-10.0, 5.0)
    assert "A=exp_clamped" in c.describe()


def test_the_bare_recurrence_is_s6s_scan_over_its_stage_roles() -> None:
    from ssmviz.core.families.s6.reference import s6_stages
    from ssmviz.core.reference.scan import linear_recurrence

    x = _s6_inputs(b=2, t=7)
    h0 = np.random.default_rng(2).normal(size=(2, 3, 4))
    for conv in ("mamba", "builderforce"):
        st = s6_stages(x, conv, {})
        h = linear_recurrence(st["A_bar"], st["Bu"], h0)
        np.testing.assert_allclose(h, s6_forward(**x, convention=conv, h0=h0).h, rtol=1e-12,
                                   atol=1e-14)
    a = np.array([[2.0, 3.0]]).T[None]  # (1, 2, 1): h = (1, 3·1 + 1)
    np.testing.assert_array_equal(linear_recurrence(a, np.ones((1, 2, 1))), [[[1.0], [4.0]]])


def test_the_silu_gate_and_its_gradients_match_finite_differences() -> None:
    from ssmviz.core.reference.conventions import gated

    x = _s6_inputs(seed=6, b=1, t=5, d=2, n=3)
    x["z"] = np.random.default_rng(8).normal(size=x["u"].shape)
    dy = np.random.default_rng(9).normal(size=x["u"].shape)

    def run(a: dict) -> tuple:
        inp = {k: v for k, v in a.items() if k != "z"}
        fwd = s6_forward(**inp)
        y, dy_scan, dz = gated(fwd.y, dy, a["z"])
        return y, s6_backward(**inp, dy=dy_scan, fwd=fwd), dz

    y, g, dz = run(x)
    np.testing.assert_allclose(y, s6_forward(**{k: v for k, v in x.items() if k != "z"}).y
                               * x["z"] / (1 + np.exp(-x["z"])), rtol=1e-12)
    fd = finite_difference_grads(lambda a: float(np.sum(run(a)[0] * dy)), x, ["z", "u"])
    for r in compare_grads({"z": dz, "u": g.du}, fd).values():
        assert r.rel_err < 1e-6, r
