"""What a configuration's rows in the summary are: measured (ok), or why not. One word each, read
by every table, figure, report and comparison."""

OK, FAILED, EXCLUDED, NOT_RUN, INVALID = "ok", "failed", "excluded", "not run", "invalid result"
# Measured, but at a budget above 0 the server drafted no token in any section of any launch: not a
# measurement of that budget (a server that ignored the draft setting, a text with nothing to draft).
NOT_ENGAGED = "speculation did not engage"
# Not launched: a shorter context, all else equal, ran out of memory (infer_failures): "inferred: out
# of memory at context c".
INFERRED = "inferred"
# What no further run of the same study would change: the study's answer is final with these.
SETTLED = (OK, EXCLUDED, NOT_ENGAGED, INFERRED)
