"""Lab 00's exercise cases (see labcases/__init__.py); its first ones are still in
tests/labs/test_exercises.py."""
CASES: dict = {}
