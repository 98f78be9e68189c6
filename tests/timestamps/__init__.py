"""RFC 3339 timestamps."""
