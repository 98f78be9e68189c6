"""webhook: stagger's controller, `python -m webhook`: the mutating admission webhook, the group pacers
and their grant API, the reconcilers that release held pods, and leader election (`controller.py` puts
them together; docs/design.md, "Where things are", has the map)."""
