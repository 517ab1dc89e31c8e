"""Each family declares its sizes once (its ``sizes.py``); the problem's fields, the CLI's
flags, the app's controls, the inputs' meta and the limits are read from there."""

from __future__ import annotations

import dataclasses

import pytest

from ssmviz.core import families
from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.sizes import Size, SizeSet, union
from ssmviz.core.problem import Problem


def test_problem_fields_are_the_declared_sizes() -> None:
    declared = families.problem_defaults()
    fields = {f.name: f.default for f in dataclasses.fields(Problem)}
    assert [n for n in fields if n in declared] == list(declared)
    assert {n: fields[n] for n in declared} == declared
    # d_inner is derived by SSD (n_heads·d_head): a problem leaves it None by default.
    assert declared["d_inner"] is None and declared["chunk_len"] == 64


def test_family_records_read_their_declarations() -> None:
    ssd = families.get("ssd")
    assert ssd.size_names == ssd.sizes.names
    assert ssd.run_sizes == ("chunk_len",)
    assert "d_inner" not in ssd.default_sizes  # derived: no control
    s6 = families.get("s6")
    assert s6.default_sizes == {"batch": 1, "seq_len": 256, "d_inner": 4, "d_state": 16}
    assert s6.problem_sizes(Problem()) == s6.default_sizes


def test_cli_flags_are_the_declared_sizes() -> None:
    from ssmviz.cli import CHECK_DEFAULTS, SIZE_FLAGS, build_parser

    assert tuple(families.sizes()) == SIZE_FLAGS
    check = next(a for a in build_parser()._actions if a.dest == "command").choices["check"]
    flags = {o for a in check._actions for o in a.option_strings}
    assert {s.flag for s in families.sizes().values()} <= flags
    assert CHECK_DEFAULTS["n_groups"] == 1 and "d_inner" not in CHECK_DEFAULTS


def _a_below_b(sizes) -> None:
    if sizes["a"] > sizes["b"]:
        raise SsmvizError("a must be ≤ b")


def test_validation_is_one_place_with_one_message() -> None:
    sizes = SizeSet((Size("a", 2, 10), Size("b", 3, 10),
                     Size("ab", None, 100, product_of=("a", "b"))), constraints=_a_below_b)
    assert sizes.validate({}) == {"a": 2, "b": 3, "ab": 6}
    with pytest.raises(SsmvizError, match=r"^a must be ≤ 10; got 11$"):
        sizes.validate({"a": 11})
    with pytest.raises(SsmvizError, match=r"^ab must equal a·b = 2·3 = 6; got 7$"):
        sizes.validate({"ab": 7})
    with pytest.raises(SsmvizError, match=r"^a must be ≤ b$"):
        sizes.validate({"a": 5})
    with pytest.raises(SsmvizError, match="needs a default or product_of"):
        SizeSet((Size("a", None, 10),))


def test_a_size_has_one_limit_and_registration_needs_known_sizes() -> None:
    with pytest.raises(SsmvizError, match="size batch has two maxima: 4096 and 5"):
        union([families.get("s6").sizes, SizeSet((Size("batch", 1, 5),))])
    odd = dataclasses.replace(families.get("s6"), name="odd",
                              sizes=SizeSet((Size("width", 1, 10),)))
    with pytest.raises(SsmvizError, match="declares the size width, which no built-in"):
        families.register(odd)
    assert "odd" not in families.names()


def test_problem_messages_come_from_the_declarations() -> None:
    with pytest.raises(SsmvizError, match=r"^d_state must be ≤ 256; got 257$"):
        Problem(family="ssd", d_state=257).validate()
    with pytest.raises(SsmvizError, match=r"^n_heads \(4\) must be divisible by n_groups \(3\)$"):
        Problem(family="ssd", n_groups=3).validate()
    with pytest.raises(SsmvizError, match="rotary pairs; got 15"):
        Problem(family="mamba3", d_state=15).validate()
    # Mamba-3's builderforce problems build (complex_ssd's inputs, for its profile); the
    # own kernel refuses them (tests/test_complex_ssd.py).
    Problem(family="mamba3", convention="builderforce").validate()
