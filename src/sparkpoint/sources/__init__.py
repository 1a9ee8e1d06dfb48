"""Where a source starts reading: input listings and start positions Spark's sources accept."""
