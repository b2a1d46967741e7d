"""entrepot's gateway: HTTP front doors, queue manager, links, CLI — composes store and mapping."""

__all__: list[str] = []
