"""Plot titles that say what a run's curves are (Qt-free).

With ssmviz's own kernels every verdict names a gradient key. A kernel written by others
names its verdicts after its ABI's buffers (``dDelta (ddelta)``, as ``ssmviz check`` prints
them); :func:`grad_titles` maps them back to ssmviz's keys and says which gradients the
kernel does not produce, and why, instead of leaving an empty plot unexplained.
"""

from __future__ import annotations

from ssmviz.app.runner import RunResult
from ssmviz.app.viewdata import FD_MAX_ELEMENTS, fd_small_enough


def grad_titles(result: RunResult) -> dict[str, str]:
    """Gradient key -> title: verdict mark and relative error, or why it is absent; past
    FD_MAX_ELEMENTS, why there are no finite-difference points."""
    titles: dict[str, str] = {}
    if result.report is None:
        return titles
    no_fd = ""
    if result.inputs and not fd_small_enough(result.problem.family, result.inputs):
        no_fd = f" · finite differences only up to {FD_MAX_ELEMENTS} elements"
    ext = result.external
    for v in result.report.verdicts:
        key = ext.keys.get(v.name, v.name) if ext is not None else v.name
        if key in titles:
            continue  # the first verdict of a key is its own tensor (h_cache[h] before [Ch])
        if not v.checked:  # the source is named in the time plots and the status bar
            titles[key] = f"{key} absent: {v.note}"
            continue
        mark = "✓" if v.passed else "✗"
        title = f"{key} {mark} rel err {v.rel_err:.0e}"  # one digit: changes less often
        if ext is not None and key in ext.mapped:
            title += f" · GPU = {ext.mapped[key]}"
        titles[key] = title + no_fd
    return titles
