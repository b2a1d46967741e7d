"""entrepot's address translation: format names, redirections, stream-receipt mapping.

Imports nothing from ``gateway`` or ``store``.
"""

__all__: list[str] = []
