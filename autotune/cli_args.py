"""Command-line arguments that `autotune tune` and `autotune tune-model` share."""

from __future__ import annotations

import argparse

from .retime import RETIMES


def add_search_arguments(p: argparse.ArgumentParser, transfer_default: str) -> None:
    """--features and --transfer (xgb tuner), --retime; `transfer_default` says what --transfer defaults to."""
    p.add_argument("--features", default="loop", choices=["loop", "knob"], help="xgb: cost model features")
    p.add_argument("--transfer", nargs="*", metavar="LOG",
                   help=f"xgb: logs of other tasks to pre-train on (default: {transfer_default}); give no LOG "
                        "to turn transfer off")
    p.add_argument("--retime", type=int, default=RETIMES, metavar="N",
                   help=f"after the last trial, time the best configs (up to 8, first measured within 90%% of "
                        f"the best) N more times and rank them by their median timing (default {RETIMES}; 0: off)")
