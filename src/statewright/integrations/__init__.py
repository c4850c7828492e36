"""Integrations with other systems: GitHub (labels as a projection of task state, webhooks
as inputs) and AWS Step Functions (``aws_sfn``)."""
