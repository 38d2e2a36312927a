"""The broker-agnostic engine (the partition ledger first; the rest moves here with the rooms)."""
