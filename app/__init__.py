"""Tally HTTP edge: routes, middlewares, settings and the CLI."""
