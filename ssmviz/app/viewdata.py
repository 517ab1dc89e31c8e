"""Everything the plots need for one selection, prepared off the UI thread (numpy; no
widget is made here, and only :func:`colour_lut` touches pyqtgraph, for its colour tables).

:func:`prepare_view` turns a run's arrays into a :class:`ViewData`: the selection's
:class:`~ssmviz.app.derived.Trace`, one :class:`~ssmviz.app.derived.GradView` per gradient
tensor, heatmaps downsampled along time to at most :data:`MAX_IMAGE_ROWS` rows (peak of
|value| per bin, so a single bad element still shows) with percentile colour levels, and,
on small problems, finite-difference points of every gradient tensor (central differences
of the float64 reference's loss sum(y·dy), through :mod:`ssmviz.core.reference.gradcheck`).
The UI thread then only calls setData / setImage.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ssmviz.app.derived import (
    GradView,
    Selection,
    Trace,
    family_view,
    grad_slicers,
    grad_views,
    trace,
)
from ssmviz.core.families import Family
from ssmviz.core.reference.gradcheck import finite_difference_grads

#: Heatmaps keep at most this many rows along their first (time) axis.
MAX_IMAGE_ROWS = 1024
#: Percentile used for the colour levels (outliers past it saturate).
LEVEL_PERCENTILE = 99.0
#: Elements the colour levels of a larger heatmap are measured on.
LEVEL_SAMPLE = 4096
#: Finite-difference points are computed when batch·seq_len·d_inner is at most this.
FD_MAX_ELEMENTS = 2000
#: Elements per gradient tensor checked by finite differences.
FD_POINTS = 5
FD_EPS = 1e-6
#: Time curves longer than this are drawn as a min/max envelope of the visible window
#: (plus one window each side); zoomed in to at most this many steps, at full resolution.
LOD_POINTS = 1024
#: Most points of such an envelope (min and max of ENVELOPE_POINTS / 2 bins); the plots ask
#: for one bin per pixel column of their width (:func:`envelope_points`), so they draw
#: lines as given (no downsampling there) and no more points than the pixels show.
ENVELOPE_POINTS = 1024
#: Fewest points an envelope is asked for (a plot squeezed to a few pixels).
MIN_ENVELOPE_POINTS = 128


def envelope_points(width_px: float) -> int:
    """Envelope points for a plot ``width_px`` pixels wide: a min and a max per pixel
    column, rounded up to a multiple of 64 (small resizes keep the prepared envelopes),
    within [MIN_ENVELOPE_POINTS, ENVELOPE_POINTS]."""
    want = 64 * -(-int(np.ceil(2 * max(width_px, 0.0))) // 64)
    return int(min(ENVELOPE_POINTS, max(MIN_ENVELOPE_POINTS, want)))


#: Colour maps of the heatmaps: values, and differences (symmetric levels, 0 in the middle).
VALUE_CMAP = "viridis"
DIFF_CMAP = "CET-D1"


@dataclass
class ImageView:
    """A heatmap ready for ImageItem: a (rows, cols) array, rows along x, downsampled and
    coloured through ``levels`` and the colour map into ``rgba`` ((cols, rows, 4) uint8,
    row-major): the UI thread hands it to Qt as is (NaN is transparent, ±Inf saturates).

    ``extent`` is (width, height) in the original units (time steps, states).
    """

    rgba: np.ndarray
    levels: tuple[float, float]
    extent: tuple[float, float]
    #: The colour map it was coloured with (its colour bar shows it).
    cmap: str = VALUE_CMAP


@dataclass
class FdPoints:
    """Finite-difference values at a few elements of one gradient view.

    ``index`` (k, view ndim) are positions in the view; ``fd``, ``ref`` and ``gpu`` (k,)
    are the central difference, the reference gradient and the GPU gradient there.
    """

    key: str
    index: np.ndarray
    fd: np.ndarray
    ref: np.ndarray
    gpu: np.ndarray | None

    def max_rel_err(self) -> float:
        """max |fd − gpu| (or ref, without a GPU gradient) / max(|fd|) over the points."""
        if not self.fd.size:
            return 0.0
        other = self.gpu if self.gpu is not None else self.ref
        scale = max(float(np.max(np.abs(self.fd))), 1e-30)
        return float(np.max(np.abs(self.fd - other))) / scale

    def nonzero(self) -> bool:
        """Whether any point fell on a non-zero entry (the reference's or the difference's):
        points that all sit on zero gradients check nothing."""
        return bool(np.any(self.fd != 0) or np.any(self.ref != 0))

    def summary(self) -> str:
        """For a title: "FD(5) 3e-06", or that the check is empty."""
        if not self.fd.size or not self.nonzero():
            return "no FD points on non-zero entries"
        return f"FD({self.fd.size}) {self.max_rel_err():.0e}"


@dataclass
class ViewData:
    """What the window shows for one run and selection."""

    trace: Trace
    grads: list[GradView]
    h_image: ImageView
    fd: dict[str, FdPoints] = field(default_factory=dict)
    seconds: float = 0.0
    #: Full-range min/max envelopes (x, y) of the time curves, when seq_len > LOD_POINTS,
    #: of at most ``points`` points each.
    envelopes: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    points: int = ENVELOPE_POINTS

    @property
    def sel(self) -> Selection:
        """The selection shown (clamped to the run's sizes)."""
        return self.trace.sel


def downsample_rows(a: np.ndarray, max_rows: int = MAX_IMAGE_ROWS) -> np.ndarray:
    """``a`` (rows, …) with at most ``max_rows`` rows: each bin keeps its largest-|v| entry
    (of a value and its negative, the positive one).

    NaN, then ±Inf, win their bin, so non-finite values never vanish from a heatmap.
    """
    a = np.asarray(a, np.float64)
    n = a.shape[0]
    if n <= max_rows:
        return a
    k = -(-n // max_rows)
    bins = -(-n // k)
    pad = bins * k - n
    if pad:
        a = np.concatenate([a, np.zeros((pad, *a.shape[1:]))])
    r = a.reshape(bins, k, *a.shape[1:])
    # The bin's largest |v| is its max or its min; max/min propagate NaN (then the
    # comparison is False and the min, NaN too, is taken). Twice as fast as an argmax
    # of |v| over the strided middle axis.
    if k == 2:
        hi, lo = np.maximum(r[:, 0], r[:, 1]), np.minimum(r[:, 0], r[:, 1])
    else:
        hi, lo = r.max(axis=1), r.min(axis=1)
    return np.where(hi >= -lo, hi, lo)


def envelope(y: np.ndarray, start: int = 0, max_points: int = LOD_POINTS,
             points: int = ENVELOPE_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of a curve: the samples themselves when there are at most ``max_points``,
    else per-bin min and max, at most ``points`` (peaks survive; a NaN marks its bin).

    ``y`` is ``(n,)``, or ``(n, m)`` for m curves at once (y then ``(points, m)``); x
    counts from ``start``.
    """
    y = np.asarray(y, np.float64)
    n = y.shape[0]
    if n <= max_points:
        return np.arange(start, start + n, dtype=np.float64), y
    k = -(-n // (min(points, max_points) // 2))
    bins = -(-n // k)
    pad = bins * k - n
    if pad:
        y = np.concatenate([y, np.repeat(y[-1:], pad, axis=0)])
    r = y.reshape(bins, k, *y.shape[1:])
    x0 = start + np.arange(bins, dtype=np.float64) * k
    x = np.stack([x0, x0 + (k - 1) / 2.0], axis=1).ravel()
    env = np.stack([r.min(axis=1), r.max(axis=1)], axis=1)
    return x, env.reshape(2 * bins, *y.shape[1:])


def finite_bounds(*arrays: np.ndarray | None) -> tuple[float, float] | None:
    """(min, max) over the finite values of ``arrays`` (None entries skipped); None if none."""
    los, his = [], []
    for a in arrays:
        if a is None or np.size(a) == 0:
            continue
        a = np.asarray(a, np.float64)
        lo, hi = float(a.min()), float(a.max())
        if not (np.isfinite(lo) and np.isfinite(hi)):  # rare: NaN/Inf present, filter
            f = a[np.isfinite(a)]
            if f.size == 0:
                continue
            lo, hi = float(f.min()), float(f.max())
        los.append(lo)
        his.append(hi)
    return (min(los), max(his)) if los else None


def nice_range(lo: float, hi: float, pad: float = 0.0) -> tuple[float, float]:
    """[lo, hi] widened by ``pad`` of its span, then rounded outward to a tenth of the
    span's decade, so a slightly different result keeps the same axis (no re-layout of
    the ticks, no second paint) while every value stays inside."""
    span = hi - lo
    if not span > 0:
        span = abs(lo) or 1.0
        lo, hi = lo - span / 2, hi + span / 2
        span = hi - lo
    lo, hi = lo - pad * span, hi + pad * span
    step = 10.0 ** np.floor(np.log10(hi - lo)) / 10.0
    return float(np.floor(lo / step) * step), float(np.ceil(hi / step) * step)


def time_series(tr: Trace) -> dict[str, np.ndarray]:
    """The time plots' curves by name, each ``(seq_len,)``: input, delta, a_bar,
    y_gpu and err (with a GPU y), y_ref, tol; and h, every state's, ``(seq_len, d_state)``."""
    n = tr.sel.state
    out = {"input": tr.u, "delta": tr.delta, "a_bar": tr.a_bar[:, n], "h": tr.h_ref}
    if tr.y_gpu is not None and tr.err is not None:
        out["y_gpu"], out["err"] = tr.y_gpu, tr.err
    out["y_ref"], out["tol"] = tr.y_ref, tr.tol_curve
    return out


@functools.lru_cache(maxsize=8)
def _level_sample(size: int) -> np.ndarray:
    """Fixed random positions (sorted) of :data:`LEVEL_SAMPLE` of ``size`` elements."""
    rng = np.random.default_rng(size)
    return np.sort(rng.choice(size, LEVEL_SAMPLE, replace=False))


def robust_levels(a: np.ndarray, *, symmetric: bool = False,
                  q: float = LEVEL_PERCENTILE) -> tuple[float, float]:
    """Colour levels from the ``q``-th percentiles of the finite values (outliers saturate).

    A larger array is measured on a fixed random sample of :data:`LEVEL_SAMPLE` of its
    elements: colour levels need no more, and a stride could miss whole columns. The
    levels are rounded outward to two significant digits (:func:`outward_levels`).
    """
    f = np.asarray(a, np.float64).ravel()
    if f.size > LEVEL_SAMPLE:
        f = f[_level_sample(f.size)]
    if not np.isfinite(f).all():
        f = f[np.isfinite(f)]
    if f.size == 0:
        return (-1.0, 1.0) if symmetric else (0.0, 1.0)
    if symmetric:
        mag = np.abs(f)
        m = float(np.percentile(mag, q)) or float(np.max(mag)) or 1.0
        return outward_levels(-m, m)
    lo, hi = (float(v) for v in np.percentile(f, [100.0 - q, q]))
    if hi <= lo:
        lo, hi = float(f.min()), float(f.max())
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    return outward_levels(lo, hi)


def outward_levels(lo: float, hi: float) -> tuple[float, float]:
    """[lo, hi] rounded outward to two significant digits of the larger magnitude: a
    colour bar states them as they are, and a small change of the data (a control's step)
    leaves them, so the bar is not redrawn on every run."""
    m = max(abs(lo), abs(hi))
    if not (np.isfinite(m) and m > 0):
        return lo, hi
    digits = 1 - int(np.floor(np.log10(m)))
    step = 10.0 ** -digits
    return (round(float(np.floor(lo / step)) * step, digits),
            round(float(np.ceil(hi / step)) * step, digits))


@functools.cache
def colour_lut(name: str) -> np.ndarray:
    """(256, 4) uint8 RGBA lookup table of pyqtgraph's colour map ``name``."""
    import pyqtgraph as pg  # only the colour tables; no widget is made here

    lut = pg.colormap.get(name).getLookupTable(0.0, 1.0, 256, alpha=True)
    return np.ascontiguousarray(lut, dtype=np.uint8)


def colourise(a: np.ndarray, levels: tuple[float, float], lut: np.ndarray) -> np.ndarray:
    """``a`` (rows, cols) mapped through ``levels`` onto ``lut``: (cols, rows, 4) uint8.

    As ImageItem maps a LUT: [lo, hi] spans the table's 256 entries, values past it
    saturate; NaN is transparent.
    """
    lo, hi = levels
    n = lut.shape[0]
    scale = n / (hi - lo) if hi > lo else 0.0
    idx = np.array(np.asarray(a, np.float64).T, order="C")  # row-major (cols, rows)
    idx -= lo
    idx *= scale
    nan = np.isnan(idx)
    np.clip(idx, 0, n - 1, out=idx)  # ±Inf saturate here
    has_nan = bool(nan.any())
    if has_nan:
        idx[nan] = 0
    # One 32-bit gather per pixel (the table's RGBA bytes as one word each).
    out = np.ascontiguousarray(lut, np.uint8).view(np.uint32).ravel()[idx.astype(np.intp)]
    rgba = out.view(np.uint8).reshape(*out.shape, 4)
    if has_nan:
        rgba[nan, 3] = 0
    return rgba


def image_view(a: np.ndarray, *, symmetric: bool = False,
               levels: tuple[float, float] | None = None) -> ImageView:
    """Downsample a 2-D array (rows along x), pick robust levels (unless ``levels`` are
    given, e.g. the reference's for the GPU heatmap, so equal colours mean equal values)
    and colour it (:data:`DIFF_CMAP` when ``symmetric``, else :data:`VALUE_CMAP`)."""
    a = np.asarray(a, np.float64)
    small = np.ascontiguousarray(downsample_rows(a))
    if levels is None:
        levels = robust_levels(small, symmetric=symmetric)
    cmap = DIFF_CMAP if symmetric else VALUE_CMAP
    rgba = colourise(small, levels, colour_lut(cmap))
    return ImageView(rgba, levels, (float(a.shape[0]), float(a.shape[1])), cmap)


def fd_small_enough(family: Family, inputs: Mapping[str, np.ndarray]) -> bool:
    """True when the family's first input (batch·seq_len·d_inner elements: S6's u, SSD's
    x) has at most FD_MAX_ELEMENTS (finite differences stay cheap)."""
    shape = inputs[family.input_keys[0]].shape
    return int(np.prod(shape)) <= FD_MAX_ELEMENTS


def fd_points(
    family: Family,
    convention: str,
    inputs: Mapping[str, np.ndarray],
    views: list[GradView],
    sel: Selection,
    run_sizes: Mapping[str, int] | None = None,
    *,
    points: int = FD_POINTS,
    seed: int = 0,
) -> dict[str, FdPoints]:
    """Central differences of sum(y·dy) at ``points`` elements of each gradient *view*.

    ``views`` are :func:`~ssmviz.app.derived.grad_views` of ``sel``: the elements are drawn
    inside the slice they show, so the points land on the plotted curves/heatmaps, and
    their reference and GPU values are read off the views. Float64 reference forward
    throughout.
    """
    keys = family.input_keys[:-1]  # all but dy
    fam_view = family_view(family)
    sizes = fam_view.sizes(inputs) | {k: v for k, v in (run_sizes or {}).items() if v}

    def forward(p: dict[str, np.ndarray]) -> np.ndarray:
        return fam_view.forward_y(p, convention, sizes)

    base = {k: np.array(inputs[k], np.float64) for k in keys}
    dy = np.asarray(inputs["dy"], np.float64)
    slicers = grad_slicers(family, inputs, sel)
    out: dict[str, FdPoints] = {}
    for view in views:
        key, name = view.key, view.key[1:]
        if name not in base:
            continue
        cut = slicers[key][1]
        full = base[name]
        # Flat indices of the view's elements inside the full input tensor.
        where = np.asarray(cut(np.arange(full.size).reshape(full.shape)))
        flat_where = where.reshape(-1)

        def loss(p: dict[str, np.ndarray], name=name, flat_where=flat_where) -> float:
            work = dict(base)
            arr = base[name].copy()
            arr.reshape(-1)[flat_where] = p["s"].reshape(-1)
            work[name] = arr
            return float(np.sum(forward(work) * dy))

        view_vals = full.reshape(-1)[flat_where].reshape(where.shape)
        fd = finite_difference_grads(loss, {"s": view_vals}, ["s"], eps=FD_EPS,
                                     max_elements=min(points, view_vals.size), seed=seed)["s"]
        picked = np.argwhere(~np.isnan(fd))
        sel_idx = tuple(picked.T)
        gpu_vals = view.gpu[sel_idx] if view.gpu is not None else None
        out[key] = FdPoints(key, picked, fd[sel_idx], view.ref[sel_idx], gpu_vals)
    return out


def prepare_view(
    family: Family,
    convention: str,
    inputs: Mapping[str, np.ndarray],
    ref: Mapping[str, np.ndarray],
    gpu: Mapping[str, np.ndarray],
    sel: Selection,
    run_sizes: Mapping[str, int] | None = None,
    *,
    with_fd: bool | None = None,
    previous: ViewData | None = None,
    points: int = ENVELOPE_POINTS,
) -> ViewData:
    """The trace, gradient views, heatmaps and (small problems) FD points for ``sel``.

    ``with_fd`` None computes finite differences when :func:`fd_small_enough` says so.
    ``points``: the most points of a long curve's envelope (:func:`envelope_points` of
    the plots' width).
    ``previous``: a ViewData of the same arrays (the caller vouches for that, e.g. the
    same run after a selection change): a gradient view cut from the same elements is
    taken as it was (the same object, with its heatmaps and FD points), and with the same
    batch entry and channel the state heatmap and every envelope but the chosen state's.
    """
    t0 = time.perf_counter()
    tr = trace(family, convention, inputs, ref, gpu, sel, run_sizes)
    _ = tr.err  # computed (and cached) here, not on the UI thread
    kept = {v.key: v for v in previous.grads} if previous is not None else {}
    views = [kept[v.key] if v.key in kept and _same_elements(kept[v.key].ref, v.ref) else v
             for v in grad_views(family, inputs, ref, gpu, sel)]
    fresh = [v for v in views if v is not kept.get(v.key)]
    for v in fresh:
        if v.kind != "image":
            continue
        v.images["ref"] = image_view(v.ref)
        if v.gpu is not None:
            v.images["gpu"] = image_view(v.gpu, levels=v.images["ref"].levels)
            v.images["diff"] = image_view(v.gpu - v.ref, symmetric=True)
    if previous is not None and (previous.sel.batch, previous.sel.channel, previous.points) == (
            tr.sel.batch, tr.sel.channel, points):  # another state: only Ā's curve is new
        data = ViewData(tr, views, previous.h_image, points=points)
        if previous.envelopes:
            a_bar = envelope(time_series(tr)["a_bar"], points=points)
            data.envelopes = dict(previous.envelopes, a_bar=a_bar)
        return _with_fd(data, family, convention, inputs, bool(ref), fresh, run_sizes,
                        with_fd, t0)
    h = tr.h_gpu if tr.h_gpu is not None else tr.h_ref
    data = ViewData(tr, views, image_view(h), points=points)
    if tr.seq_len > LOD_POINTS:
        series = time_series(tr)
        curves = [k for k, v in series.items() if v.ndim == 1]
        # The single curves in one pass, as columns of one array.
        x, env = envelope(np.column_stack([series[k] for k in curves]), points=points)
        data.envelopes = {k: (x, env[:, i]) for i, k in enumerate(curves)}
        data.envelopes.update({k: envelope(v, points=points) for k, v in series.items()
                               if v.ndim != 1})
    return _with_fd(data, family, convention, inputs, bool(ref), fresh, run_sizes,
                        with_fd, t0)


def _same_elements(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two cuts of the same array are views of the same elements (same memory,
    shape and strides): an O(1) test, no values compared."""
    return (a.shape == b.shape and a.strides == b.strides
            and a.__array_interface__["data"][0] == b.__array_interface__["data"][0])


def _with_fd(data: ViewData, family: Family, convention: str, inputs: Mapping[str, np.ndarray],
             has_ref: bool, fresh: list[GradView], run_sizes: Mapping[str, int] | None,
             with_fd: bool | None, t0: float) -> ViewData:
    """``data`` with the FD points of its gradient views (computed for ``fresh`` ones, the
    kept ones have theirs) and its preparation time."""
    if with_fd is None:
        with_fd = fd_small_enough(family, inputs)
    if with_fd and "dy" in inputs and has_ref:
        new = fd_points(family, convention, inputs, fresh, data.trace.sel, run_sizes)
        for v in fresh:
            v.fd = new.get(v.key)
        data.fd = {v.key: v.fd for v in data.grads if v.fd is not None}
    data.seconds = time.perf_counter() - t0
    return data
