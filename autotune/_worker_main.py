"""`python -m autotune._worker_main READ_FD WRITE_FD`: the body of an isolated worker process."""

import sys

from autotune.workers import serve_fds

if __name__ == "__main__":
    serve_fds(int(sys.argv[1]), int(sys.argv[2]))
