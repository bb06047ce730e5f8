"""modelplane's policy pack (the rules: modelplane_rules.py, beside this file)."""

from modelplane_rules import policy_pack

policy_pack()
