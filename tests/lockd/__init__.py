"""lockd as a real HTTP server."""
