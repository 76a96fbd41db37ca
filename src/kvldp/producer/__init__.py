"""kvldp's device SDK: perturb key-value pairs on the device and publish the reports.

>>> from kvldp.producer import Collector
>>> collector = Collector("checkout.toml", bootstrap_servers="kafka:9092")  # doctest: +SKIP

:class:`Collector` reads the collection file the aggregator reads too, perturbs every
report locally (raw values never leave the device), keeps the device's privacy state and
publishes to Kafka, or posts to ``kvldp gateway`` over HTTPS
(``Collector(collection, endpoint="https://...", token=...)``). The package holds what runs on a device and nothing else: the
collector and its parts (where its messages go, the privacy accounts of the devices it
reports for, the perturbing, publishing and delivery of their reports), the device's
privacy state, the SDK's input pairs and its rule on packing reports, its warning when
PCKV's ``ell`` truncates a device's pairs, and the follower of an interactive collection's
rounds. Importing it loads the
SDK only: not the aggregator, the simulations, the experiments or the benchmarks.
"""

from kvldp.common.config.collection import Collection
from kvldp.common.config.collection_file import load_collection
from kvldp.common.errors import KvldpError
from kvldp.common.files.file_lock import LockTimeout
from kvldp.common.spec.privacy import PrivacyBudgetExhausted
from kvldp.kafka.client_config import KafkaConfig
from kvldp.kafka.client_start import KafkaStartError, KafkaUnreachable
from kvldp.producer.bearer_token import InvalidToken, TokenFile
from kvldp.producer.collector import Collector
from kvldp.producer.device_state import ReportStatus
from kvldp.producer.gateway_client import DeliveryError, GatewayUnavailable, ReportRefused
from kvldp.producer.retry_policy import RetryPolicy

__all__ = [
    "Collection",
    "Collector",
    "DeliveryError",
    "GatewayUnavailable",
    "InvalidToken",
    "KafkaConfig",
    "KafkaStartError",
    "KafkaUnreachable",
    "KvldpError",
    "LockTimeout",
    "PrivacyBudgetExhausted",
    "ReportRefused",
    "ReportStatus",
    "RetryPolicy",
    "TokenFile",
    "load_collection",
]
