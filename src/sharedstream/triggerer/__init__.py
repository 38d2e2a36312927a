"""The triggerer process: shared-stream manager, units of work, watcher loading, operations."""
