"""One configuration measured end to end: the runner (runner), the client (client), the
workload (workload), the section statistics (section_stats), the goodput search (goodput), the
quiet-host guard (quiet_host) and what it reads of the job's GPUs (gpu_watch), the device
leases (leases), whether a GPU's memory is free (gpu_memory), the host's facts (host_facts), the
provenance (provenance), the policy around an attempt (attempts), and whether a host is ready
(doctor)."""
