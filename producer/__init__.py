"""Device side of kvldp: simulated populations now; the publishing SDK joins with the pipeline."""
