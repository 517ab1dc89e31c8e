"""Fuzzing (hypothesis): the session loader, the JS/WGSL kernel loader and the TOML profile
parser take any input and either succeed or raise SsmvizError (one line), never another
exception, a RecursionError or a crash.

Each loader gets random values, near-valid inputs (a valid one with one part replaced or
spliced) and deep nesting. The examples stay cheap (no GPU, no files) so the whole file runs
in CI time; ``EXAMPLES`` counts them (``test_example_budget``).
"""

from __future__ import annotations

import copy
import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ssmviz.app.session import Session
from ssmviz.core.errors import SsmvizError
from ssmviz.core.external.loader import load_kernel_text
from ssmviz.core.external.profiles import parse_profile, parse_profile_text
from ssmviz.core.problem import Problem

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_TOML = (ROOT / "assets" / "profiles" / "example.toml").read_text()
KERNEL_JS = (ROOT / "assets" / "kernels" / "builderforce_reference.js").read_text()
#: The small shipped modules (3-4 KB, a few ms to load) are the splice targets.
SMALL_JS = [p.read_text() for p in sorted((ROOT / "assets" / "kernels").glob("fault_*.js"))]
VALID_SESSIONS = [
    Session(Problem()).to_dict(),
    Session(Problem(family="ssd", seq_len=32, n_heads=2, d_head=4, chunk_len=8)).to_dict(),
]

#: max_examples per test; their sum is the file's budget.
EXAMPLES = {
    "session_values": 1000,
    "session_mutations": 1500,
    "session_text": 700,
    "kernel_text": 1500,
    "kernel_splices": 800,
    "kernel_nesting": 300,
    "profile_data": 1200,
    "profile_text": 1000,
    "profile_nesting": 300,
}


def fuzz(name: str):
    return settings(max_examples=EXAMPLES[name], deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def only_ssmviz_errors(call, *args: Any) -> None:
    """Run ``call(*args)``: a result or an SsmvizError (one line) are fine, nothing else."""
    try:
        call(*args)
    except SsmvizError as exc:
        assert "\n" not in str(exc) and str(exc).strip()


# -- random JSON-ish values ---------------------------------------------------------------------
scalars = (st.none() | st.booleans() | st.integers() | st.integers(-(2**70), 2**70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
           | st.sampled_from(["s6", "ssd", "mamba", "builderforce", "sine", "file", "ones"]))
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=8) | st.sampled_from(list(VALID_SESSIONS[0])), inner,
                      max_size=4),
    max_leaves=10,
)


def _paths(data: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path into nested dicts (the fields a mutation may replace or drop)."""
    out = [prefix] if prefix else []
    if isinstance(data, dict):
        for k, v in data.items():
            out += _paths(v, (*prefix, k))
    return out


# -- sessions -----------------------------------------------------------------------------------
@fuzz("session_values")
@given(json_values)
def test_session_from_json_of_any_value(value: Any) -> None:
    only_ssmviz_errors(Session.from_json, json.dumps(value))
    only_ssmviz_errors(Session.from_dict, value)


@fuzz("session_mutations")
@given(st.sampled_from(VALID_SESSIONS), st.data(), json_values, st.booleans())
def test_session_with_one_field_replaced_or_dropped(base, data, value, drop: bool) -> None:
    session = copy.deepcopy(base)
    path = data.draw(st.sampled_from(_paths(session)))
    node = session
    for key in path[:-1]:
        node = node[key]
    if drop:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    only_ssmviz_errors(Session.from_json, json.dumps(session))


nested_json = st.tuples(st.integers(1, 6000), st.sampled_from(["[", '{"a":', '{"problem":'])
                        ).map(lambda t: t[1] * t[0] + "0" + ("]" if t[1] == "[" else "}") * t[0])
json_like_text = st.text(alphabet='{}[]":,0123456789.eE-+ tfnrualsNIy\\', max_size=80)


@fuzz("session_text")
@given(nested_json | json_like_text | st.text(max_size=60))
def test_session_from_any_text(text: str) -> None:
    only_ssmviz_errors(Session.from_json, text)


# -- kernel files (JS modules and WGSL) ---------------------------------------------------------
JS_PIECES = ["`", "${", "}", "{", "'", '"', "\\", "/*", "*/", "//", "\n", "$", "x", " ",
             "export const K = ", "/* wgsl */ `", "@compute fn main() {}", "const N = 4;",
             "${N}", "export { K as L };", "export default `fn f() {}`", ";"]
js_text = st.lists(st.sampled_from(JS_PIECES) | st.text(max_size=4), max_size=40).map("".join)
suffixes = st.sampled_from(["k.js", "k.ts", "k.mjs", "k.wgsl", "k.txt", "k"])


@fuzz("kernel_text")
@given(js_text | st.text(max_size=80), suffixes)
def test_kernel_loader_on_any_text(text: str, path: str) -> None:
    only_ssmviz_errors(load_kernel_text, text, path)


@fuzz("kernel_splices")
@given(st.sampled_from(SMALL_JS), st.floats(0, 1), st.integers(0, 200), js_text)
def test_kernel_loader_on_a_spliced_real_module(module: str, where: float, cut: int,
                                                piece: str) -> None:
    at = int(where * len(module))
    only_ssmviz_errors(load_kernel_text, module[:at] + piece + module[at + cut:], "k.js")


nesting = st.tuples(st.integers(1, 4000), st.sampled_from(["${`", "`${", "${{", "${'", "${/*"]),
                    st.booleans())


@fuzz("kernel_nesting")
@given(nesting)
def test_kernel_loader_on_deep_nesting(case: tuple[int, str, bool]) -> None:
    depth, opener, closed = case
    body = opener * depth + ("x" + "`}" * depth if closed else "")
    only_ssmviz_errors(load_kernel_text, "export const K = /* wgsl */ `" + body + "`;", "k.js")


# -- TOML profiles --------------------------------------------------------------------------------
EXAMPLE = tomllib.loads(EXAMPLE_TOML)
FORMULAS = st.sampled_from(["seq_len", "ceil_div(seq_len, 64)", "d_inner * d_state", "(", "1/0",
                            "min()", "max(1, 2", "x²³", "-" * 50 + "1", "(" * 300 + "1"
                            + ")" * 300, "99999999999999999999**9"])


@fuzz("profile_data")
@given(st.data(), json_values | FORMULAS, st.booleans())
def test_profile_with_one_entry_replaced_or_dropped(data, value, drop: bool) -> None:
    profile = copy.deepcopy(EXAMPLE)
    path = data.draw(st.sampled_from(_paths(profile)))
    node = profile
    for key in path[:-1]:
        node = node[key]
    if drop:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    only_ssmviz_errors(parse_profile, profile)


toml_lines = EXAMPLE_TOML.splitlines()
toml_pieces = st.sampled_from(["[", "]", "[[", "]]", "=", '"', "'''", '"""', "{", "}", ",",
                               "\n", "#", "a", "1", "1e999", "nan", "true", "passes",
                               "[buffers.u]", "dims = ", "role = "])


@fuzz("profile_text")
@given(st.integers(0, len(toml_lines)), st.integers(0, 3),
       st.lists(toml_pieces | st.text(max_size=3), max_size=12).map("".join),
       st.binary(max_size=3))
def test_profile_text_with_a_line_spliced(at: int, cut: int, piece: str, junk: bytes) -> None:
    text = "\n".join([*toml_lines[:at], piece, *toml_lines[at + cut:]])
    only_ssmviz_errors(parse_profile_text, text.encode() + junk)


@fuzz("profile_nesting")
@given(st.integers(1, 5000), st.sampled_from(["[", "{a = ", "[{x = "]))
def test_profile_text_with_deep_nesting(depth: int, opener: str) -> None:
    closer = {"[": "]", "{a = ": "}", "[{x = ": "}]"}[opener]
    only_ssmviz_errors(parse_profile_text, f"params = {opener * depth}1{closer * depth}\n")


def test_example_budget() -> None:
    """At least 8000 examples in all (the npz reader's are counted elsewhere)."""
    assert sum(EXAMPLES.values()) >= 8000


@pytest.mark.parametrize("text", [EXAMPLE_TOML])
def test_the_seeds_are_valid(text: str) -> None:
    """The mutations start from inputs that load: a failure there is the mutation's."""
    assert parse_profile_text(text).name == "example-bf-s6-forward"
    for module in [KERNEL_JS, *SMALL_JS]:
        assert load_kernel_text(module, "k.js").sources
    for base in VALID_SESSIONS:
        assert Session.from_json(json.dumps(base)).to_dict() == base
