"""The :class:`Family` record: everything ssmviz's code outside a family asks of it.

A kernel family (S6, SSD, a test's toy recurrence) is one frozen record: its array keys,
its sizes, how a :class:`~ssmviz.core.problem.Problem` becomes its arrays, its float64
reference, its GPU runner, its ABI and the cases its sweep and benchmark run. The
problem, the check, the sweep, the benchmark, the external-kernel checks, the CLI and
the app read the record instead of branching on a family's name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.sizes import SizeSet
from ssmviz.core.reference.conventions import DEFAULT_RULES, ConventionRules

if TYPE_CHECKING:
    from ssmviz.core.families.abi import AbiProfile
    from ssmviz.core.families.teaching import Teaching
    from ssmviz.core.families.view import FamilyView
    from ssmviz.core.kernels._base import KernelResult
    from ssmviz.core.problem import Problem

Arrays = Mapping[str, np.ndarray]
Sizes = Mapping[str, int]

#: Every hidden state is returned, stored and compared up to this many elements
#: (``Family.state_elements``); the check, the plots and the RAM estimate share it.
MAX_STORED_STATES = 1 << 24


class KernelRunner(Protocol):
    """A family's GPU runner on one runtime, built by ``Family.kernel(runtime, source=...)``
    (``source``: an edited or user-given WGSL text run under the family's host code)."""

    rt: Any
    source: str

    def run_problem(
        self,
        inputs: Arrays,
        sizes: Sizes,
        *,
        convention: str,
        store_states: bool,
        timed: bool = False,
        reverse_wg: bool = False,
        backward: bool = True,
        reuse_forward: bool = False,
    ) -> KernelResult:
        """Forward (and backward) on ``inputs`` (the family's input keys); ``sizes`` holds
        at least the family's ``run_sizes``. ``store_states``: also return ``state_key``.
        ``reverse_wg``: every pass visits its workgroups in reverse order (race probe).
        ``reuse_forward``: a runner that keeps its last run may run only the backward when
        only dy changed (the same results as a full run); others run both stages."""
        ...

    def requirements_for(self, sizes: Sizes, *, store_states: bool) -> dict[str, int]:
        """Device limits a run of these sizes needs, as ``GpuRuntime.require``'s keywords."""
        ...


@dataclass(frozen=True)
class DerivedRole:
    """A tensor an external ABI may hold instead of a reference key: judged as ``key``
    re-expressed (``value``: (inputs, reference) -> its float64 value); ``note`` is what
    the verdict table says about it. ``drawn_as`` turns the kernel's tensor back into
    ``key`` for the app's plots ((tensor, inputs) -> float64; None: not drawn), and
    ``drawn_note`` says how (e.g. "+ D·dy")."""

    key: str
    note: str
    value: Callable[[Arrays, Arrays], np.ndarray]
    drawn_as: Callable[[np.ndarray, Arrays], np.ndarray] | None = None
    drawn_note: str = ""


@dataclass(frozen=True)
class RoleSpec:
    """How external ABI profiles may name this family's tensors.

    ``axes``: every role's axes, in the reference's own layout (inputs, outputs and
    ``derived`` roles). ``split``: an axis a profile may give whole that the reference
    splits (SSD: ``d_inner`` = ``n_heads`` × ``d_head``). ``sizes``: the size names a
    profile's formulas may use. ``defaults``: the small problem an external check runs
    by default; ``derive``: those sizes with the ones derived from them (SSD: d_inner,
    n_chunks, chunk_slot), checked (a one-line SsmvizError).
    """

    axes: Mapping[str, tuple[str, ...]]
    sizes: tuple[str, ...]
    defaults: Mapping[str, int]
    derive: Callable[[dict[str, int]], dict[str, int]]
    derived: Mapping[str, DerivedRole] = field(default_factory=dict)
    split: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: Stage roles: intermediates of the reference (their axes are in ``axes``) that a
    #: kernel implementing one stage reads or writes; ``stages`` computes them:
    #: (inputs, convention, sizes) -> role -> float64 array.
    stage_roles: tuple[str, ...] = ()
    stages: Callable[[Arrays, Any, Sizes], dict[str, np.ndarray]] | None = None
    #: Inputs beyond the family's keys that a profile may give (S6: the initial state
    #: ``h0``), each with the gradient the reference then returns (``dh0``).
    extra_inputs: Mapping[str, str] = field(default_factory=dict)
    #: (convention's preset, inputs, the kernel's tensors by role, every role's reference
    #: value) -> lines that say what a kernel from a file computes where it is wrong (e.g.
    #: complex_ssd's y against the model its header documents); None: none.
    findings: Callable[[str, Arrays, Arrays, Arrays], list[str]] | None = None


@dataclass(frozen=True, eq=False)
class Family:
    """One kernel family, as the rest of ssmviz sees it.

    Keys: ``input_keys`` (every input array, the upstream gradient ``dy`` last),
    ``forward_keys`` (forward outputs the check judges), ``grad_keys`` (one per input but
    dy), ``state_key`` (the forward output holding every state, returned and judged only
    while ``state_elements`` is small). Sizes: ``sizes`` (the family's declaration, its
    ``sizes.py``: names, defaults, limits, constraints; ``size_names``, ``run_sizes`` and
    ``default_sizes`` are read from it), ``bench_sizes`` (size class -> label -> sizes).

    The record itself travels through ssmviz (a problem's ``family``, a :class:`Case`'s);
    its name only where a family is read or written as text (the CLI's ``--family``, a
    session, an export, a profile). Two records are equal when they are the same one; a
    record is pickled by its name (it holds code) and found again in the registry.
    """

    name: str
    display_name: str
    #: The family's WGSL file under shaders/ ("": its runner carries its own source).
    shader: str
    input_keys: tuple[str, ...]
    forward_keys: tuple[str, ...]
    grad_keys: tuple[str, ...]
    state_key: str
    #: Every size, declared once (name, default, limit, flag, control group, constraints).
    sizes: SizeSet
    #: Size class ("full", "small", "tiny"; "reference": the float64 reference's bench)
    #: -> label -> sizes.
    bench_sizes: Mapping[str, Mapping[str, Mapping[str, int]]]
    #: Problem -> every input array (float64), keyed by ``input_keys`` (what ``build`` does).
    build_arrays: Callable[[Problem], dict[str, np.ndarray]]
    #: Input arrays -> their sizes, cross-checked; a one-line SsmvizError names a bad shape.
    infer_sizes: Callable[[Arrays], dict[str, int]]
    #: (inputs without dy, convention, sizes) -> the float64 forward (opaque; reused).
    reference_forward: Callable[[Arrays, str, Sizes], Any]
    #: (inputs, dy, convention, sizes, forward) -> every forward output and gradient.
    reference_outputs: Callable[[Arrays, np.ndarray, str, Sizes, Any], dict[str, np.ndarray]]
    #: (runtime, source=None) -> a :class:`KernelRunner`.
    kernel: Callable[..., KernelRunner]
    #: ssmviz's own kernels' ABI (host-driven: the runner plans the dispatches).
    abi: Callable[[], AbiProfile]
    #: Sizes -> elements of ``state_key`` (batch·seq_len·d_inner·d_state for S6).
    state_elements: Callable[[Sizes], int]
    #: (sizes, runs, stored_max) -> bytes of RAM the reference, the comparison and ``runs``
    #: GPU results need at their peak (estimate, high side); ``state_key`` is read back
    #: and compared only while ``state_elements`` ≤ stored_max.
    reference_bytes: Callable[[Sizes, int, int], int]
    #: quick -> the sweep's problems, as Problem fields (family and convention included).
    sweep_cases: Callable[[bool], list[dict[str, Any]]]
    #: How external profiles name this family's tensors.
    roles: RoleSpec
    #: The builderforce package's kernels of this family, as a profile table (or None).
    builderforce: Callable[[], dict[str, Any]] | None = None
    #: (runtime, size class, repeats, *, arrays, copy_bw, rates, step) -> ``ssmviz bench`` rows
    #: (``arrays(family, sizes)`` builds a problem's inputs; ``copy_bw`` is the copy
    #: kernel's bandwidth, ``rates`` the measured exp2 / FMA rates by kind, for the floors);
    #: None: the family has no benchmark. A ``problems`` keyword (label -> sizes), where
    #: it takes one, times those sizes instead (``ssmviz bench --sizes``).
    bench: Callable[..., list[dict[str, Any]]] | None = None
    #: (size class[, problems]) -> how many rows ``bench`` times (progress steps).
    bench_steps: Callable[[str], int] = lambda size: 0
    #: (sizes, stage) -> the operation that bounds the stage ("exp2" or "fma", as
    #: ``ssmviz bench`` measures their rates) and how many of them it needs at least: the
    #: arithmetic floor ``ssmviz bench --kernel`` sets beside a kernel from a file; None: none.
    floor_ops: Callable[[Sizes, str], tuple[str, int]] | None = None
    #: () -> how the app's plots slice this family's arrays; None: the app cannot show it.
    view: Callable[[], FamilyView] | None = None
    #: The operator M and the teaching views' numbers; None: the family has no teaching views.
    teaching: Teaching | None = None
    #: Conventions whose arrays are not ``input_keys`` and ``grad_keys`` (Mamba-3's
    #: builderforce complex_ssd): preset name -> (its input keys, dy last; its gradients).
    convention_keys: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = field(
        default_factory=dict)
    #: Its conventions: presets, and which parameters a profile's table may change.
    conventions: ConventionRules = DEFAULT_RULES

    def __reduce__(self) -> tuple:
        # Across processes (the kernel worker) by name: the record holds code.
        return (_registered, (self.name,))

    def __repr__(self) -> str:
        return f"<Family {self.name}>"

    # -- derived ------------------------------------------------------------------------
    def inputs_of(self, convention: Any) -> tuple[str, ...]:
        """The input keys (dy last) under ``convention`` (a preset's name or parameters)."""
        keys = self.convention_keys.get(getattr(convention, "base", convention))
        return self.input_keys if keys is None else keys[0]

    def outputs_of(self, convention: Any) -> tuple[str, ...]:
        """The forward outputs, then the gradients, under ``convention``."""
        keys = self.convention_keys.get(getattr(convention, "base", convention))
        return self.output_keys if keys is None else (*self.forward_keys, *keys[1])

    @property
    def every_input(self) -> set[str]:
        """The input keys of every convention."""
        return set(self.input_keys).union(*(k[0] for k in self.convention_keys.values()))

    @property
    def size_names(self) -> tuple[str, ...]:
        """Every size of a problem of this family, in :meth:`problem_sizes` order."""
        return self.sizes.names

    @property
    def run_sizes(self) -> tuple[str, ...]:
        """Sizes a run needs that the arrays' shapes do not carry (SSD's chunk_len)."""
        return self.sizes.run_names

    @property
    def default_sizes(self) -> dict[str, int]:
        """The sizes a user sets, with their defaults (one control each in the app)."""
        return self.sizes.defaults

    def problem_sizes(self, p: Problem) -> dict[str, int]:
        """A problem's sizes by name: defaults filled in, products (d_inner) derived."""
        return self.sizes.fill({n: getattr(p, n) for n in self.sizes.names})

    def check_problem(self, p: Problem) -> dict[str, int]:
        """Its sizes (:meth:`SizeSet.validate`): a one-line SsmvizError names the first
        bad one; returns the sizes."""
        return self.sizes.validate({n: getattr(p, n) for n in self.sizes.names})

    def reference(self, arrays: Arrays, convention: str, sizes: Sizes) -> dict[str, np.ndarray]:
        """The float64 reference: every forward output and gradient, keyed like the GPU's."""
        keys = self.inputs_of(convention)
        inputs = {k: np.asarray(arrays[k], np.float64) for k in keys[:-1]}
        dy = np.asarray(arrays[keys[-1]], np.float64)
        fwd = self.reference_forward(inputs, convention, sizes)
        return self.reference_outputs(inputs, dy, convention, sizes, fwd)

    @property
    def output_keys(self) -> tuple[str, ...]:
        """Every key the reference and the kernel produce: forward outputs, then gradients."""
        return (*self.forward_keys, *self.grad_keys)


def _registered(name: str) -> Family:
    """The registered family ``name`` (a pickled record, found again in this process)."""
    from ssmviz.core import families  # the registry imports this module

    return families.get(name)


# -- helpers the families share ---------------------------------------------------------------


def require_keys(arrays: Arrays, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The arrays of ``keys``; a one-line SsmvizError names the first missing key."""
    for key in keys:
        if key not in arrays:
            raise SsmvizError(f"inputs lack the key '{key}' (need {', '.join(keys)})")
    return {k: np.asarray(arrays[k]) for k in keys}


def check_shapes(
    a: Mapping[str, np.ndarray],
    expected: Mapping[str, tuple[tuple[int, ...], str]],
    sizes: dict[str, int],
) -> dict[str, int]:
    """Check each array's shape (``expected``: key -> (shape, its axes in words)) and
    dtype, and that every inferred size is ≥ 1; returns ``sizes``."""
    for key, (shape, text) in expected.items():
        if a[key].shape != shape:
            raise SsmvizError(f"{key} has shape {a[key].shape}, expected {text} = {shape}")
        if not np.issubdtype(a[key].dtype, np.number):
            raise SsmvizError(f"{key} must hold numbers; got dtype {a[key].dtype}")
    for name, value in sizes.items():
        if value < 1:
            raise SsmvizError(f"{name} inferred from the inputs is {value}; it must be ≥ 1")
    return sizes
