"""ops: see docs/architecture.md."""
