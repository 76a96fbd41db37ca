"""Files a caller names: atomic replacement, exclusive locks and checks of a user's paths.

* :mod:`~kvldp.common.files.atomic_file` — writing a file atomically and durably: the
  aggregator's checkpoint, a device's privacy state, a command's output files;
* :mod:`~kvldp.common.files.file_lock` — an exclusive lock on a file, so that processes
  sharing it change it one at a time;
* :mod:`~kvldp.common.files.path_checks` — checks of the paths a user names, made before
  any work starts.

May import only the modules beneath every room (:mod:`kvldp.common.errors`,
:mod:`kvldp.common.typed_fields`, :mod:`kvldp.common.primitives`); every room above may
import it (``pyproject.toml``, ``[tool.importlinter]``, holds the order of the rooms).
"""
