"""The servers specsweep drives: what each speaks (backends/), its launch command (templates,
command), its process (process, probes, signatures). What provisioning shares is specsweep.cache."""
