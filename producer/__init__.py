"""kvldp's device SDK: perturb key-value pairs on the device and publish the reports.

>>> from kvldp.producer import Collector
>>> collector = Collector("checkout.toml", bootstrap_servers="kafka:9092")  # doctest: +SKIP

:class:`Collector` reads the collection file the aggregator reads too, perturbs every
report locally (raw values never leave the device), keeps the device's privacy state and
publishes to Kafka. Importing this package loads the SDK only: not the aggregator, the
experiments or the benchmarks. The rest of the package is what simulated fleets and
replays are built from (:mod:`~kvldp.producer.simulate`, :mod:`~kvldp.producer.fleet`,
:mod:`~kvldp.producer.recording`).
"""

from kvldp.common.collection import Collection
from kvldp.common.collection_file import load_collection
from kvldp.common.errors import KvldpError
from kvldp.common.kafka_config import KafkaConfig
from kvldp.common.kafka_start import KafkaStartError
from kvldp.common.privacy import PrivacyBudgetExhausted
from kvldp.producer.collector import Collector
from kvldp.producer.device_state import ReportStatus

__all__ = [
    "Collection",
    "Collector",
    "KafkaConfig",
    "KafkaStartError",
    "KvldpError",
    "PrivacyBudgetExhausted",
    "ReportStatus",
    "load_collection",
]
