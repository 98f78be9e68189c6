"""initclient: the init container that waits for a start-up slot from lockd."""
