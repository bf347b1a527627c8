"""The runtime layer: tools that take artifacts by reference.

``Ref`` (an id to the model, bytes to the tool), the ``Toolbox`` dispatcher
that resolves Refs at dispatch in the caller's scope, and the types a tool
sees (``ToolContext``) or returns (``Artifact``).
"""

from refvault.toolbox.ref import Ref
from refvault.toolbox.remote import RemoteLink
from refvault.toolbox.toolbox import Artifact, Observation, Toolbox, ToolContext, ToolEvent

__all__ = ["Artifact", "Observation", "Ref", "RemoteLink", "ToolContext", "ToolEvent", "Toolbox"]
