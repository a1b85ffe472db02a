"""The small vision-language-action policy family."""

from policies.vla.configuration_vla import VLAConfig
from policies.vla.modeling_vla import VLAPolicy

__all__ = ["VLAConfig", "VLAPolicy"]
