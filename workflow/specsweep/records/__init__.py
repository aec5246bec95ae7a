"""What a measurement leaves: where a study keeps its files (paths), the request, result and
failure documents (request, result, failure), the summary's status words (status), how they
are written and read (store), and the failures inferred from another's record (inferred)."""
