"""The machine a measurement runs on, apart from the measurement: its facts (host_facts: CPU,
memory, GPUs by NVML), the quiet-host guard (quiet_host) and what it reads of the job's GPUs
through a section (gpu_watch: processes, clocks, heat, power, energy), what a job holds, devices
and ports (leases), the host-wide locks they are made of (locks), the GPUs a job may take
(gpu_pool) and whether a GPU's memory is free (gpu_memory)."""
