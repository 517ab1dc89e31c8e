"""Every option of every command has a help text, and one with a default states it."""

from __future__ import annotations

import argparse
import subprocess
import sys

from ssmviz.cli import CHECK_DEFAULTS, build_parser


def _commands(parser: argparse.ArgumentParser | None = None,
              prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every command, nested ones included (``profile new``), by its full name."""
    parser = parser or build_parser()
    out: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[prefix + name] = sub
                out.update(_commands(sub, prefix + name + " "))
    return out


def test_every_option_has_help_and_states_its_default() -> None:
    commands = _commands()
    assert {"check", "sweep", "bench", "tour", "profile new", "profile check"} <= set(commands)
    for name, parser in commands.items():
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            flag = action.option_strings[0] if action.option_strings else action.dest
            assert action.help and action.help.strip(), (name, flag)
            default = action.default if action.default is not None else (
                CHECK_DEFAULTS.get(action.dest) if name == "check" else None)
            if default is not None and not isinstance(action, argparse._StoreTrueAction):
                assert "default" in action.help and str(default) in action.help, \
                    (name, flag, action.help)


def test_check_help_lists_the_sizes_defaults() -> None:
    out = subprocess.run([sys.executable, "-m", "ssmviz", "check", "--help"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    for text in ("sequence length (default: 1024)", "state size N (default: 16)",
                 "(default: 4 for S6, n_heads·d_head for SSD)", "(default: 3)"):
        assert text in " ".join(out.split()), text


def test_each_command_has_its_own_usage_line() -> None:
    """``ssmviz bench --help`` reads ``usage: ssmviz bench [-h] ...``, not the top-level
    usage with the command's name appended."""
    for name, parser in _commands().items():
        usage = parser.format_usage()
        assert usage.startswith(f"usage: ssmviz {name} [-h]"), (name, usage)
        assert "session.json" not in usage and usage.count("usage:") == 1, (name, usage)
    out = subprocess.run([sys.executable, "-m", "ssmviz", "bench", "--help"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.startswith("usage: ssmviz bench [-h] "), out.splitlines()[:2]
