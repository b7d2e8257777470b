"""Floor 5: every check on a bundle, all problems at once (checks.py): what `bundle verify` reports and what every
command that takes a bundle requires. Above the decision, whose libraries and tables a bundle must agree with."""
