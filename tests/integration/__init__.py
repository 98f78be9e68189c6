"""Parts run together as real processes."""
