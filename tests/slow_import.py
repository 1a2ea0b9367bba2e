"""A module slow to import, as TVM is on a cold disk: for the worker start-up test."""

import time

time.sleep(1.5)

WORKER_IMPORTS = ("tests.slow_import_dep",)


def quick() -> int:
    from tests.slow_import_dep import VALUE  # imported lazily, as autotune.measure.worker imports tvm

    return VALUE
