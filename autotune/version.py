"""Version strings stamped into every record."""

from __future__ import annotations

import functools

__version__ = "0.1.0"


@functools.lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    import tvm

    return {"autotune": __version__, "tvm": str(tvm.__version__)}
