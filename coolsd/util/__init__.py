"""Infrastructure shared by every layer; imports nothing else from coolsd.

`checks.py`: value checks (int / number / choice / bool -> ValueError naming the parameter);
`jsonsafe.py`: JSON-safe values (nan / inf -> null); `paths.py`: where the shipped assets live.
"""
