"""Node throttles."""
