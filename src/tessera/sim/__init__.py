"""The trace-driven simulator: traces, workload synthesis, the event-driven simulator, metrics, reports."""
