"""Devices that are not real devices: simulated populations and fleets, data files played
as devices, and recorded traffic played back.

The evaluation datasets (:mod:`~kvldp.sim.datasets`, :mod:`~kvldp.sim.ratings`) and
``device,key,value`` files (:mod:`~kvldp.sim.csvsource`) become device populations of a
collection (:mod:`~kvldp.sim.simulate`); fleets report through the device SDK once per
period (:mod:`~kvldp.sim.fleet`) or round by round (:mod:`~kvldp.sim.round_fleet`);
:mod:`~kvldp.sim.record_replay` writes a topic's raw messages to a file and publishes
them again. ``kvldp produce``, ``record``, ``replay``, the demo, the benchmarks and the
experiments use it; nothing on a device does.
"""
