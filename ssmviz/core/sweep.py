"""``ssmviz sweep``: the acceptance matrix of a kernel family, in one process.

Runs :func:`ssmviz.core.check.check_arrays` over the sizes and conventions the
issues name (S6: seq_len ∈ {1, 7, 64, 1000, 4097, 65536} × batch {1, 3}, plus a
many-channel case that takes the one-pass forward;
SSD: seq_len ∈ {1, 63, 64, 65, 1000, 16384} × chunk_len {16, 64, 256} ×
n_groups {1, 2}; both conventions) and prints one line per case with the worst
forward and gradient relative errors. Used to re-verify a kernel on a real GPU.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

from ssmviz.core.check import GRAD_TOL, CheckReport, check_arrays
from ssmviz.core.problem import CONVENTIONS, Problem
from ssmviz.core.signals import SignalSpec

S6_SEQ_LENS = (1, 7, 64, 1000, 4097, 65536)
SSD_SEQ_LENS = (1, 63, 64, 65, 1000, 16384)


def s6_cases(quick: bool = False) -> Iterator[Problem]:
    """S6 problems of the acceptance matrix (``quick``: the short sequences only)."""
    seq_lens = S6_SEQ_LENS[:4] if quick else S6_SEQ_LENS
    for seq_len, conv, batch in itertools.product(seq_lens, CONVENTIONS, (1, 3)):
        d_inner, d_state = (4, 16) if seq_len >= 4097 else (5, 16)
        yield Problem(
            family="s6",
            convention=conv,
            batch=batch,
            seq_len=seq_len,
            d_inner=d_inner,
            d_state=d_state,
            signal=SignalSpec(name="noise", seed=seq_len),
            seed=seq_len,
        )
    if quick:
        return
    # Many channels: the size at which the runner switches to the one-pass forward.
    for conv in CONVENTIONS:
        yield Problem(
            family="s6",
            convention=conv,
            batch=2,
            seq_len=1000,
            d_inner=2048,
            d_state=16,
            signal=SignalSpec(name="noise", seed=2048),
            seed=2048,
        )


def ssd_cases(quick: bool = False) -> Iterator[Problem]:
    """SSD problems of the acceptance matrix."""
    seq_lens = SSD_SEQ_LENS[:5] if quick else SSD_SEQ_LENS
    for seq_len, chunk_len, n_groups, conv in itertools.product(
        seq_lens, (16, 64, 256), (1, 2), CONVENTIONS
    ):
        yield Problem(
            family="ssd",
            convention=conv,
            batch=1 if seq_len > 1000 else 2,
            seq_len=seq_len,
            n_heads=4,
            d_head=8 if seq_len > 1000 else 16,
            n_groups=n_groups,
            d_state=16,
            chunk_len=chunk_len,
            signal=SignalSpec(name="noise", seed=seq_len),
            seed=seq_len,
        )


def _worst(report: CheckReport, grads: bool) -> float:
    vals = [v.rel_err for v in report.verdicts if v.checked and (v.tolerance == GRAD_TOL) == grads]
    return max(vals) if vals else 0.0


def cases(family: str, quick: bool = False) -> list[Problem]:
    """The problems of a family's matrix, in the order :func:`run_sweep` runs them."""
    return list(s6_cases(quick) if family == "s6" else ssd_cases(quick))


def run_sweep(
    family: str, *, quick: bool = False, runs: int = 3, out: Callable[[str], Any] = print,
    step: Callable[[str], Any] | None = None,
) -> dict[str, Any]:
    """Run the matrix; returns ``{"adapter", "cases": [...], "passed"}``. ``out`` gets
    one line per case, ``step`` (progress) its short name as each case finishes."""
    rows, adapter = [], ""
    for p in cases(family, quick):
        report = check_arrays(
            family,
            p.build(),
            convention=p.convention,
            chunk_len=p.chunk_len if family == "ssd" else None,
            runs=runs,
        )
        adapter = report.adapter
        row = {
            "sizes": report.sizes,
            "convention": p.convention,
            "passed": report.passed,
            "worst_forward_rel_err": _worst(report, grads=False),
            "worst_grad_rel_err": _worst(report, grads=True),
            "gpu_seconds": report.gpu_seconds,
            "failures": report.failures(),
        }
        rows.append(row)
        sizes = " ".join(f"{k}={v}" for k, v in report.sizes.items())
        out(
            f"{'PASS' if report.passed else 'FAIL'}  {p.convention:<12} {sizes:<80} "
            f"fwd {row['worst_forward_rel_err']:.2e}  grad {row['worst_grad_rel_err']:.2e}"
            + ("" if report.passed else "  " + "; ".join(row["failures"]))
        )
        if step is not None:
            step(f"{p.convention} seq_len={p.seq_len}")
    passed = all(r["passed"] for r in rows)
    out(f"{family}: {sum(r['passed'] for r in rows)}/{len(rows)} cases passed on {adapter}")
    return {"adapter": adapter, "family": family, "cases": rows, "passed": passed}
