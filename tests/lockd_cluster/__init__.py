"""lockd in cluster mode against the API emulator."""
