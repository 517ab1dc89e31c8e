"""``ssmviz bench --ui``: how responsive the desktop app is, measured on a real window.

Two figures:

1. **Change → plots latency.** Over ``batches`` batches of ``changes`` edits of a control
   (the input signal's frequency, so every edit needs a new GPU + reference run) at
   batch 1, seq_len 2048, d_inner 16, d_state 16: the time from the control's value
   change to the end of the plot update (the result's setData/setImage done and the
   resulting paint events processed; a long result is shown over several event-loop
   turns, and the clock stops after the last). Each edit starts from an idle app. With
   a teaching view open (``view``, e.g. "operator": ``bench --ui --view operator``) the
   app is idle once that view shows the run too, and the view's own latency (change →
   the view updated) is reported beside.
   Median, p90 and max per batch and over all (the spread between batches is the
   figure's own noise), the core count and the load average after each batch, and where
   the time goes (waiting, the run, preparing the plot data, the UI-thread update, and
   paint: everything after the result reached the UI thread that is not setData), in
   wall time and in each thread's CPU time (steadier on a shared machine).
2. **UI-thread stalls during a long run.** A 5 ms QTimer heartbeat runs while a
   seq_len 65536 problem is computed; the largest gap between two ticks while the run is
   in flight (target ≤ 50 ms), and separately the gap that includes showing its result.

:func:`ui_bench` returns the figures (sizes are arguments, so tests use tiny ones);
:func:`run_ui_bench` is the CLI entry point: prints them and writes JSON.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ssmviz.app.events import wait_until
from ssmviz.core import families
from ssmviz.core.errors import SsmvizError
from ssmviz.core.families import Family

LATENCY_TARGET_MS = 50.0
GAP_TARGET_MS = 50.0
HEARTBEAT_MS = 5
DEFAULT_BIG_SEQ_LEN = 65536
RUN_TIMEOUT_S = 600.0


def _app():
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    from ssmviz.app import interrupt
    from ssmviz.core.memory import check_app_address_space

    check_app_address_space()
    app = QApplication.instance() or QApplication([sys.argv[0] if sys.argv else "ssmviz"])
    interrupt.watch(app)
    interrupt.raise_if_interrupted()
    return app


def _idle(window) -> bool:
    return (not window.scheduler.waiting and not window.view_worker.busy
            and not window.teaching.busy)


def _settle(app, window) -> None:
    wait_until(app, lambda: _idle(window), RUN_TIMEOUT_S)
    for _ in range(3):
        app.processEvents()


def _shown(window, generation: int) -> bool:
    """A result newer than ``generation`` is in, nothing newer is pending, and every part
    of its plots has been applied (long results are shown over several event-loop turns)."""
    r = window.result
    return (r is not None and r.generation > generation and not window.scheduler.waiting
            and window.applied_generation == r.generation)


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


def _load() -> list[float]:
    """The 1, 5 and 15 minute load averages ([] where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return []


def _summary(lat: list[float]) -> dict[str, float]:
    return {"median_ms": round(statistics.median(lat) * 1e3, 3),
            "p90_ms": round(_pct(lat, 90) * 1e3, 3), "max_ms": round(max(lat) * 1e3, 3)}


def measure_latency(app, window, problem, changes: int, batches: int = 1,
                    view: str | None = None) -> dict[str, Any]:
    """Median, p90 and max of control change → plots updated, over ``batches`` batches of
    ``changes`` edits each (the spread between batches is the measurement's own noise),
    with the median wall and CPU time of each part and the load average beside them;
    ``view``: a teaching view of the problem's family opened once its first run is shown."""
    from ssmviz.app.worker import RUN_THREAD

    w = window
    wait_until(app, lambda: _idle(w), RUN_TIMEOUT_S)
    gen0 = w.scheduler.generation
    w.controls.set_problem(problem)
    if not wait_until(app, lambda: w.scheduler.generation > gen0 and _idle(w), RUN_TIMEOUT_S):
        raise RuntimeError("the first run did not finish")
    if view is not None:  # now that the family is the problem's (its views are in tabs)
        w.teaching.open(view)
        if not wait_until(app, lambda: _idle(w), RUN_TIMEOUT_S):
            raise RuntimeError(f"the {view} view did not show the first run")
    _settle(app, w)
    lat, run, prep, queue, to_ui, update, paint = [], [], [], [], [], [], []
    cpu: dict[str, list[float]] = {k: [] for k in (
        "run thread: run (GPU host side + compare)", "reference (while the GPU computes)",
        "run thread: prepare plot data", "UI thread: setData", "UI thread: paint and events")}
    errors, per_batch, load = [], [], [_load()]
    view_at: list[float] = []  # when the teaching view on screen last showed a run
    view_lat: list[float] = []
    panel = w.teaching.panel
    panel.viewShown.connect(lambda *_: view_at.append(time.perf_counter()))
    base = float(problem.signal.frequency)
    for i in range(changes * batches):
        gen = w.scheduler.generation
        target = base * (1.0 + 0.05 * ((i % 7) + 1))  # every edit changes the inputs
        t0, c0 = time.perf_counter(), time.thread_time()
        w.controls.set_value("signal.frequency", target)
        ok = wait_until(app, lambda g=gen: _shown(w, g), RUN_TIMEOUT_S)
        app.processEvents()  # the repaint the new data scheduled
        t1, c1 = time.perf_counter(), time.thread_time()
        if not ok:
            raise RuntimeError("a run did not finish")
        r = w.result
        if r.error:
            errors.append(r.error)
        lat.append(t1 - t0)
        run.append(r.finished_at - r.started_at)
        prep.append(getattr(r.view, "seconds", 0.0))
        queue.append(r.started_at - t0)
        to_ui.append(w.update_started - r.finished_at - prep[-1])
        update.append(w.update_seconds)
        paint.append(t1 - w.update_started - w.update_seconds)
        run_cpu = r.cpu_seconds.get("run", 0.0)
        if r.report is not None and r.report.reference_thread == RUN_THREAD:
            run_cpu -= r.reference_seconds  # it ran on the run thread, in the GPU's wait
        parts = (run_cpu, r.reference_seconds,
                 r.cpu_seconds.get("prepare", 0.0), w.update_cpu, c1 - c0 - w.update_cpu)
        for k, v in zip(cpu, parts, strict=True):
            cpu[k].append(v)
        if (i + 1) % changes == 0:
            per_batch.append(_summary(lat[-changes:]))
            load.append(_load())
        _settle(app, w)
        if panel.seen and view_at and view_at[-1] > t0:
            view_lat.append(view_at[-1] - t0)
    ms = lambda xs: [round(x * 1e3, 3) for x in xs]  # noqa: E731
    med = lambda xs: round(statistics.median(xs) * 1e3, 3)  # noqa: E731
    return {
        "family": problem.family.name,
        "sizes": problem.sizes(),
        "changes": changes,
        "batches": per_batch,
        **_summary(lat),
        "target_ms": LATENCY_TARGET_MS,
        "median_parts_ms": {
            "to_worker_start": med(queue),
            "run (GPU + reference + compare)": med(run),
            "prepare plot data (worker)": med(prep),
            "to the UI thread": med(to_ui),
            "ui update (setData)": med(update),
            "paint": med(paint),
        },
        "median_cpu_ms": {k: med(v) for k, v in cpu.items()},
        "cpu_count": os.cpu_count(),
        "load_avg": load,  # before the first batch, then after each
        "latencies_ms": ms(lat),
        "errors": sorted(set(errors)),
        "view": panel.current() if panel.seen else None,
        "view_latency": _summary(view_lat) if view_lat else None,
    }


def measure_heartbeat(app, window, problem, interval_ms: int = HEARTBEAT_MS) -> dict[str, Any]:
    """Largest gap between ``interval_ms`` heartbeat ticks while ``problem`` runs."""
    from PySide6.QtCore import Qt, QTimer

    w = window
    _settle(app, w)
    ticks: list[float] = []
    cpu: list[float] = []  # the UI thread's CPU clock at each tick

    def tick() -> None:
        ticks.append(time.perf_counter())
        cpu.append(time.thread_time())

    beat = QTimer(interval=interval_ms)
    beat.setTimerType(Qt.TimerType.PreciseTimer)
    beat.timeout.connect(tick)
    beat.start()
    wait_until(app, lambda: len(ticks) > 10, 5.0)
    gen = w.scheduler.generation
    t_submit = time.perf_counter()
    w.controls.set_problem(problem)
    ok = wait_until(app, lambda: w.scheduler.generation > gen and _shown(w, gen), RUN_TIMEOUT_S)
    t_arrived = w.update_started
    t_end = time.perf_counter()
    # Keep beating a little so the paint after the update is inside a measured gap.
    wait_until(app, lambda: time.perf_counter() > t_end + 0.3, 5.0)
    beat.stop()
    if not ok:
        raise RuntimeError("the long run did not finish")
    r = w.result
    pairs = [(a, b) for a, b in itertools.pairwise(ticks) if b > t_submit]
    in_flight = [b - a for a, b in pairs if b <= t_arrived]
    worst = max(((b - a, a) for a, b in pairs if b <= t_arrived), default=(0.0, t_submit))
    after = [b - a for a, b in pairs if b > t_arrived]
    # The UI thread's own CPU time inside each gap: what a gap would last on an idle
    # machine (the wall-clock gap also counts the time slices other processes took).
    cpu_after = [cb - ca for (a, b), ca, cb in zip(itertools.pairwise(ticks), cpu, cpu[1:],
                                                    strict=False) if b > t_arrived]
    return {
        "family": problem.family.name,
        "sizes": problem.sizes(),
        "heartbeat_ms": interval_ms,
        "run_seconds": round(r.finished_at - r.started_at, 3),
        "prepare_seconds": round(getattr(r.view, "seconds", 0.0), 3),
        "ticks_in_flight": len(in_flight),
        "max_gap_in_flight_ms": round(max(in_flight, default=0.0) * 1e3, 3),
        "max_gap_at_s": round(worst[1] - t_submit, 3),  # when it began, after the change
        "p99_gap_in_flight_ms": round(_pct(in_flight, 99) * 1e3, 3) if in_flight else 0.0,
        "max_gap_showing_result_ms": round(max(after, default=0.0) * 1e3, 3),
        "max_gap_cpu_showing_result_ms": round(max(cpu_after, default=0.0) * 1e3, 3),
        "ui_update_ms": round(w.update_seconds * 1e3, 3),
        "target_ms": GAP_TARGET_MS,
        "error": r.error,
    }


def _latency_sizes(family: Family) -> dict[str, int]:
    """The family's latency problem (its ``bench_sizes["ui"]``); one line when none."""
    table = family.bench_sizes.get("ui")
    if not table:
        raise SsmvizError(f"bench --ui: the {family.name} family declares no latency problem "
                          "(bench_sizes[\"ui\"])")
    return dict(next(iter(table.values())))


def ui_bench(*, small: Any = None, big: Any = None, changes: int = 20, batches: int = 3,
             interval_ms: int = HEARTBEAT_MS, view: str | None = None,
             family: Family | None = None) -> dict[str, Any]:
    """Both measurements on a fresh, shown window with private settings.

    ``small`` / ``big`` are Problems (default: ``family``'s latency problem, its
    ``bench_sizes["ui"]``, and it at seq_len 65536); the latency is measured over
    ``batches`` batches of ``changes`` edits; ``view``: a teaching view of the problem's
    family open on top while measuring (None: none shown).
    """
    app = _app()
    from PySide6.QtCore import QSettings

    from ssmviz.app.window import MainWindow
    from ssmviz.core.problem import Problem

    family = family or families.default()
    small = small or Problem(family=family, **_latency_sizes(family))
    big = big or small.with_(seq_len=DEFAULT_BIG_SEQ_LEN)
    with tempfile.TemporaryDirectory(prefix="ssmviz-uibench-") as tmp:
        settings = QSettings(str(Path(tmp) / "settings.ini"), QSettings.Format.IniFormat)
        window = MainWindow(settings, restore=False)
        window.show()
        try:
            latency = measure_latency(app, window, small, changes, batches, view)
            gaps = measure_heartbeat(app, window, big, interval_ms)
        finally:
            window.shutdown()
            window.close()
            window.deleteLater()
            app.processEvents()
    from ssmviz.core.gpu import get_runtime

    return {"platform": app.platformName(), "adapter": get_runtime().description(),
            "latency": latency, "ui_stall": gaps}


def format_ui_bench(res: dict[str, Any]) -> str:
    lat, gap = res["latency"], res["ui_stall"]
    s = lat["sizes"]
    parts = ", ".join(f"{k} {v:.1f}" for k, v in lat["median_parts_ms"].items())
    cpu = ", ".join(f"{k} {v:.1f}" for k, v in lat["median_cpu_ms"].items())
    spread = "; ".join(f"median {b['median_ms']:.1f}, p90 {b['p90_ms']:.1f}, max {b['max_ms']:.1f}"
                       for b in lat["batches"])
    load = " → ".join("/".join(f"{x:.2f}" for x in la) for la in lat["load_avg"] if la)
    sizes = ", ".join(f"{k} {v}" for k, v in s.items() if v is not None)
    ok1 = "meets" if lat["median_ms"] <= lat["target_ms"] else "MISSES"
    ok2 = "meets" if gap["max_gap_in_flight_ms"] <= gap["target_ms"] else "MISSES"
    return "\n".join([
        f"ui bench on {res['adapter']} (Qt platform {res['platform']})",
        f"control change → plots updated, {len(lat['batches'])} × {lat['changes']} changes "
        f"on {lat.get('family', 's6')} at {sizes}: "
        f"median {lat['median_ms']:.1f} ms, p90 {lat['p90_ms']:.1f} ms, max "
        f"{lat['max_ms']:.1f} ms ({ok1} the {lat['target_ms']:.0f} ms target)",
        f"  batches of {lat['changes']} (ms): {spread}",
        f"  median parts (wall ms): {parts}",
        f"  median CPU (ms): {cpu}",
        f"  {lat['cpu_count']} cores; load average (1/5/15 min) before, then after each "
        f"batch: {load or 'n/a'}",
        f"UI-thread heartbeat ({gap['heartbeat_ms']} ms) during a seq_len "
        f"{gap['sizes']['seq_len']} run ({gap['run_seconds']:.2f} s in the worker): max gap "
        f"{gap['max_gap_in_flight_ms']:.1f} ms in flight ({ok2} the "
        f"{gap['target_ms']:.0f} ms target); showing the result: max gap "
        f"{gap['max_gap_showing_result_ms']:.1f} ms, most UI-thread CPU in one gap "
        f"{gap['max_gap_cpu_showing_result_ms']:.1f} ms (update {gap['ui_update_ms']:.1f} ms)",
    ] + ([f"with the {lat['view']} view open: the view itself updated after median "
          f"{lat['view_latency']['median_ms']:.1f} ms, p90 {lat['view_latency']['p90_ms']:.1f}"
          f" ms, max {lat['view_latency']['max_ms']:.1f} ms"] if lat.get("view_latency")
         else [])
      + ([f"run errors: {'; '.join(lat['errors'])}"] if lat["errors"] else [])
      + ([f"long run error: {gap['error']}"] if gap["error"] else []))


def run_ui_bench(json_path: str | None, view: str | None = None,
                 family: Family | None = None) -> int:
    """``ssmviz bench --ui [--family NAME] [--view NAME] [--json PATH]``: print both
    figures, write JSON; exit code 0."""
    res = ui_bench(view=view, family=family)
    print(format_ui_bench(res))
    if json_path:
        from ssmviz.core.fileio import write_text

        write_text(json_path, json.dumps(res, indent=2) + "\n")
    return 0
