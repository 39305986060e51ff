"""perfsched's runtime settings: one pydantic-settings object read from ``PERFSCHED_*`` variables.

Validated at start-up; a bad value fails fast with a message naming the variable. Each shell (extender,
operator, emulator) reads the fields it needs from the same object. Edge module (pydantic).
"""

from __future__ import annotations

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """All settings, grouped by the component that reads them. Environment prefix ``PERFSCHED_``."""

    model_config = SettingsConfigDict(env_prefix="PERFSCHED_", extra="ignore")

    # --- shared ------------------------------------------------------------------------------------
    log_level: str = "INFO"
    namespace: str = ""  # empty = all namespaces

    # --- extender (scheduler/extender, `perfsched extender`) -----------------------------------------
    #: address and port `perfsched extender` listens on (kube-scheduler's `urlPrefix` points here)
    extender_host: str = "127.0.0.1"
    extender_port: int = Field(default=8888, ge=1, le=65535)
    #: weights of the prioritize terms (normalised, so only their ratio matters; at least one > 0)
    extender_weight_throughput: float = Field(default=6.0, ge=0)
    extender_weight_locality: float = Field(default=3.0, ge=0)
    extender_weight_packing: float = Field(default=1.0, ge=0)
    #: request bodies larger than this are refused with 413 (5,000 full Node objects are ~10 MiB)
    extender_max_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    #: how long GPUs reserved by a bind stay counted if the watch never shows the pod bound
    extender_assume_ttl_seconds: float = Field(default=60.0, gt=0)
    #: server-side timeout of each watch request (the cache resumes from its resourceVersion after it)
    extender_watch_timeout_seconds: int = Field(default=300, ge=10)
    #: (job, placement) predictions memoised by prioritize
    extender_predict_cache_size: int = Field(default=4096, ge=0)
    #: record each bound pod's node in its TrainingJob's status.placement
    extender_record_placement: bool = True

    @model_validator(mode="after")
    def _extender_weights(self) -> Settings:
        weights = (
            self.extender_weight_throughput,
            self.extender_weight_locality,
            self.extender_weight_packing,
        )
        if sum(weights) <= 0:
            raise ValueError(
                "PERFSCHED_EXTENDER_WEIGHT_THROUGHPUT, _LOCALITY and _PACKING are all 0: one must be > 0"
            )
        return self


def load_settings() -> Settings:
    """Read and validate settings from the environment."""
    return Settings()
