"""The Kubernetes minors stagger is tested on, what needs a newer one, and the controller's start-up check."""
