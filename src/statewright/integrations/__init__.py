"""Other systems statewright runs with: AWS Step Functions (``aws_sfn``)."""
