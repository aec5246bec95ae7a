"""specsweep: sweep inference-server configurations without ever turning a failure into a number."""

__version__ = "0.1.0"
