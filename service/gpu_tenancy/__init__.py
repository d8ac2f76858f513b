"""gpu-tenancy: lease passthrough GPUs on an OpenStack cloud."""

__version__ = "0.1.0"
