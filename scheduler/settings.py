"""perfsched's runtime settings: one pydantic-settings object read from ``PERFSCHED_*`` variables.

Validated at start-up; a bad value fails fast with a message naming the variable. Each shell (extender,
operator, emulator) reads the fields it needs from the same object. Edge module (pydantic).
"""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """All settings, grouped by the component that reads them. Environment prefix ``PERFSCHED_``."""

    model_config = SettingsConfigDict(env_prefix="PERFSCHED_", extra="ignore")

    # --- shared ------------------------------------------------------------------------------------
    log_level: str = "INFO"
    namespace: str = ""  # empty = all namespaces


def load_settings() -> Settings:
    """Read and validate settings from the environment."""
    return Settings()
