"""The emulator's settings: ``PERFSCHED_EMULATOR_*`` variables, read by ``perfsched emulate``.

Edge module (pydantic-settings). Kept beside the emulator, not in the product's ``scheduler.settings``:
the product does not know the emulator. Validated at start-up; a bad value raises ``ConfigError``
naming the variable. ``perfsched emulate``'s options override them.
"""

from __future__ import annotations

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from scheduler.core.errors import ConfigError

PREFIX = "PERFSCHED_EMULATOR_"


class EmulatorSettings(BaseSettings):
    """The workload emulator's knobs; environment prefix ``PERFSCHED_EMULATOR_``."""

    model_config = SettingsConfigDict(env_prefix=PREFIX, extra="ignore")

    #: emulated seconds per wall-clock second (60: an hour of training per minute)
    time_scale: float = Field(default=1.0, gt=0)
    #: emulated seconds between checkpoints (a restart loses the progress since the last one)
    checkpoint_interval_seconds: float = Field(default=300.0, ge=0)
    #: wall seconds between progress annotations of a running gang
    report_interval_seconds: float = Field(default=2.0, gt=0)
    #: wall seconds between emulator steps
    tick_seconds: float = Field(default=1.0, gt=0)


def load_emulator_settings() -> EmulatorSettings:
    """Read and validate ``PERFSCHED_EMULATOR_*``; ``ConfigError`` naming the variable on a bad value."""
    try:
        return EmulatorSettings()
    except ValidationError as exc:
        parts = []
        for err in exc.errors(include_url=False):
            loc = "".join(str(x) for x in err.get("loc", ()))
            msg = str(err.get("msg", "")).removeprefix("Value error, ")
            parts.append(f"{PREFIX}{loc.upper()}: {msg}" if loc else msg)
        raise ConfigError(f"invalid PERFSCHED_EMULATOR_* settings: {'; '.join(parts)}") from None
    except SettingsError as exc:
        raise ConfigError(f"invalid PERFSCHED_EMULATOR_* settings: {exc}") from None
