"""One :class:`Case`: the problem the core checks, as one value.

A case is the family (its registry record, not its name), the numerical convention, every
size of the problem, validated once (the arrays' shapes, cross-checked, and the run sizes
they do not carry: SSD's chunk_len) and the input arrays. The CLI and the app build one,
from a :class:`~ssmviz.core.problem.Problem` or from given arrays, and hand it to the
check and the reference instead of a family name, a chunk length and loose keywords.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ssmviz.core.errors import SsmvizError
from ssmviz.core.families.family import Family
from ssmviz.core.reference._common import CONVENTIONS

if TYPE_CHECKING:
    from ssmviz.core.problem import Problem


@dataclass(frozen=True)
class Case:
    """A problem as the core runs it.

    ``family``: the registry record. ``convention``: mamba or builderforce. ``sizes``:
    every size (the family's ``infer_sizes`` of the arrays, then its ``run_sizes``).
    ``arrays``: the family's input keys (dy last), as given (float64 or float32).
    """

    family: Family
    convention: str
    sizes: Mapping[str, int]
    arrays: Mapping[str, np.ndarray]

    @classmethod
    def of_arrays(cls, family: Family, arrays: Mapping[str, np.ndarray], *,
                  convention: str = "mamba", run: Mapping[str, int | None] | None = None,
                  ) -> Case:
        """The case of given input arrays; ``run``: the family's run sizes (SSD's chunk
        length), which the shapes do not carry. A one-line SsmvizError names the first bad
        convention, missing key, mismatched shape or missing run size."""
        if convention not in CONVENTIONS:
            raise SsmvizError(f"convention must be mamba or builderforce; got '{convention}'")
        sizes = family.infer_sizes(arrays)
        given = run or {}
        for name in family.run_sizes:
            value = given.get(name)
            if value is None or isinstance(value, bool) or int(value) < 1:
                raise SsmvizError(f"{name} must be an integer ≥ 1; got {value!r}")
            sizes[name] = int(value)
        return cls(family, convention, sizes,
                   {k: np.asarray(arrays[k]) for k in family.inputs_of(convention)})

    @classmethod
    def of_problem(cls, problem: Problem) -> Case:
        """The case a Problem builds (validated once, by :meth:`Problem.build`)."""
        fam = problem.family
        return cls.of_arrays(fam, problem.build(), convention=problem.convention,
                             run={k: v for k, v in problem.sizes().items() if k in fam.run_sizes})

    @property
    def name(self) -> str:
        """The family's name ("s6", "ssd")."""
        return self.family.name

    @property
    def run(self) -> dict[str, int]:
        """The run sizes (the sizes the arrays' shapes do not carry)."""
        return {k: self.sizes[k] for k in self.family.run_sizes}

    def with_arrays(self, arrays: Mapping[str, np.ndarray]) -> Case:
        """The case of other arrays (their sizes inferred again), same family, convention
        and run sizes."""
        return Case.of_arrays(self.family, arrays, convention=self.convention, run=self.run)

