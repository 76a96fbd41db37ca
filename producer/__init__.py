"""Device side of kvldp: the publishing SDK, device privacy state, simulated populations."""

from common.privacy import PrivacyBudgetExhausted
from producer.collector import Collector
from producer.device_state import ReportStatus

__all__ = ["Collector", "PrivacyBudgetExhausted", "ReportStatus"]
