"""``kvldp bench``: measurements, never assertions.

Every subcommand returns rows (dicts) that the CLI prints as a table or as JSON. Figures
that depend on the machine are reported as ratios against a baseline measured in the
same run (``docs/performance.md``).
"""
