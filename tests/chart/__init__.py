"""The Helm chart."""
