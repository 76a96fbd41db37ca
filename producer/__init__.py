"""Device side of kvldp: the publishing SDK, device privacy state, simulated populations."""

from kvldp.common.privacy import PrivacyBudgetExhausted
from kvldp.producer.collector import Collector
from kvldp.producer.device_state import ReportStatus

__all__ = ["Collector", "PrivacyBudgetExhausted", "ReportStatus"]
