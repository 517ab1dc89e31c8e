"""Bad-input matrix: malformed sessions through ``ssmviz SESSION --screenshot out.png``.

Every case must exit 2 with a one-line reason naming the field, print no traceback and
leave no PNG (nor any other file) behind; the session file itself is never touched.
Most are refused before Qt starts; the last few get as far as the window.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ssmviz.app.session import Session
from ssmviz.core.problem import Problem
from tests.harness import assert_fails_well, run_ssmviz, snapshot

BASE = Session(Problem(family="s6", seq_len=16, d_inner=4, d_state=4)).to_dict()
BASE_SSD = Session(
    Problem(family="ssd", seq_len=16, n_heads=2, d_head=2, n_groups=1, d_state=4, chunk_len=8)
).to_dict()


def _set(path: str, value: Any, base: dict = BASE) -> Callable[[Path], bytes]:
    """A case: BASE with the field at dotted ``path`` set to ``value``."""

    def make(_: Path) -> bytes:
        data = copy.deepcopy(base)
        *heads, last = path.split(".")
        node = data
        for part in heads:
            node = node[part]
        node[last] = value
        return json.dumps(data).encode()

    return make


def _drop_in(path: str, text: str) -> Callable[[Path], bytes]:
    """A case: BASE's JSON with the literal ``text`` replacing field ``path``'s value."""

    def make(tmp: Path) -> bytes:
        marker = "__MARK__"
        return _set(path, marker)(tmp).replace(f'"{marker}"'.encode(), text.encode())

    return make


def _raw(data: bytes) -> Callable[[Path], bytes]:
    return lambda _: data


def _inputs_npz(tmp: Path, name: str = "in.npz", seq_len: int = 8) -> str:
    arrays = Problem(family="s6", seq_len=seq_len, d_inner=4, d_state=4).build()
    np.savez(tmp / name, **arrays)
    return str(tmp / name)


def _inputs_of_other_sizes(tmp: Path) -> bytes:
    # The file says seq_len 8, the session's problem 16: the controls refuse the mix.
    data = copy.deepcopy(BASE)
    data["inputs_path"] = _inputs_npz(tmp)
    return json.dumps(data).encode()


def _kernel_missing(tmp: Path) -> bytes:
    return _set("kernel_path", str(tmp / "gone.wgsl"))(tmp)


def _signal_file_missing(tmp: Path) -> bytes:
    data = copy.deepcopy(BASE)
    data["problem"]["signal"] |= {"name": "file", "path": str(tmp / "gone.npy")}
    return json.dumps(data).encode()


#: (id, builder of the session's bytes, a substring the reason must hold)
CASES: list[tuple[str, Callable[[Path], bytes], str]] = [
    # -- the ten ------------------------------------------------------------------
    ("string_amplitude", _set("problem.signal.amplitude", "loud"),
     "problem.signal.amplitude must be a number; got 'loud'"),
    ("problem_null", _set("problem", None), "session problem must be an object; got null"),
    ("problem_list", _set("problem", [1, 2]), "session problem must be an object; got a list"),
    ("signal_list", _set("problem.signal", ["sine"]), "problem.signal must be an object"),
    ("seed_2_40", _set("problem.seed", 2**40), "seed must be ≤ 2147483647"),
    ("non_utf8", _raw(b'{"problem": {"family": "s6\xff\xfe"}}'), "not UTF-8"),
    ("inputs_path_missing", _set("inputs_path", "/nonexistent/in.npz"),
     "inputs_path file not found: /nonexistent/in.npz"),
    ("deep_nesting", _raw(b'{"problem": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
     "nests too deeply"),
    ("nan_amplitude", _drop_in("problem.signal.amplitude", "NaN"),
     "problem.signal.amplitude must be a finite number"),
    ("infinite_dt_max", _drop_in("problem.init.dt_max", "Infinity"),
     "problem.init.dt_max must be a finite number"),
    # -- types and unknown keys -----------------------------------------------------------
    ("bool_batch", _set("problem.batch", True), "problem.batch must be an integer; got true"),
    ("float_d_state", _set("problem.d_state", 4.5), "problem.d_state must be an integer"),
    ("string_seq_len", _set("problem.seq_len", "16"), "problem.seq_len must be an integer"),
    ("unknown_top_key", _set("zoom", 2), "unknown session field 'zoom'"),
    ("unknown_problem_key", _set("problem.colour", "red"), "unknown session problem field"),
    ("unknown_init_key", _set("problem.init.dt", 0.1), "unknown session problem.init field"),
    ("duplicate_key", _raw(b'{"problem": {"seed": 1, "seed": 2}}'), "'seed' twice"),
    ("not_json", _raw(b'{"problem": '), "not valid JSON"),
    ("top_level_list", _raw(b"[]"), "session must be an object; got a list"),
    ("huge_int_literal", _drop_in("problem.seed", "9" * 5000),
     "not valid JSON: Exceeds the limit (4300 digits)"),
    ("version_2", _set("ssmviz_session", 2), "version 2"),
    ("version_bool", _set("ssmviz_session", True), "version true"),
    ("inputs_path_number", _set("inputs_path", 3), "inputs_path must be a string"),
    ("kernel_path_list", _set("kernel_path", ["a"]), "kernel_path must be a string"),
    # -- every field's range --------------------------------------------------------------
    ("family", _set("problem.family", "rnn"), "family must be one of s6, ssd"),
    ("convention", _set("problem.convention", "torch"), "convention must be one of"),
    ("seq_len_0", _set("problem.seq_len", 0), "seq_len must be ≥ 1"),
    ("d_state_negative", _set("problem.d_state", -3), "d_state must be ≥ 1"),
    ("batch_huge", _set("problem.batch", 10**9), "batch must be ≤ 4096"),
    ("d_inner_huge", _set("problem.d_inner", 2**40), "d_inner must be ≤ 65536"),
    ("chunk_len_0", _set("problem.chunk_len", 0, BASE_SSD), "chunk_len must be ≥ 1"),
    ("n_groups_indivisible", _set("problem.n_groups", 3, BASE_SSD), "divisible by n_groups"),
    ("ssd_d_inner_mismatch", _set("problem.d_inner", 5, BASE_SSD), "d_inner must equal"),
    ("dy_kind", _set("problem.dy", "zeros"), "dy must be one of"),
    ("signal_name", _set("problem.signal.name", "bogus"), "signal must be one of"),
    ("signal_seed_2_40", _set("problem.signal.seed", 2**40), "signal seed must be in"),
    ("negative_frequency", _set("problem.signal.frequency", -1), "signal frequency must be ≥ 0"),
    ("amplitude_beyond_spin_box", _set("problem.signal.amplitude", 1e13),
     "signal amplitude must be a finite number within ±1e+12"),
    ("dt_min_above_dt_max", _set("problem.init", {"dt_min": 0.5, "dt_max": 0.1}),
     "dt_min/dt_max"),
    ("dt_min_zero", _set("problem.init.dt_min", 0), "init dt_min must be > 0"),
    ("dt_min_subnormal", _set("problem.init.dt_min", 5e-324), "init dt_min must be ≥ 1e-300"),
    ("A_value_negative", _set("problem.init.A_value", -1), "init A_value must be > 0"),
    ("A_init", _set("problem.init.A", "zero"), "init A must be one of"),
    ("delta_noise_negative", _set("problem.init.delta_noise", -0.5), "delta_noise must be ≥ 0"),
    # -- view ---------------------------------------------------------------------------
    ("view_null", _set("view", None), "session view must be an object; got null"),
    ("view_channel_outside", _set("view.channel", 4), "view.channel must be an integer in"),
    ("view_cursor_negative", _set("view.cursor", -1), "view.cursor"),
    ("view_cursor_past_end", _set("view.cursor", 16), "view.cursor"),
    ("view_state_string", _set("view.state", "0"), "view.state"),
    ("view_unknown", _set("view.zoom", 2), "unknown session view field 'zoom'"),
    # -- files the session names --------------------------------------------------------
    ("signal_file_missing", _signal_file_missing, "signal.path file not found"),
    ("kernel_path_missing", _kernel_missing, "kernel_path file not found"),
    ("inputs_of_other_sizes", _inputs_of_other_sizes, "seq_len is fixed by the inputs file"),
]


@pytest.mark.parametrize(("make", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_session_fails_well(tmp_path: Path, make, reason: str) -> None:
    session = tmp_path / "s.json"
    session.write_bytes(make(tmp_path))
    guarded = snapshot([session, *tmp_path.glob("*.npz")])
    out = run_ssmviz([str(session), "--screenshot", "out.png"], cwd=tmp_path, timeout=120)
    assert_fails_well(out, 2, guarded=guarded, reason=reason)
    assert not (tmp_path / "out.png").exists()


def test_the_cases_are_many_and_distinct() -> None:
    assert len(CASES) >= 25 and len({c[0] for c in CASES}) == len(CASES)


def test_base_sessions_are_valid(tmp_path: Path) -> None:
    """The matrix mutates valid sessions: without the mutation each loads."""
    for base in (BASE, BASE_SSD):
        path = tmp_path / "ok.json"
        path.write_text(json.dumps(base))
        assert Session.load(path).to_dict() == base
