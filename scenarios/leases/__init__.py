"""The leases scenario pack: a singleton job under a Postgres lease, fenced at a store."""
