"""The servers specsweep drives: what each speaks (backends/), its launch command (templates,
command), its process (process, probes, signatures) and what provisioning shares (provision)."""
