"""What a configuration's rows in the summary are: measured (ok), or why not. One word each, read
by every table, figure, report and comparison."""

OK, FAILED, EXCLUDED, NOT_RUN, INVALID = "ok", "failed", "excluded", "not run", "invalid result"
