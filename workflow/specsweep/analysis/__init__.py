"""From valid results to answers: which results stand and what each configuration is owed
(ledger), the summary (aggregate), what each cell is decided on (cells) and its variance at each
level (variance), the best budget and racing (verdict, answer, race), the server commands to
deploy (deploy) and the draft schedule per load (schedule), the figure
(plot), the report (report), the reports after a failed run (partial_reports), the comparison of two
studies (compare) and the study's hand-over (archive)."""
