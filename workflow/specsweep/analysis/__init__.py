"""From valid results to answers: the summary (aggregate), the figure (plot), the report, the
comparison of two studies (compare) and the archive."""
