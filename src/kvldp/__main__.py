"""``python -m kvldp``: the same command line as the ``kvldp`` entry point (:func:`kvldp.cli.main`)."""

from kvldp.cli import main

raise SystemExit(main())
