"""The one exception type that users see.

Every mistake a user can make (a bad setting, an unknown model, a prompt that does not fit)
raises `HDError` with a message that says what to do. The command line prints that message on one
line and exits with status 2; anything else is a bug and keeps its traceback.
"""


class HDError(ValueError):
    """A user-facing error: bad input, a missing package, an unreachable model."""
