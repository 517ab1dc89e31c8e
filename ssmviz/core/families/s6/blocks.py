"""How the S6 reference walks time: in blocks of steps sized to stay in cache
(:func:`block_len`), each discretised in place (:func:`discretise_chunk`) and scanned step by
step forwards (:func:`scan`) or backwards (:func:`adjoint_scan`) over row views
(:func:`rows`), with scratch arrays and the forward's Ā kept in a per-thread
:class:`Workspace` between calls."""

from __future__ import annotations

import threading
import weakref

import numpy as np

from ssmviz.core.families.s6.layer import F64, resolve_convention
from ssmviz.core.reference.conventions import Convention as ConventionParams

# Work on blocks of time steps whose (batch, chunk, d_inner, d_state) scratch arrays (512 KiB)
# stay in cache: the elementwise passes run 2-3x faster than over whole-sequence arrays, and
# the ~20 numpy calls per block stay a small share of the time even for wide rows.
CHUNK_ELEMENTS = 1 << 16
# Up to this many states (8 MiB an array) the forward leaves its Ā, and for zero-order hold
# its coefficient, in the thread's workspace for the backward of the same inputs, and the
# backward its adjoint g and Ā·g for the next backward with the same Δ, A, C and dy.
KEEP_ELEMENTS = 1 << 20


class Workspace(threading.local):
    """Float64 arrays kept per thread between calls: the scratch blocks, and Ā (and the
    zero-order-hold coefficient) of the thread's last forward.

    The app runs forward and backward on every control change. Fresh memory costs a page
    fault per 4 KiB when first written, on the app's 2-core machine about as much as a pass
    over the data: the blocks are reused. The backward needs the forward's Ā again, and
    exp (expm1 for zero-order hold) are its dearest passes: it takes them from here when
    they are its forward's, which ``kept_for`` tells (a weak reference to that forward's h).
    """

    def __init__(self) -> None:
        self.arrays: dict[str, F64] = {}
        self.kept_for: weakref.ref[np.ndarray] | None = None
        self.kept_convention = ""
        #: Per kept result (name): copies of the inputs it was computed from.
        self.sources: dict[str, tuple] = {}

    def holds(self, name: str, convention: str, *inputs: F64) -> bool:
        """Whether the kept result ``name`` was computed from equal ``inputs`` (and
        convention): a live re-run that moved one control leaves the rest unchanged, and
        what depends on the rest alone is then reused (the same bits: the same operations
        on the same values)."""
        last = self.sources.get(name)
        return (last is not None and last[0] == convention and len(last) == len(inputs) + 1
                and all(a.shape == b.shape and np.array_equal(a, b)
                        for a, b in zip(last[1:], inputs, strict=True)))

    def remember(self, name: str, convention: str, *inputs: F64) -> None:
        """Record what the kept result ``name`` was computed from."""
        self.sources[name] = (convention, *(np.array(a) for a in inputs))

    def forget(self, name: str) -> None:
        """The kept result ``name`` is about to be overwritten: it holds nothing reusable."""
        self.sources.pop(name, None)

    def get(self, name: str, shape: tuple[int, ...]) -> F64:
        """The array called ``name``, allocated anew only when its shape changes; its
        contents are whatever the last user left."""
        arr = self.arrays.get(name)
        if arr is None or arr.shape != shape:
            arr = self.arrays[name] = np.empty(shape)
        return arr

    def kept(self, h: np.ndarray, convention: str | ConventionParams) -> bool:
        """Whether "a_kept" (and "c_kept") hold Ā (and the coefficient) of the forward that
        returned ``h``."""
        return (
            self.kept_for is not None
            and self.kept_for() is h
            and self.kept_convention == resolve_convention(convention)
        )


#: The workspace of the thread that calls (one per thread: a threading.local).
WORKSPACE = Workspace()


def block_len(batch: int, seq_len: int, d_inner: int, d_state: int) -> int:
    """Time steps per block: as many as keep a block's (batch, block, d_inner, d_state)
    scratch arrays within :data:`CHUNK_ELEMENTS` elements, at least 1, at most seq_len."""
    return max(1, min(seq_len, CHUNK_ELEMENTS // (batch * d_inner * d_state)))


def discretise_chunk(dt: F64, A: F64, a_bar: F64, coef: F64 | None) -> None:
    """Fill Ā = exp(Δ·A) and, for zero-order hold, coef = (Ā - 1)/A = expm1(Δ·A)/A.

    dt: (batch, k, d_inner); a_bar, coef: (batch, k, d_inner, d_state), written in place.
    """
    np.einsum("bld,dn->bldn", dt, A, out=a_bar)  # Δ·A (einsum beats a broadcast multiply)
    if coef is not None:
        np.expm1(a_bar, out=coef)  # expm1: exact near 0, where Ā - 1 would cancel
        coef *= 1.0 / A  # A < 0 strictly: never 0/0
    np.exp(a_bar, out=a_bar)

def rows(a: F64) -> F64:
    """View (batch, k, d_inner, d_state) as k rows of (batch, d_inner·d_state), one per step.

    The time loops iterate over these views: a step then costs two ufunc calls and the
    views numpy makes while iterating; indexing the 4-D arrays per step costs about as much
    again.
    """
    batch, k = a.shape[:2]
    return a.reshape(batch, k, -1).transpose(1, 0, 2)


def scan(a_rows: F64, h_rows: F64, prev: F64 | None, tmp: F64) -> F64:
    """h_t = Ā_t h_{t-1} + B̄_t u_t, forwards in time, in place over ``h_rows`` (they hold
    B̄_t u_t on entry).

    ``prev`` is h_{t-1} for the first row (None at t = 0: h_0 = B̄_0 u_0, as h_{-1} = 0);
    returns the last h. ``out`` goes by position: a keyword costs a measurable share of
    calls this small.
    """
    rows = zip(a_rows, h_rows, strict=True)
    if prev is None:
        _, prev = next(rows)
    multiply, add = np.multiply, np.add
    for a_t, h_t in rows:
        multiply(a_t, prev, tmp)
        add(h_t, tmp, h_t)
        prev = h_t
    return prev


def adjoint_scan(a_rows: F64, g_rows: F64, nxt: F64 | None, tmp: F64) -> F64:
    """g_t = C_t dy_t + Ā_{t+1} g_{t+1}, backwards in time, in place over ``g_rows`` (they
    hold C_t dy_t on entry).

    ``nxt`` is Ā_{t+1} g_{t+1} for the last row (None at t = seq_len - 1: g_t = C_t dy_t);
    returns Ā_t g_t of the first row (in ``tmp``) for the block before.
    """
    rows = zip(a_rows[::-1], g_rows[::-1], strict=True)
    multiply, add = np.multiply, np.add
    if nxt is None:
        a_t, g_t = next(rows)
        nxt = multiply(a_t, g_t, tmp)
    for a_t, g_t in rows:
        add(g_t, nxt, g_t)
        nxt = multiply(a_t, g_t, tmp)
    return nxt
