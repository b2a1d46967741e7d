"""entrepot's address translation: format names, redirections, stream-receipt mapping.

Imports nothing from ``gateway`` or ``store``.
"""

from mapping.errors import FormatNameError, MappingError, QueueNameError
from mapping.formatnames import FormatName, parse_format_name, parse_queue_url
from mapping.names import QueuePath, parse_queue_path

__all__ = ["MappingError", "QueueNameError", "FormatNameError", "FormatName", "QueuePath",
           "parse_format_name", "parse_queue_url", "parse_queue_path"]
