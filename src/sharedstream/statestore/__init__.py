"""Task and asset state stores. Nothing here imports Kafka."""
