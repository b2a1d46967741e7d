"""entrepot's gateway: front doors, queue manager, links, CLI; composes store and mapping."""

__all__: list[str] = []
