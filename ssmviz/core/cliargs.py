"""The argument parser of every ssmviz command line (the CLI's commands and the app's).

Two rules hold for every option, at the root rather than case by case:

- an empty value is refused (``--kernel ''`` from an unset ``$K`` must not quietly run
  something else): every option's ``type`` is wrapped in a check for it;
- an option given twice is refused (``--export a.npz --export b.npz`` would keep the last
  one silently), flags included.

A bad argument is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

EXIT_USAGE = 2


def _non_empty(flag: str, parse: Callable[[str], Any] | None) -> Callable[[str], Any]:
    def check(text: str) -> Any:
        if not str(text).strip():
            raise argparse.ArgumentTypeError("needs a value; got an empty string")
        return parse(text) if parse is not None else text

    check.__name__ = getattr(parse, "__name__", "str")  # argparse names a type in errors
    return check


class _Once(argparse.Action):
    """Wraps an option's own action: a second occurrence is an error."""

    def __init__(self, *args: Any, inner: type[argparse.Action] | None = None,
                 **kwargs: Any) -> None:
        self._inner = (inner or argparse._StoreAction)(*args, **kwargs)
        fields = {k: v for k, v in vars(self._inner).items() if k != "container"}
        super().__init__(**{k: fields[k] for k in (
            "option_strings", "dest", "nargs", "const", "default", "type", "choices",
            "required", "help", "metavar")})

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        seen = namespace.__dict__.setdefault("_given_options", set())
        if self.dest in seen:
            parser.error(f"{option_string or self.dest} is given twice; give it once")
        seen.add(self.dest)
        self._inner(parser, namespace, values, option_string)


_FLAG_ACTIONS = {"store_true": argparse._StoreTrueAction,
                 "store_false": argparse._StoreFalseAction}


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line and exits 2, and refuses empty
    values and repeated options."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"ssmviz: error: {message}\n")

    def add_argument(self, *names: str, **kwargs: Any) -> argparse.Action:
        action = kwargs.get("action")
        optional = bool(names) and names[0].startswith("-")
        if optional and action in (None, "store", *_FLAG_ACTIONS):
            if action in _FLAG_ACTIONS:
                kwargs["inner"] = _FLAG_ACTIONS[action]
            else:
                kwargs["type"] = _non_empty(names[-1], kwargs.get("type"))
            kwargs["action"] = _Once
        elif not optional and action is None:
            kwargs["type"] = _non_empty(kwargs.get("metavar") or names[0], kwargs.get("type"))
        return super().add_argument(*names, **kwargs)

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        parsed = super().parse_args(args, namespace)
        parsed.__dict__.pop("_given_options", None)
        return parsed


def build_app_parser() -> argparse.ArgumentParser:
    """The desktop app's options (``ssmviz [session.json] [--screenshot PATH.png]
    [--cpu]``): the app parses them; ``ssmviz --help`` lists them beside the commands."""
    p = Parser(prog="ssmviz", description="SSM kernel visualiser (desktop app).")
    p.add_argument("session", nargs="?",
                   help="a session .json to open (samples: assets/sessions/*.json)")
    p.add_argument("--screenshot", metavar="PATH.png",
                   help="open, wait for the first run, save the window as PNG and exit")
    p.add_argument("--cpu", action="store_true", help="force the CPU adapter (lavapipe)")
    return p
