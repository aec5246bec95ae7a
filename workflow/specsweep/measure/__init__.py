"""One configuration measured end to end: the runner, the client, the workload, the section
statistics, the quiet-host guard, the device leases, the host's facts and the provenance."""
