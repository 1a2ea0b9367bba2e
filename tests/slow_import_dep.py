"""Imported lazily by tests.slow_import.quick, and slow to import."""

import time

time.sleep(1.5)

VALUE = 42
