"""Service side of kvldp (consumer loop, state, refit, exporter) — built by the pipeline issue."""
