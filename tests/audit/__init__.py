"""The security audit: adversarial inputs, faults and races against the fakes, through the official MCP
client over stdio (`tests.audit.run`). ``make audit`` runs the full plan and prints the goal figures;
``tests/test_audit.py`` runs the quick plan in ``make test``."""
