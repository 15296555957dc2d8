"""The trace-replay simulator and controller comparison (the simulator issue)."""
