"""Dashboards and alerts as code for otel-context (a dev-only tool; the library never imports it).

``names`` translates OpenTelemetry metric names into every form Prometheus may store them under,
``queries`` holds the PromQL the dashboard and the alerts share, ``alerts`` turns the alert definitions into
Prometheus rules and Grafana alert provisioning, ``dashboard`` builds the Grafana dashboard with
grafana-foundation-sdk, and ``render`` produces every generated file so that ``build.py`` can write or check them.
"""
