"""What the workload controllers decide, as pure functions of the objects they watch."""
