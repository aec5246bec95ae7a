"""One configuration measured end to end: the runner (runner), what is refused before a server
starts (before_start), the client (client), the workload (workload), the section statistics
(section_stats), what a section must pass before its figures count (section_checks), the
requests in flight as the client and the server counted them (in_flight), the goodput search
(goodput), the result document (result_doc), the progress lines (progress), the energy a
section's tokens cost (energy), the provenance (provenance), the policy around an attempt
(attempts), a signal that ends a launch (interrupts), and whether a host is ready (doctor).
The machine it runs on (its facts, the quiet-host guard, leases and locks, GPUs) is ``host``'s."""
