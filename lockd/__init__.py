"""lockd: the per-node lock daemon."""
