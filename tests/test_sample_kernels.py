"""The sample kernels in assets/kernels/: each planted-fault sample is the correct
builderforce sample with one local change, so fixing the correct one and forgetting a
fault sample (or a fault sample drifting into a second fault) shows up here.

The samples repeat the correct module's code on purpose: each must load and build on its
own, the way a user's file does, in the app and in ``ssmviz check --kernel``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

KERNELS = Path(__file__).resolve().parent.parent / "assets" / "kernels"
REFERENCE = KERNELS / "builderforce_reference.js"
FAULTS = sorted(p.name for p in KERNELS.glob("fault_*"))
# Lines a fault may add around its marker (e.g. a workgroup array and the `if` the
# misplaced barrier sits in).
MAX_CHANGED_LINES = 5


def _code_lines(path: Path) -> list[str]:
    return [ln.strip() for ln in path.read_text().splitlines()
            if ln.strip() and not ln.strip().startswith("//")]  # fmt: skip


def test_there_are_planted_fault_samples() -> None:
    assert len(FAULTS) >= 7, FAULTS


@pytest.mark.parametrize("name", FAULTS)
def test_fault_sample_is_the_reference_with_one_local_change(name: str) -> None:
    reference = set(_code_lines(REFERENCE))
    lines = _code_lines(KERNELS / name)
    changed = [ln for ln in lines if ln not in reference]
    marked = [ln for ln in changed if "planted fault" in ln]
    assert len(marked) == 1, (name, changed)
    assert len(changed) <= MAX_CHANGED_LINES, (name, changed)
    # Everything else is the correct sample's code: most of a family's kernel is shared.
    assert len(lines) - len(changed) >= 20, name
