"""Measurement: build candidates, run them (locally, over RPC, or replayed), and the values passed between.

    types        MeasureInput, BuildResult, MeasureResult, ErrorKind: plain values; failure causes summed up
    interface    the Builder and Runner protocols, RunnerOptions, what records say of a runner
    local        LocalBuilder, LocalRunner: isolated worker processes on this machine
    pool         the worker processes (parent-enforced timeouts); worker: what runs inside them
    rpc          RPCRunner: kernels timed on RPC servers; tracker: the tracker's protocol
    rpc_services starting trackers and servers, `autotune rpc ...` (not imported here: run with -m)
    replay       ReplayRunner/ReplayBuilder (recorded results), SimulatedRunner/SimulatedBuilder (no machine)
    build_check  build-only runs; timing: timing a kernel or a Python callable
"""

from .interface import Builder, Runner, RunnerOptions, record_versions, runner_timing
from .local import LocalBuilder, LocalRunner
from .replay import ReplayBuilder, ReplayRunner, SimulatedBuilder, SimulatedRunner, first_results
from .rpc import RPCRunner
from .types import BuildResult, ErrorKind, MeasureInput, MeasureResult, error_summary, failure_reason

__all__ = ["Builder", "BuildResult", "ErrorKind", "LocalBuilder", "LocalRunner", "MeasureInput", "MeasureResult",
           "ReplayBuilder", "ReplayRunner", "RPCRunner", "Runner", "RunnerOptions", "SimulatedBuilder",
           "SimulatedRunner", "error_summary", "failure_reason", "first_results", "record_versions",
           "runner_timing"]
