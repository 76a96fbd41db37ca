"""Fake devices: what a device that does not run kvldp's client can do to the estimates.

:mod:`~kvldp.attacks.fakes` builds the reports of fake devices for every key-value
mechanism (Wu et al. 2022's maximal-gain, random-message and random-key-value attacks,
and an adaptive attack that imitates genuine report statistics), in each mechanism's
wire fields; :mod:`~kvldp.attacks.defenses` holds the defenses an experiment compares;
:mod:`~kvldp.attacks.experiment` runs a genuine population with and without the fakes
and measures the frequency gain, mean gain and MSE per estimator and defense;
:mod:`~kvldp.attacks.results_table` writes the results table, its README and a plot.
``kvldp attack`` and ``kvldp produce --fake-fraction`` use it.
"""
