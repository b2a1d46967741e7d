"""The aiohttp application: routes, middlewares, problem answers, health and status."""
