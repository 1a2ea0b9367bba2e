"""`python -m autotune.measure._worker_main READ_FD WRITE_FD`: the body of an isolated worker process.

A module of its own, imported by nothing: run with -m, a module that the package had already imported would be
executed a second time as __main__.
"""

import sys

from autotune.measure.pool import serve_fds

if __name__ == "__main__":
    serve_fds(int(sys.argv[1]), int(sys.argv[2]))
