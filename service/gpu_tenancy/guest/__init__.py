"""What the service puts inside a lease's VMs."""
