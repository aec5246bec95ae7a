"""What a measurement leaves: where a study keeps its files (paths), the request, result and
failure documents (request, result, failure), the summary's status words (status), how they
are written and read (store), the failures inferred from another's record (inferred), and every
older name and layout, read or carried over (migrations)."""
