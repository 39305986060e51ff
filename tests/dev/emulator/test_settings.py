"""The emulator's ``PERFSCHED_EMULATOR_*`` settings, read outside the product's settings."""

from __future__ import annotations

import pytest

from perfsched_dev.emulator.settings import load_emulator_settings
from scheduler.core.errors import ConfigError
from scheduler.settings import Settings


def test_variables_are_read_and_the_product_does_not_know_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERFSCHED_EMULATOR_TIME_SCALE", "60")
    monkeypatch.setenv("PERFSCHED_EMULATOR_TICK_SECONDS", "0.25")
    own = load_emulator_settings()
    assert (own.time_scale, own.tick_seconds, own.checkpoint_interval_seconds) == (60.0, 0.25, 300.0)
    assert not any(name.startswith("emulator") for name in Settings.model_fields)


def test_a_bad_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERFSCHED_EMULATOR_REPORT_INTERVAL_SECONDS", "0")
    with pytest.raises(ConfigError, match=r"PERFSCHED_EMULATOR_REPORT_INTERVAL_SECONDS: .*greater than 0"):
        load_emulator_settings()
