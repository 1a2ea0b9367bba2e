"""The package version (the one source: pyproject.toml reads it from here) and the versions stamped into records."""

from __future__ import annotations

import functools

__version__ = "0.1.0"


@functools.lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    """autotune, TVM, the LLVM TVM compiles with (major version) and xgboost, as every record names them."""
    import tvm
    import xgboost
    from tvm.target import codegen

    return {"autotune": __version__, "tvm": str(tvm.__version__), "llvm": str(codegen.llvm_version_major()),
            "xgboost": str(xgboost.__version__)}
