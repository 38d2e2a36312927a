"""kafka: see docs/architecture.md."""
