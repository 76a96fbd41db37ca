"""kvldp's front door: the ``kvldp`` command line (see :mod:`kvldp.cli`)."""
