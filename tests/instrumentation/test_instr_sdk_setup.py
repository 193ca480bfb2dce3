"""Which exporters the one import picks from the standard variables (the subprocess test covers the wiring)."""

from __future__ import annotations

import logging

import pytest

from otel_context import sdk_setup


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, ["otlp_proto_http"]),  # the specification's defaults: otlp over http/protobuf
        ({"OTEL_TRACES_EXPORTER": "none"}, []),
        (
            {"OTEL_TRACES_EXPORTER": "otlp,console", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            ["otlp_proto_grpc", "console"],
        ),
        (
            {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"},
            ["otlp_proto_http"],
        ),
    ],
)
def test_trace_exporter_names(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: list[str]) -> None:
    for key in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert sdk_setup._exporter_names("traces") == expected


def test_bad_protocol_is_named(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # A telemetry setting never stops the app: a warning names it, and the default protocol applies.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        assert sdk_setup._exporter_names("metrics") == ["otlp_proto_http"]
    assert any("OTEL_EXPORTER_OTLP_PROTOCOL='http/json'" in r.getMessage() for r in caplog.records)


def test_sdk_disabled_configures_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert sdk_setup.configure_from_env() == (False, False)


def test_existing_providers_are_kept(spans: object, metric_reader: object) -> None:
    # The session's global providers are set (tests/conftest.py): nothing is replaced.
    assert sdk_setup.tracer_provider_is_set() and sdk_setup.meter_provider_is_set()
    assert sdk_setup.configure_from_env() == (False, False)
