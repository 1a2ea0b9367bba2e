"""Functions a worker process runs for the tests: what it has imported."""

import sys


def imported(name: str) -> bool:
    return name in sys.modules


def torch_version() -> str:
    import torch

    return torch.__version__
