"""What a device's privacy guarantee is over many reports, and what keeps it.

* :mod:`~kvldp.common.guarantees.privacy_audit` — the exact privacy audit of a mechanism;
* :mod:`~kvldp.common.guarantees.memo` — memoized reports: a device's report as a keyed
  function of its secret and its state;
* :mod:`~kvldp.common.guarantees.epsilon_rules` — which rule each epsilon figure of a
  collection follows, and over what horizon.

The ``[privacy]`` table and its spending rule are :mod:`kvldp.common.spec.privacy`, below
the mechanisms (which read durations with it); the output models audited here are
:mod:`kvldp.common.channel.output_model`'s. May import :mod:`kvldp.common.config`,
:mod:`kvldp.common.untrusted` and every room below them, never
:mod:`kvldp.common.messages`, which shares its row (``pyproject.toml``,
``[tool.importlinter]``, holds the order of the rooms).
"""
