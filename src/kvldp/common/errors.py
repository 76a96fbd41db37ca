"""The root of kvldp's input errors: anything a user can fix by changing their input.

Front ends (CLI, aggregator) catch :class:`KvldpError` and print one clear line; any
other exception is a bug and keeps its traceback.
"""


class KvldpError(ValueError):
    """Invalid input: configuration, data, report or statistics the user supplied."""
