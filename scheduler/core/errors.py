"""The perfsched exception tree, in one place.

- ``PerfschedError``: base of every error perfsched raises on purpose.
  - ``ConfigError``: bad configuration or input given by a user (policy config, cluster spec, trace,
    settings, CLI arguments). The message names the file/field; CLIs print it and exit 2, no traceback.
  - ``TemporaryError``: an operation that may succeed if retried (API conflicts, timeouts); callers
    retry with backoff.
  - ``PermanentError``: an operation that will not succeed by retrying (rejected by validation,
    forbidden); callers record it and move on.

Unschedulable jobs are *not* errors: they are ``scheduler.core.decisions.Unschedulable`` values.
Pure module.
"""

from __future__ import annotations


class PerfschedError(Exception):
    """Base class of perfsched's own errors."""


class ConfigError(PerfschedError, ValueError):
    """User-supplied configuration or input is invalid; the message names what and where."""


class TemporaryError(PerfschedError):
    """Might succeed later: retry with backoff."""


class PermanentError(PerfschedError):
    """Will not succeed by retrying."""
