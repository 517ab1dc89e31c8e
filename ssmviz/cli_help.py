"""Help text and defaults for every command-line option (``ssmviz COMMAND --help``).

:func:`document_options` fills in the help of options the parser declares without one and
states each option's default, so no option is listed bare. The problem flags' defaults
are None in the parser (``check --kernel`` tells "unset" from "set"): their effective
defaults come from ``CHECK_DEFAULTS``, passed in.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

#: dest -> what the option does (options whose declaration has no help; the size flags
#: take theirs from the families' size declarations).
OPTION_HELP = {
    "family": "the kernel family",
    "convention": "how Δ and B̄ are formed: mamba (softplus(delta + delta_bias), B̄ = Δ·B) or "
                  "builderforce (no bias; zero-order-hold B̄ for S6)",
    "runs": "GPU runs per case; every run must equal the first (determinism)",
}
#: Defaults that are not a literal value of the parser's or CHECK_DEFAULTS'.
SPECIAL_DEFAULTS = {"d_inner": "4 for S6, n_heads·d_head for SSD",
                    "abi": "picked from the file's exports and entry points"}


def document_options(parser: argparse.ArgumentParser,
                     defaults: Mapping[str, object]) -> None:
    """Give every option of ``parser``'s commands a help text that states its default."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _document(sub, defaults)


def _document(parser: argparse.ArgumentParser, defaults: Mapping[str, object]) -> None:
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        if isinstance(action, argparse._SubParsersAction):  # e.g. ``profile {new,check}``
            action.help = action.help or "one of: " + ", ".join(action.choices)
            for sub in action.choices.values():
                _document(sub, defaults)
            continue
        text = action.help or OPTION_HELP.get(action.dest, "")
        if isinstance(action, argparse._StoreTrueAction) or "default" in text:
            action.help = text
            continue
        default = action.default if action.default is not None else defaults.get(action.dest)
        default = SPECIAL_DEFAULTS.get(action.dest, default)
        if default is not None:
            text = f"{text} (default: {default})" if text else f"default: {default}"
        action.help = text
