"""The exceptions ``perfmodel`` raises on purpose, in one place.

- ``PerfModelError``: base of every error perfmodel raises on purpose (a ``ValueError``).
  - ``InvalidInputError``: a job or hardware description the predictor cannot use (unknown model name
    without parameters, batch size <= 0, GPU count <= 0, unknown GPU type, bad CSV row); the message names
    the field.
    - ``ProfileError``: an operator profile (``perfmodel.profile``) that cannot be read: unknown
      ``schema_version``, a missing field, negative FLOPs, an unknown operator class; the message names it.
  - ``ModelFileError``: the shipped or given model file is missing, corrupt, or written for another
    feature schema; the message names the file and what to do.

``perfmodel`` never imports ``scheduler``; the CLI layer (``scheduler.commands.perfmodel``) turns these into
``scheduler.core.errors.ConfigError`` (message + exit 2). Pure module.
"""

from __future__ import annotations


class PerfModelError(ValueError):
    """Base class of perfmodel's own errors."""


class InvalidInputError(PerfModelError):
    """A job or hardware description is invalid; the message names the field."""


class ModelFileError(PerfModelError):
    """A model file is missing, corrupt, or of another feature-schema version."""


class ProfileError(InvalidInputError):
    """An operator profile is invalid or of another schema version; the message names the field."""
