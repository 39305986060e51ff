"""Extender settings fail fast with the variable named."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from scheduler.settings import Settings


def test_all_zero_weights_are_refused() -> None:
    with pytest.raises(ValidationError, match="PERFSCHED_EXTENDER_WEIGHT_THROUGHPUT, _LOCALITY and _PACKING"):
        Settings(extender_weight_throughput=0, extender_weight_locality=0, extender_weight_packing=0)


def test_tls_needs_both_certificate_and_key() -> None:
    with pytest.raises(
        ValidationError, match="PERFSCHED_EXTENDER_TLS_CERT_FILE and PERFSCHED_EXTENDER_TLS_KEY_FILE"
    ):
        Settings(extender_tls_cert_file="/etc/tls/tls.crt")
    ok = Settings(extender_tls_cert_file="/etc/tls/tls.crt", extender_tls_key_file="/etc/tls/tls.key")
    assert ok.extender_tls_key_file == "/etc/tls/tls.key"


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERFSCHED_EXTENDER_WEIGHT_PACKING", "2.5")
    monkeypatch.setenv("PERFSCHED_EXTENDER_PORT", "9443")
    s = Settings()
    assert (s.extender_weight_packing, s.extender_port) == (2.5, 9443)
    monkeypatch.setenv("PERFSCHED_EXTENDER_PORT", "0")
    with pytest.raises(ValidationError, match="extender_port"):
        Settings()


def test_plan_wait_may_not_outlast_the_hold() -> None:
    with pytest.raises(ValidationError, match="PERFSCHED_EXTENDER_PLAN_WAIT_SECONDS must not exceed"):
        Settings(extender_plan_wait_seconds=40, extender_plan_hold_seconds=30)
    ok = Settings(extender_plan_wait_seconds=10, extender_plan_hold_seconds=60)
    assert (ok.extender_plan_wait_seconds, ok.extender_plan_hold_seconds) == (10, 60)
