"""PostgreSQL: connection pool, migrations and every query Tally runs."""
