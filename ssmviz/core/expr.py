"""A tiny, safe evaluator for dispatch and shape formulas over size names.

Grammar: integers, size names, ``+ - * / // %``, unary minus, parentheses and the
functions ``ceil_div(a, b)``, ``ceil(a / b)``, ``min(...)``, ``max(...)``. ``a / b``
is exact division (it must divide evenly, or be inside ``ceil(...)``); ``²``/``³``
after a name or ``)`` square/cube it. Never uses ``eval``.

Conditions (:func:`holds`, a profile's size constraints) compare such formulas with
``== != < <= > >=`` (chained like ``1 <= d_state <= 16``), or are one of the tests
``is_pow2(a)`` and ``divides(a, b)`` (a divides b); a formula never holds a comparison.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction

from ssmviz.core.errors import SsmvizError

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z_0-9]*)|(//|==|!=|<=|>=|[-+*/%(),²³<>]))")
_COMPARE = {
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}
#: The tests a condition may be (each true or false, never a number inside a formula).
_TESTS = ("is_pow2", "divides")
_MAX_LEN = 400
_MAX_VALUE = 1 << 62


def _tokens(text: str) -> list[str]:
    if not isinstance(text, str):
        raise SsmvizError(f"formula must be a string; got {type(text).__name__}")
    if len(text) > _MAX_LEN:
        raise SsmvizError(f"formula longer than {_MAX_LEN} characters")
    out: list[str] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            bad = text[pos:].strip()[:1] or text[pos]
            raise SsmvizError(f"formula '{text}': unexpected character '{bad}'")
        out.append(m.group(m.lastindex or 0))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str, names: Mapping[str, int], kind: str = "formula") -> None:
        self.text = text
        self.kind = kind
        self.toks = _tokens(text)
        self.i = 0
        self.names = names
        self.depth = 0

    def _err(self, what: str) -> SsmvizError:
        return SsmvizError(f"{self.kind} '{self.text}': {what}")

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, want: str | None = None) -> str:
        tok = self.peek()
        if tok is None:
            raise self._err("ends too early")
        if want is not None and tok != want:
            raise self._err(f"expected '{want}', found '{tok}'")
        self.i += 1
        return tok

    def parse(self) -> Fraction:
        value = self.expr()
        if self.peek() is not None:
            raise self._err(f"unexpected '{self.peek()}'")
        return value

    def condition(self) -> bool:
        """A comparison (chained: all must hold) or one test call, and nothing else."""
        if (len(self.toks) > 1 and self.toks[0] in _TESTS and self.toks[1] == "("):
            result = self.test(self.take())
            if self.peek() is not None:
                raise self._err(f"unexpected '{self.peek()}' after {self.toks[0]}(...)")
            return result
        left = self.expr()
        if self.peek() not in _COMPARE:
            raise self._err("is no condition: compare with == != < <= > >= or use "
                            f"{'(...) or '.join(_TESTS)}(...)")
        result = True
        while self.peek() in _COMPARE:
            op = self.take()
            right = self.expr()
            result = result and _COMPARE[op](left, right)
            left = right
        if self.peek() is not None:
            raise self._err(f"unexpected '{self.peek()}'")
        return result

    def test(self, name: str) -> bool:
        self.take("(")
        args = [self._nested(self.expr)]
        while self.peek() == ",":
            self.take()
            args.append(self._nested(self.expr))
        self.take(")")
        if name == "is_pow2":
            if len(args) != 1:
                raise self._err("is_pow2 takes 1 argument")
            n = args[0]
            return n.denominator == 1 and n > 0 and (n.numerator & (n.numerator - 1)) == 0
        if len(args) != 2:
            raise self._err("divides takes 2 arguments")
        return args[0] != 0 and (args[1] / args[0]).denominator == 1

    def expr(self) -> Fraction:
        value = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            rhs = self.term()
            value = value + rhs if op == "+" else value - rhs
            self._bound(value)
        return value

    def term(self) -> Fraction:
        value = self.unary()
        while self.peek() in ("*", "/", "//", "%"):
            op = self.take()
            rhs = self.unary()
            if op == "*":
                value = value * rhs
            else:
                if rhs == 0:
                    raise self._err("division by zero")
                if op == "/":
                    value = value / rhs
                elif op == "//":
                    value = Fraction(value // rhs)
                else:
                    value = value % rhs
            self._bound(value)
        return value

    def unary(self) -> Fraction:
        if self.peek() == "-":
            self.take()
            return -self.unary()
        if self.peek() == "+":
            self.take()
            return self.unary()
        return self.power()

    def power(self) -> Fraction:
        value = self.atom()
        while self.peek() in ("²", "³"):
            value = value ** (2 if self.take() == "²" else 3)
            self._bound(value)
        return value

    def atom(self) -> Fraction:
        tok = self.take()
        if tok[0] in "0123456789":
            return self._bound(Fraction(int(tok)))
        if tok == "(":
            value = self._nested(self.expr)
            self.take(")")
            return value
        if tok[0].isalpha() or tok[0] == "_":
            if self.peek() == "(":
                return self.call(tok)
            if tok not in self.names:
                known = ", ".join(sorted(self.names)) or "none"
                raise self._err(f"unknown name '{tok}' (known: {known})")
            return Fraction(int(self.names[tok]))
        raise self._err(f"unexpected '{tok}'")

    def _nested(self, fn):
        self.depth += 1
        if self.depth > 50:
            raise self._err("nested too deeply")
        try:
            return fn()
        finally:
            self.depth -= 1

    def call(self, name: str) -> Fraction:
        self.take("(")
        args = [self._nested(self.expr)]
        while self.peek() == ",":
            self.take()
            args.append(self._nested(self.expr))
        self.take(")")
        if name == "ceil_div":
            if len(args) != 2:
                raise self._err("ceil_div takes 2 arguments")
            if args[1] == 0:
                raise self._err("division by zero")
            return Fraction(-(-args[0] // args[1]))
        if name == "ceil":
            if len(args) != 1:
                raise self._err("ceil takes 1 argument")
            return Fraction(-(-args[0].numerator // args[0].denominator))
        if name == "min":
            return min(args)
        if name == "max":
            return max(args)
        if name in _TESTS:
            raise self._err(f"{name}(...) is a condition, not a number")
        raise self._err(f"unknown function '{name}' (known: ceil_div, ceil, min, max)")

    def _bound(self, value: Fraction) -> Fraction:
        if abs(value) > _MAX_VALUE:
            raise self._err("value too large")
        return value


def evaluate(text: str | int, names: Mapping[str, int]) -> int:
    """The integer value of ``text`` with the given size names; SsmvizError when invalid."""
    if isinstance(text, bool):
        raise SsmvizError(f"formula must be a string or an integer; got {text!r}")
    if isinstance(text, int):
        return text
    value = _Parser(text, names).parse()
    if value.denominator != 1:
        raise SsmvizError(f"formula '{text}' is not an integer ({value}); use ceil_div or //")
    return int(value)


def holds(text: str, names: Mapping[str, int]) -> bool:
    """Whether the condition ``text`` (see the module docstring) holds for the given size
    names; SsmvizError when it is not a valid condition."""
    if not isinstance(text, str):
        raise SsmvizError(f"condition must be a string; got {text!r}"[:200])
    return _Parser(text, names, "condition").condition()


def names_in(text: str) -> set[str]:
    """Size names a formula refers to (function names excluded)."""
    toks = _tokens(text)
    return {
        t for i, t in enumerate(toks)
        if (t[0].isalpha() or t[0] == "_") and not (i + 1 < len(toks) and toks[i + 1] == "(")
    }
