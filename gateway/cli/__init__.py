"""The `entrepot` command line: serve, admin, mapping, security and offline commands."""
