"""Bad-input matrix, CLI part (issue 21, groups 1 and 4, preflight, MemoryError).

Every case runs ``ssmviz`` as a user would (tests/harness.py) in a folder holding the
prepared files, and asserts the exit code, no traceback, no death by signal, a one-line
last line and that no file there was changed, lost or half-written. Cases that fail at
argument or input validation never start the GPU (they take well under a second).
"""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from ssmviz.core import families
from ssmviz.core.problem import Problem
from tests.harness import Outcome, assert_fails_well, run_ssmviz, snapshot

KERNEL = str(Path(__file__).resolve().parent.parent / "assets/kernels/builderforce_reference.js")
SMALL = ["--seq-len", "40", "--d-inner", "2", "--d-state", "3"]


def _with(arrays: dict[str, np.ndarray], key: str, value: np.ndarray) -> dict[str, np.ndarray]:
    return dict(arrays, **{key: value})


def _structured(a: np.ndarray) -> np.ndarray:
    out = np.zeros(a.shape, dtype=[("re", "<f8"), ("im", "<f8")])
    out["re"] = a
    return out


def _header_only(path: Path, shapes: dict[str, tuple[int, ...]]) -> None:
    """An npz whose headers claim ``shapes`` (float32) with no data: tiny on disk."""
    with zipfile.ZipFile(path, "w") as zf:
        for key, shape in shapes.items():
            buf = io.BytesIO()
            np.lib.format.write_array_header_2_0(
                buf, {"descr": "<f4", "fortran_order": False, "shape": shape})
            zf.writestr(f"{key}.npy", buf.getvalue())


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """Every input file the cases use, made once."""
    d = tmp_path_factory.mktemp("bad-input-files")
    out = run_ssmviz(["check", "--family", "s6", "--convention", "builderforce", *SMALL,
                      "--runs", "1", "--export", "run.npz"], cwd=d)
    assert out.returncode == 0, out.output
    out = run_ssmviz(["check", "--family", "ssd", "--seq-len", "20", "--n-heads", "2",
                      "--d-head", "2", "--d-state", "3", "--chunk-len", "8", "--runs", "1",
                      "--export", "ssd_run.npz"], cwd=d)
    assert out.returncode == 0, out.output
    s6 = Problem(family="s6", seq_len=40, d_inner=2, d_state=3).build()
    np.savez(d / "nometa.npz", **s6)
    np.savez(d / "complex.npz", **_with(s6, "u", s6["u"] + 1j * s6["u"]))
    np.savez(d / "int.npz", **_with(s6, "u", np.arange(80).reshape(1, 40, 2)))
    np.savez(d / "int32.npz", **_with(s6, "dy", np.ones((1, 40, 2), np.int32)))
    np.savez(d / "bool.npz", **_with(s6, "D", np.array([True, False])))
    np.savez(d / "object.npz", **_with(s6, "D", np.array([1.0, None], dtype=object)))
    np.savez(d / "structured.npz", **_with(s6, "delta", _structured(s6["delta"])))
    np.savez(d / "string.npz", **_with(s6, "D", np.array(["1.0", "2.0"])))
    np.savez(d / "bytes.npz", **_with(s6, "D", np.array([b"1", b"2"])))
    np.savez(d / "longdouble.npz", **_with(s6, "B", s6["B"].astype(np.longdouble)))
    np.savez(d / "half.npz", **{k: v.astype(np.float16) for k, v in s6.items()})
    np.savez(d / "missing.npz", **{k: v for k, v in s6.items() if k != "C"})
    np.savez(d / "shape.npz", **_with(s6, "D", np.ones(5)))
    np.savez(d / "empty.npz", **{k: v[:, :0] if v.ndim == 3 else v for k, v in s6.items()})
    ssd = Problem(family="ssd", seq_len=20, n_heads=2, d_head=2, d_state=3).build()
    np.savez(d / "ssd_complex.npz", **_with(ssd, "x", ssd["x"].astype(np.complex64)))
    meta = {"family": "s6", "convention": "mamba", "sizes": {"seq_len": 40}}
    np.savez(d / "badjson.npz", **s6, meta=np.array("{not json"))
    np.savez(d / "badfamily.npz", **s6, meta=np.array(json.dumps(meta | {"family": "s4"})))
    np.savez(d / "metasizes.npz", **s6, meta=np.array(json.dumps(meta | {"sizes": {"seq_len":
                                                                                   99}})))
    np.savez(d / "metaarray.npz", **s6, meta=np.arange(3.0))
    np.savez(d / "metadeep.npz", **s6, meta=np.array("[" * 100_000 + "]" * 100_000))
    (d / "notzip.npz").write_text("this is not a zip archive\n")
    (d / "zero.npz").write_bytes(b"")
    blob = (d / "nometa.npz").read_bytes()
    (d / "truncated.npz").write_bytes(blob[: len(blob) // 2])
    (d / "somedir").mkdir()
    (d / "somedir" / "keep.txt").write_text("keep me\n")
    (d / "old.npz").write_bytes(b"previous export, must survive")
    (d / "old.json").write_text('{"previous": true}\n')
    (d / "plain.txt").write_text("a file, not a folder\n")
    huge = 1 << 20
    _header_only(d / "huge.npz", {
        "u": (1, huge, 4096), "delta": (1, huge, 4096), "A_log": (4096, 16),
        "B": (1, huge, 16), "C": (1, huge, 16), "D": (4096,), "delta_bias": (4096,),
        "dy": (1, huge, 4096)})
    return d


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    exit: int
    reason: str | None = None
    new: tuple[str, ...] = ()

    def __str__(self) -> str:
        return " ".join(self.argv)


def C(argv: str, exit: int, reason: str | None = None, new: tuple[str, ...] = ()) -> Case:
    return Case(tuple(argv.split()), exit, reason, new)


CASES = [
    # -- group 1: flags beside --inputs are honoured or refused, never ignored -----------------
    C("check --inputs run.npz --seq-len 999", 2, "seq_len is 40"),
    C("check --inputs run.npz --d-state 100000", 2, "d_state is 3"),
    C("check --inputs run.npz --signal bogus", 2, "--signal"),
    C("check --inputs run.npz --seed 3", 2, "--seed"),
    C("check --inputs run.npz --convention mamba", 2, "convention is builderforce"),
    C("check --inputs run.npz --family ssd", 2, "family is s6"),
    C("check --inputs run.npz --n-heads 4", 2, "--n-heads"),
    C("check --inputs run.npz --chunk-len 8", 2, "--chunk-len"),
    C("check --inputs nometa.npz --d-inner 7", 2, "d_inner is 2"),
    C("check --inputs nometa.npz --family ssd", 2, "'x'"),
    C("check --inputs ssd_run.npz --chunk-len 16", 2, "chunk_len is 8"),
    C("check --inputs ssd_run.npz --n-groups 2", 2, "n_groups is 1"),
    C("check --inputs ssd_run.npz --d-inner 5", 2, "d_inner is 4"),
    C("check --inputs ssd_run.npz --family s6", 2, "family is ssd"),
    C("check --family s6 --n-groups 2", 2, "--n-groups does not apply"),
    C("check --family s6 --d-head 8", 2, "--d-head does not apply"),
    C("check --abi builderforce-s6", 2, "--kernel"),
    # -- group 1: typed inputs -------------------------------------------------------------------
    C("check --inputs complex.npz", 2, "'u' is complex"),
    C("check --inputs ssd_complex.npz", 2, "'x' is complex"),
    C("check --inputs int.npz", 2, "'u' is integer"),
    C("check --inputs int32.npz", 2, "'dy' is integer"),
    C("check --inputs bool.npz", 2, "'D' is bool"),
    C("check --inputs object.npz", 2, "python objects"),
    C("check --inputs structured.npz", 2, "'delta' is a structured"),
    C("check --inputs string.npz", 2, "'D' is string"),
    C("check --inputs bytes.npz", 2, "'D' is bytes"),
    C("check --inputs longdouble.npz", 2, "'B' is non-float"),
    C("check --inputs missing.npz", 2, "'C'"),
    C("check --inputs shape.npz", 2, "D has shape"),
    C("check --inputs empty.npz", 2, "seq_len inferred from the inputs is 0"),
    C("check --inputs badjson.npz", 2, "not valid JSON"),
    C("check --inputs badfamily.npz", 2, "family 's4'"),
    C("check --inputs metasizes.npz", 2, "meta says seq_len=99"),
    C("check --inputs metaarray.npz", 2, "one JSON string"),
    C("check --inputs metadeep.npz", 2, "not valid JSON"),
    C("check --inputs notzip.npz", 2, "not an .npz"),
    C("check --inputs zero.npz", 2, "not an .npz"),
    C("check --inputs truncated.npz", 2, "truncated.npz"),
    C("check --inputs somedir", 2, "directory"),
    C("check --inputs nowhere.npz", 2, "not found"),
    # -- group 1: --kernel honours --json/--export/--inputs or refuses ----------------------------
    C(f"check --kernel {KERNEL} --signal sine", 2, "--signal does not apply to --kernel"),
    C(f"check --kernel {KERNEL} --family s6 --n-heads 4", 2, "--n-heads does not apply"),
    C(f"check --kernel {KERNEL} --export k.npz", 2, "choose one with --family"),
    C(f"check --kernel {KERNEL} --watch --json k.json", 2, "--watch"),
    C(f"check --kernel {KERNEL} --inputs run.npz --seq-len 5", 2, "seq_len is 40"),
    C(f"check --kernel {KERNEL} --inputs run.npz --seed 1", 2, "--seed"),
    C(f"check --kernel {KERNEL} --abi builderforce-ssd --family s6", 2, "--family s6"),
    C(f"check --kernel {KERNEL} --inputs complex.npz", 2, "complex"),
    # -- group 4: output paths refused before any work, no file lost ----------------------------
    C("check --export somedir", 2, "directory"),
    C("check --export out.txt", 2, "ending in .npz"),
    C("check --export old.json", 2, "ending in .npz"),
    C("check --json out.txt", 2, "ending in .json"),
    C("check --json old.npz", 2, "ending in .json"),
    C("check --json somedir", 2, "directory"),
    C("check --inputs run.npz --export run.npz", 2, "same file"),
    C("check --export nofolder/x.npz", 2, "does not exist"),
    C("check --export plain.txt/x.npz", 2, "does not exist"),
    C(f"check --kernel {KERNEL} --export somedir", 2, "directory"),
    C("sweep --json out.txt", 2, "ending in .json"),
    C("sweep --json somedir", 2, "directory"),
    C("bench --family reference --json old.npz", 2, "ending in .json"),
    C("--screenshot somedir", 2, "directory"),
    C("--screenshot shot.jpg", 2, "ending in .png"),
    # -- bench and sweep flags that cannot apply are refused ---------------------------------------
    C("bench --ui --family all", 2, "--family all does not apply to bench --ui"),
    C("bench --ui --family ssd --view complex", 2,
      "--view complex: the ssd family has no complex view (its views: operator, chunks, "
      "duality)"),
    C("bench --ui --size tiny", 2, "--size does not apply"),
    C("bench --ui --repeats 2", 2, "--repeats does not apply"),
    C("bench --ui --passes", 2, "--passes does not apply"),
    C("bench --ui --reference", 2, "--reference does not apply"),
    C("bench --family reference --passes", 2, "--passes does not apply"),
    C("bench --family reference --size tiny", 2, "--size does not apply"),
    C("bench --family reference --reference", 2, "--reference does not apply"),
    C("bench --family reference --cpu", 2, "--cpu does not apply"),
    C("bench --repeats 0", 2, "repeats"),
    C("sweep --runs 0", 2, "runs"),
    # -- preflight: a problem past the RAM is refused before any work ---------------------------
    C("check --inputs huge.npz", 2, "of RAM"),
    C(f"check --kernel {KERNEL} --inputs huge.npz", 2, "of RAM"),
    C(f"check --kernel {KERNEL} --family s6 --seq-len 4194304 --d-inner 1024", 2, "of RAM"),
    C("check --seq-len 4194304 --d-inner 64 --d-state 16", 2, "of RAM"),
    C("check --family ssd --seq-len 1048576 --n-heads 16 --d-head 1 --chunk-len 2048", 2,
      "of RAM"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_bad_input(case: Case, files: Path, tmp_path: Path) -> None:
    shutil.copytree(files, tmp_path, dirs_exist_ok=True)
    guarded = snapshot(p for p in tmp_path.rglob("*") if p.is_file())
    out = run_ssmviz(list(case.argv), cwd=tmp_path, timeout=60)
    assert_fails_well(out, case.exit, guarded=guarded, allowed_new=case.new, reason=case.reason)
    assert out.seconds < 20, f"took {out.seconds:.1f} s: {case}"


# -- cases that run: the flag must change what ran --------------------------------------------


def test_readme_round_trip_reruns_in_builderforce(files: Path, tmp_path: Path) -> None:
    shutil.copytree(files, tmp_path, dirs_exist_ok=True)
    guarded = snapshot([tmp_path / "run.npz"])
    out = run_ssmviz(["check", "--family", "s6", "--inputs", "run.npz", "--runs", "1",
                      "--export", "again.npz"], cwd=tmp_path)
    assert_fails_well(out, 0, guarded=guarded, allowed_new=["again.npz"], reason="verdict: PASS")
    assert "s6 / builderforce" in out.stdout and "from its meta" in out.stdout
    first, again = np.load(tmp_path / "run.npz"), np.load(tmp_path / "again.npz")
    assert np.array_equal(first["gpu_y"], again["gpu_y"])
    assert json.loads(str(again["meta"]))["convention"] == "builderforce"


def test_ssd_inputs_take_chunk_len_from_the_meta(files: Path, tmp_path: Path) -> None:
    shutil.copytree(files, tmp_path, dirs_exist_ok=True)
    out = run_ssmviz(["check", "--inputs", "ssd_run.npz", "--runs", "1"], cwd=tmp_path)
    assert_fails_well(out, 0, reason="verdict: PASS")
    assert "ssd / mamba" in out.stdout and "chunk_len=8" in out.stdout  # not the default 64


@pytest.mark.parametrize(("flags", "shown"), [
    ([], "convention mamba (the default; set --convention)"),
    (["--convention", "builderforce"], "convention builderforce (from --convention"),
])
def test_inputs_without_meta_say_which_convention(files: Path, tmp_path: Path, flags,
                                                  shown) -> None:
    shutil.copytree(files, tmp_path, dirs_exist_ok=True)
    out = run_ssmviz(["check", "--inputs", "nometa.npz", "--runs", "1", *flags], cwd=tmp_path)
    assert_fails_well(out, 0, reason="verdict: PASS")
    assert shown in out.stdout
    assert f"s6 / {flags[-1] if flags else 'mamba'}" in out.stdout


def test_float16_inputs_run_with_a_note(files: Path, tmp_path: Path) -> None:
    shutil.copytree(files, tmp_path, dirs_exist_ok=True)
    out = run_ssmviz(["check", "--inputs", "half.npz", "--runs", "1", "--export", "h.npz"],
                     cwd=tmp_path)
    assert_fails_well(out, 0, allowed_new=["h.npz"], reason="verdict: PASS")
    assert "stored as float16: widened to float32" in out.stdout
    half, run = np.load(tmp_path / "half.npz"), np.load(tmp_path / "h.npz")
    for key in families.get("s6").input_keys:  # widened exactly: the values the user stored
        assert run[key].dtype == np.float32
        assert np.array_equal(run[key], half[key].astype(np.float32))


def test_kernel_honours_json_export_and_inputs(files: Path, tmp_path: Path) -> None:
    shutil.copytree(files, tmp_path, dirs_exist_ok=True)
    guarded = snapshot([tmp_path / "run.npz"])
    out = run_ssmviz(["check", "--kernel", KERNEL, "--inputs", "run.npz", "--runs", "1",
                      "--json", "k.json", "--export", "k.npz"], cwd=tmp_path)
    assert_fails_well(out, 0, guarded=guarded, allowed_new=["k.json", "k.npz"], reason="PASS")
    verdicts = json.loads((tmp_path / "k.json").read_text())
    (res,) = verdicts["results"]
    assert res["profile"] == "builderforce-s6" and res["report"]["passed"] is True
    assert res["report"]["sizes"]["seq_len"] == 40  # the inputs' sizes, not the default 37
    data = np.load(tmp_path / "k.npz")
    assert "gpu_y" in data.files and "ref_y" in data.files and "gpu_h_cache[h]" in data.files
    run = np.load(tmp_path / "run.npz")
    assert np.array_equal(data["u"], run["u"].astype(np.float32).astype(np.float64))


def test_failed_json_write_keeps_the_old_export(files: Path, tmp_path: Path) -> None:
    # /proc takes no new files, even as root: the write fails after the check ran.
    shutil.copytree(files, tmp_path, dirs_exist_ok=True)
    guarded = snapshot(p for p in tmp_path.rglob("*") if p.is_file())
    out = run_ssmviz(["check", *SMALL, "--runs", "1", "--json", "/proc/ssmviz-v.json",
                      "--export", "old.npz"], cwd=tmp_path)
    assert_fails_well(out, 2, guarded=guarded, reason="cannot write /proc/ssmviz-v.json")


# -- MemoryError anywhere becomes one line, exit 2 ------------------------------------------


@pytest.mark.parametrize("where", ["ssmviz.core.check.check_arrays",
                                   "ssmviz.core.inputs.InputsFile.load",
                                   "ssmviz.core.sweep.run_sweep"])
def test_memory_error_is_one_line_exit_2(where: str, files: Path, tmp_path: Path,
                                         monkeypatch, capsys) -> None:
    from ssmviz import cli

    def oom(*_a, **_k):
        raise MemoryError

    monkeypatch.setattr(where, oom)
    argv = {"ssmviz.core.sweep.run_sweep": ["sweep", "--quick"],
            "ssmviz.core.inputs.InputsFile.load": ["check", "--inputs",
                                                   str(files / "nometa.npz")]}.get(
        where, ["check", *SMALL])
    before = sorted(p.name for p in tmp_path.iterdir())
    monkeypatch.chdir(tmp_path)
    code = cli.main(argv)
    cap = capsys.readouterr()
    out = Outcome(argv, code, cap.out, cap.err)
    assert_fails_well(out, 2, reason="out of memory")
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_matrix_is_large_enough() -> None:
    assert len(CASES) >= 45
