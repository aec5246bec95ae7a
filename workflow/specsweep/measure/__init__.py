"""One configuration measured end to end: the runner (runner), what is refused before a server
starts (before_start), the client (client), the workload (workload), the section statistics
(section_stats), what a section must pass before its figures count (section_checks), the
requests in flight as the client and the server counted them (in_flight), the goodput search
(goodput), the result document (result_doc), the progress lines (progress), the
quiet-host guard (quiet_host) and what it reads of the job's GPUs (gpu_watch), the energy a
section's tokens cost on them (energy), what a job
holds, devices and ports (leases), the host-wide locks they are made of (locks), the GPUs a job
may take (gpu_pool), whether a GPU's memory is free (gpu_memory), the host's facts (host_facts), the
provenance (provenance), the policy around an attempt (attempts), a signal that ends a launch
(interrupts), and whether a host is ready (doctor)."""
