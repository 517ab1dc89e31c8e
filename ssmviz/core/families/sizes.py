"""How a family declares its sizes: one :class:`Size` per name, gathered in a :class:`SizeSet`.

Each family writes its size names once, in its own ``sizes.py``; everything else reads
them from there: the problem's fields (:class:`~ssmviz.core.problem.Problem`), the CLI's
size flags, the app's size controls, the sizes an inputs archive's meta may name, the size
limits and the validation of a problem's sizes (:meth:`SizeSet.validate`, the one place
that judges them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from ssmviz.core.errors import SsmvizError
from ssmviz.core.fields import check_int


@dataclass(frozen=True)
class Size:
    """One size of a family's problem, by its paper name (``seq_len``, ``d_state``).

    ``default``: its value when a problem does not set it (None: the product below).
    ``maximum``: the largest value accepted before the device is even asked (keeps a typo
    like seq_len=10**12 from allocating; device limits are checked separately); the same
    name has the same maximum in every family. ``product_of``: the sizes it is the product
    of (SSD: d_inner = n_heads·d_head); such a size is not set by the user, and when given
    it must agree. ``run``: the arrays' shapes do not carry it, a run needs it besides them
    (SSD's chunk_len). ``group``: the app's control group. ``help``: the CLI's help for
    its flag (:attr:`flag`; the first family that declares the name gives it).
    """

    name: str
    default: int | None
    maximum: int
    product_of: tuple[str, ...] = ()
    run: bool = False
    group: str = "Sizes"
    minimum: int = 1
    help: str = ""

    @property
    def flag(self) -> str:
        """The CLI flag (``--seq-len``)."""
        return "--" + self.name.replace("_", "-")

    @property
    def user_set(self) -> bool:
        """Whether a user sets this size (one control, one flag): every size but a product."""
        return not self.product_of


@dataclass(frozen=True)
class SizeSet:
    """A family's sizes, in the order its ``sizes()`` lists them, and its constraints.

    ``constraints``: (sizes, every one filled in) -> None, a one-line SsmvizError naming the
    first broken rule (SSD: n_heads divisible by n_groups).
    """

    sizes: tuple[Size, ...]
    constraints: Callable[[Mapping[str, int]], None] = field(default=lambda sizes: None)

    def __post_init__(self) -> None:
        names = [s.name for s in self.sizes]
        if len(set(names)) != len(names):
            raise SsmvizError(f"size names repeat: {', '.join(names)}")
        for s in self.sizes:
            if s.default is None and not s.product_of:
                raise SsmvizError(f"size {s.name} needs a default or product_of")
            missing = [n for n in s.product_of if n not in names]
            if missing:
                raise SsmvizError(f"size {s.name} is a product of {', '.join(missing)}, "
                                  "which the family does not declare")

    @property
    def names(self) -> tuple[str, ...]:
        """Every size name, in order."""
        return tuple(s.name for s in self.sizes)

    @property
    def run_names(self) -> tuple[str, ...]:
        """The sizes a run needs that the arrays' shapes do not carry."""
        return tuple(s.name for s in self.sizes if s.run)

    @property
    def defaults(self) -> dict[str, int]:
        """The sizes a user sets, with their defaults (one control each in the app)."""
        return {s.name: s.default for s in self.sizes if s.user_set and s.default is not None}

    def get(self, name: str) -> Size | None:
        """The size called ``name``, or None."""
        return next((s for s in self.sizes if s.name == name), None)

    def fill(self, given: Mapping[str, int | None]) -> dict[str, int]:
        """Every size: ``given``'s, the default where it is None (or absent), a product
        where the size is one (checked by :meth:`validate`, not here)."""
        out: dict[str, int] = {}
        for s in self.sizes:
            if not s.product_of:
                value = given.get(s.name)
                out[s.name] = s.default if value is None else value
        for s in self.sizes:
            if s.product_of:
                value = 1
                for n in s.product_of:
                    value *= out[n]
                out[s.name] = value
        return {s.name: out[s.name] for s in self.sizes}

    def validate(self, given: Mapping[str, int | None]) -> dict[str, int]:
        """Check ``given`` (None: the default or the product) in declaration order, then
        every product that was given, then the constraints; returns :meth:`fill`'s sizes.
        A one-line SsmvizError names the first bad size."""
        for s in self.sizes:
            value = given.get(s.name)
            if value is not None:
                check_int(s.name, value, s.minimum, s.maximum)
        out = self.fill(given)
        for s in self.sizes:
            value = given.get(s.name)
            if s.product_of and value is not None and value != out[s.name]:
                raise SsmvizError(
                    f"{s.name} must equal {'·'.join(s.product_of)} = "
                    f"{'·'.join(str(out[n]) for n in s.product_of)} = {out[s.name]}; "
                    f"got {value}")
        self.constraints(out)
        return out


def union(sets: Iterable[SizeSet]) -> dict[str, Size]:
    """Every size name of ``sets``, first declaration first; one name with two maxima is
    an SsmvizError (a limit is the name's, not a family's)."""
    out: dict[str, Size] = {}
    for size_set in sets:
        for s in size_set.sizes:
            seen = out.setdefault(s.name, s)
            if seen.maximum != s.maximum:
                raise SsmvizError(f"size {s.name} has two maxima: {seen.maximum} and "
                                  f"{s.maximum}")
    return out
