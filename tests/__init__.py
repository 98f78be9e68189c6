"""stagger test suite: one folder per concern."""
