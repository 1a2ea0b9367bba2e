"""Errors a user can cause and fix: each prints as one line, never as a traceback."""


class AutotuneError(ValueError):
    """Bad input from the user (unknown op, bad shape, bad target, unreadable log...)."""
