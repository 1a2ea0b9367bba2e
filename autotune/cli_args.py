"""Command-line arguments that `autotune tune` (also --dynamic) and `autotune tune-model` share."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from .measure import RunnerOptions
from .retime import RETIMES
from .tuners import options_type
from .tuners.options import XGBOptions


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least `low` (a bad value is a one-line usage error naming the range)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, not {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, not {value}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def number_above(low: float, inclusive: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number above `low` (or at least `low` when `inclusive`)."""
    bound = f"{'>=' if inclusive else '>'} {low:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number {bound}, not {text!r}") from None
        if not (value >= low if inclusive else value > low) or value == float("inf"):
            raise argparse.ArgumentTypeError(f"must be a finite number {bound}, not {text}")
        return value

    parse.__name__ = f"number {bound}"
    return parse


def add_runner_arguments(p: argparse.ArgumentParser) -> None:
    """How candidates are timed: --threads, --timeout, --repeat, --min-repeat-ms, --cache-flush."""
    p.add_argument("--threads", type=int_at_least(0), default=0,
                   help="kernel threads: 0 (the default) every core, or 1 to the cores of the measuring machine")
    p.add_argument("--timeout", type=number_above(0), default=10.0,
                   help="seconds per candidate run (load+check+time), above 0")
    p.add_argument("--repeat", type=int_at_least(1), default=3,
                   help="timed samples per candidate, at least 1 (its record keeps each)")
    p.add_argument("--min-repeat-ms", type=number_above(0, inclusive=True), default=100.0,
                   help="each sample calls the kernel back to back for at least this long")
    p.add_argument("--cache-flush", action="store_true",
                   help="flush the operands (all but the first) from the CPU cache before every timed call, "
                        "as a model's layers find their weights (records say `timing: flushed`)")


def runner_options(args: argparse.Namespace) -> RunnerOptions:
    """The RunnerOptions of the arguments add_runner_arguments added; unless the command measures through RPC
    (`--rpc-key`: the servers' thread count is checked when they answer), --threads must fit this machine."""
    options = RunnerOptions(threads=args.threads, timeout=args.timeout, repeat=args.repeat,
                            min_repeat_ms=args.min_repeat_ms, cache_flush=args.cache_flush)
    if not getattr(args, "rpc_key", None):
        options.check_local()
    return options


def xgb_options(args: argparse.Namespace) -> XGBOptions:
    """The xgb tuner's options of the arguments add_search_arguments added, and --cost-model where the command has
    it (not --transfer: callers differ)."""
    return XGBOptions(features=args.features, cold_start=args.cold_start, cost_model=getattr(args, "cost_model", None))


OPTION_READERS = {XGBOptions: xgb_options}  # a tuner's options type -> what reads it from the arguments


def tuner_options(args: argparse.Namespace) -> XGBOptions | None:
    """The options of the tuner --tuner names (None: one without options); an unknown tuner is an AutotuneError."""
    read = OPTION_READERS.get(options_type(args.tuner))
    return read(args) if read is not None else None


def checked_tuner_options(args: argparse.Namespace) -> XGBOptions | None:
    """`tuner_options`, and the saved model --cost-model names loaded once to check it: a file that cannot be
    used, or of other features than --features, fails before any work."""
    options = tuner_options(args)
    if isinstance(options, XGBOptions):
        options.saved_model()
    return options


def add_cc_argument(p: argparse.ArgumentParser) -> None:
    """--cc: the C++ cross compiler of a cross target (`target.cross_compiler`)."""
    p.add_argument("--cc", help="the C++ compiler that links a cross target's kernels (default: the target's "
                                "mtriple-g++ on PATH, e.g. aarch64-linux-gnu-g++)")


def add_shipped_argument(p: argparse.ArgumentParser, effect: str) -> None:
    """--no-shipped: leave out the tuning knowledge autotune ships (`autotune.shipped`); `effect`: what that does
    in this command."""
    p.add_argument("--no-shipped", action="store_true",
                   help=f"leave out the tuning knowledge autotune ships for the target's class: {effect} "
                        "(AUTOTUNE_NO_SHIPPED=1 does the same everywhere)")


def shipped_flag(args: argparse.Namespace) -> bool | None:
    """False where --no-shipped was given, else None (`autotune.shipped.shipped_enabled` decides)."""
    return False if getattr(args, "no_shipped", False) else None


def add_search_arguments(p: argparse.ArgumentParser, transfer_default: str) -> None:
    """--features, --cold-start, --transfer (xgb tuner), --retime; `transfer_default`: what --transfer defaults to."""
    p.add_argument("--features", default="loop", choices=["loop", "knob"], help="xgb: cost model features")
    p.add_argument("--cold-start", default="random", choices=["random", "roofline"],
                   help="xgb: how the first batch is picked when no record guides it (default random; roofline: the "
                        "best of a random sample by a roofline estimate, CPU targets with loop features)")
    p.add_argument("--transfer", nargs="*", metavar="LOG",
                   help=f"xgb: logs of other tasks to pre-train on (default: {transfer_default}; where they hold "
                        "none of a task's operator, the shipped knowledge's); give no LOG to turn transfer off")
    add_shipped_argument(p, "xgb transfers from the other logs only")
    p.add_argument("--retime", type=int_at_least(0), default=RETIMES, metavar="N",
                   help=f"after the last trial, time the best configs (first measured within 90%% of the best; up "
                        f"to 8, one per 4 trials, at least 2) N more times and rank them by their median timing "
                        f"(default {RETIMES}; 0: off)")
