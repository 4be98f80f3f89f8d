"""Infrastructure helpers that are not part of the Lambda bundle."""
