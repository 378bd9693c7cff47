"""The watch: the judge looks at the policy while GRPO trains (verdict.py says the rule)."""
