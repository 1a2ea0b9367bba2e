"""The command-line reference (docs/reference/cli.md), rendered from the argparse parsers.

    python -m autotune.cli_reference -o docs/reference/cli.md      # regenerate
    python -m autotune.cli_reference --check docs/reference/cli.md # exit 1 when out of date

Rendered from the parsers' actions, not from `format_help` (which wraps to the terminal's width).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .cli import build_parser

HEADER = """# Command-line reference

Generated from the argument parsers by `python -m autotune.cli_reference -o docs/reference/cli.md`;
a test fails when this page and the parsers disagree. Every command ends bad input with one line naming
the problem and exit code 2.
"""


def _subparsers(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each sub-command, in the order they were added."""
    out = []
    for action in parser._actions:  # noqa: SLF001 - argparse keeps no public list
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            helps = {a.dest: a.help or "" for a in action._choices_actions}  # noqa: SLF001
            out += [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return out


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        name = action.metavar or action.dest
        return f"`{name}`" + (" ..." if action.nargs in ("+", "*") else "")
    if action.nargs == 0:
        metavar = ""
    elif action.choices:
        metavar = " {" + ",".join(map(str, action.choices)) + "}"
    else:
        metavar = " " + (action.metavar or action.dest.upper())
    if action.nargs in ("+", "*") and metavar:
        metavar += " ..."
    return ", ".join(f"`{opt}{metavar}`" for opt in action.option_strings)


def _default(action: argparse.Action) -> str:
    if action.required:
        return "required"
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS) or not action.option_strings:
        return ""
    return f"`{action.default}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The action's help as `--help` prints it (its %(default)s and %% expanded)."""
    return _cell(parser._get_formatter()._expand_help(action)) if action.help else ""  # noqa: SLF001


def _render(prog: str, summary: str, parser: argparse.ArgumentParser, depth: int) -> list[str]:
    lines = [f"{'#' * depth} `{prog}`", ""]
    if summary or parser.description:
        lines += [_cell(parser.description or summary), ""]
    rows = [a for a in parser._actions  # noqa: SLF001
            if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) and a.help != argparse.SUPPRESS]  # noqa: SLF001
    if rows:
        lines += ["| argument | default | meaning |", "|---|---|---|"]
        lines += [f"| {_flags(a)} | {_default(a)} | {_help(parser, a)} |" for a in rows]
        lines.append("")
    for name, help_text, sub in _subparsers(parser):
        lines += _render(f"{prog} {name}", help_text, sub, min(depth + 1, 4))
    return lines


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """The reference page for `parser` (default: autotune's own)."""
    if parser is None:
        parser = build_parser()
    commands = _subparsers(parser)
    lines = [HEADER, "| command | what it does |", "|---|---|"]
    lines += [f"| [`autotune {name}`](#autotune-{name}) | {_cell(help_text)} |" for name, help_text, _ in commands]
    lines.append("")
    for name, help_text, sub in commands:
        lines += _render(f"autotune {name}", help_text, sub, 2)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m autotune.cli_reference", description=__doc__.splitlines()[0])
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("-o", "--output", help="write the page here")
    group.add_argument("--check", metavar="PAGE", help="exit 1 when PAGE differs from what the parsers give")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        if Path(args.check).read_text() != text:
            print(f"{args.check} is out of date: run python -m autotune.cli_reference -o {args.check}",
                  file=sys.stderr)
            return 1
        return 0
    Path(args.output).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
