"""Where Apache Kafka's jars and Java are, for :mod:`kvldp.broker.apache_kafka`.

``make kafka`` fetches the jars of :data:`KAFKA_VERSION` from Maven Central, as
``deploy/apache-kafka/pom.xml`` pins them, into ``.cache/kafka/VERSION/libs`` of the
source checkout, and marks the directory ``.checked`` once every jar matched its SHA-256
in ``deploy/apache-kafka/libs.sha256``. kvldp runs from there, or from the directory
``KVLDP_KAFKA_LIBS`` names (an installed kvldp has no checkout). A missing Java or
missing jars are one line telling what to do, never a Java stack trace.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from kvldp.broker.child_process import BrokerError

#: the version ``deploy/apache-kafka/pom.xml`` pins (a test checks that they agree)
KAFKA_VERSION = "4.3.1"
#: the environment variable naming a directory of Kafka's jars, instead of the checkout's cache
LIBS_ENV = "KVLDP_KAFKA_LIBS"
#: what ``make kafka`` leaves in the libs directory once every jar matched its checksum
CHECKED_MARK = ".checked"
#: the jar holding ``kafka.Kafka`` and ``kafka.tools.StorageTool``
MAIN_JAR = f"org.apache.kafka.kafka_2.13-{KAFKA_VERSION}.jar"
#: the checkout's root, when kvldp runs from one (``pip install -e .``): src/kvldp/broker/ is 3 below
CHECKOUT = Path(__file__).resolve().parents[3]

FETCH_HINT = "run `make kafka` in kvldp's checkout"


def kafka_libs() -> Path:
    """The directory of Kafka's jars: ``KVLDP_KAFKA_LIBS`` if set, else the checkout's cache,
    which counts only once ``make kafka`` checked it."""
    named = os.environ.get(LIBS_ENV)
    if named:
        libs = Path(named)
        if not (libs / MAIN_JAR).is_file():
            raise BrokerError(
                f"{LIBS_ENV}={named} holds no {MAIN_JAR}: {FETCH_HINT}, or point it at Kafka's libs"
            )
        return libs
    libs = CHECKOUT / ".cache" / "kafka" / KAFKA_VERSION / "libs"
    if not (libs / CHECKED_MARK).is_file():
        raise BrokerError(
            f"Apache Kafka {KAFKA_VERSION} is not fetched: {FETCH_HINT} (or set {LIBS_ENV} to its libs directory)"
        )
    return libs


def java_binary() -> str:
    """The ``java`` on PATH (Kafka 4 needs Java 17 or newer)."""
    java = shutil.which("java")
    if java is None:
        raise BrokerError(f"Apache Kafka needs Java 17 or newer on PATH: {FETCH_HINT}, which installs it")
    return java
