"""Several processes on one store: HTTP fronts around one store owner (``server.workers``).

With ``server.workers = N > 1`` the process ``entrepot serve`` starts is the **owner**: it
holds the store, the queue manager, links, timers and every piece of shared state. N
**front** processes share the listening port (``SO_REUSEPORT``) and do the work of a request
that needs no shared state (HTTP, TLS, authentication, header parsing and validation, the
answer); they send the owner compact commands over a Unix socket pair and answer once the
owner has committed. docs/architecture.md draws it.
"""
