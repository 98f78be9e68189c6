"""webhook: admission webhook, group pacer service and reconciler (arrives with the controller issue)."""
