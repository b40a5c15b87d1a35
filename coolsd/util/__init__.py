"""Infrastructure shared by every layer; imports nothing else from coolsd.

`checks.py`: the one dialect of value checks (check_number / check_int / check_bool / check_choice ->
ValueError naming the parameter), for the library's arguments and a visitor's alike; `format.py`: the one
number formatter; `figures.py`: the benchmark's Pareto figure; `sheet.py`: the labelled picture sheets (PIL)
and pixels to RGB; `jsonsafe.py`: JSON-safe values (nan / inf -> null); `paths.py`: where the shipped assets live.
"""
