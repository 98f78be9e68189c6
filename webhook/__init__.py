"""webhook: the controller, `python -m webhook`: the mutating admission webhook (built); the group pacer service, leader election and the gate reconciler come next."""
