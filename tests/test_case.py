"""The one Case value: the family record, the convention, every size and the arrays."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from ssmviz.core import families
from ssmviz.core.case import Case
from ssmviz.core.errors import SsmvizError
from ssmviz.core.problem import Problem


def test_a_problem_s_case_carries_the_record_and_every_size() -> None:
    case = Case.of_problem(Problem(family="ssd", seq_len=20, chunk_len=8, n_groups=2))
    assert case.family is families.get("ssd") and case.name == "ssd"
    assert case.sizes["chunk_len"] == 8 and case.sizes["d_inner"] == 64
    assert case.run == {"chunk_len": 8}
    assert list(case.arrays) == list(case.family.input_keys)
    s6 = Case.of_problem(Problem(family="s6", seq_len=9))
    assert s6.run == {} and s6.sizes == {"batch": 1, "seq_len": 9, "d_inner": 4, "d_state": 16}


def test_given_arrays_are_judged_once_with_one_message() -> None:
    arrays = Problem(family="ssd", seq_len=12).build()
    with pytest.raises(SsmvizError, match=r"^chunk_len must be an integer ≥ 1; got None$"):
        Case.of_arrays(families.get("ssd"), arrays)
    with pytest.raises(SsmvizError, match=r"^convention must be mamba or builderforce"):
        Case.of_arrays(families.get("ssd"), arrays, convention="other", run={"chunk_len": 4})
    bad = dict(arrays, dt=np.zeros((1, 11, 4)))
    with pytest.raises(SsmvizError, match=r"^dt has shape \(1, 11, 4\)"):
        Case.of_arrays(families.get("ssd"), bad, run={"chunk_len": 4})


def test_a_case_crosses_processes_by_its_family_s_name() -> None:
    case = Case.of_problem(Problem(family="mamba3", seq_len=8, chunk_len=4))
    again = pickle.loads(pickle.dumps(case))
    assert again.family is case.family and again.sizes == case.sizes
    assert all(np.array_equal(again.arrays[k], case.arrays[k]) for k in case.arrays)
    other = again.with_arrays(Problem(family="mamba3", seq_len=5).build())
    assert other.sizes["seq_len"] == 5 and other.run == {"chunk_len": 4}
