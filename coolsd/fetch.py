"""`python -m coolsd.fetch llamagen --resolution 256|512 [--dir DIR]`: the CLI path, kept stable.

The downloader itself lives with the model it serves: `coolsd.models.llamagen.fetch`.
"""

from coolsd.models.llamagen.fetch import main

if __name__ == "__main__":
    raise SystemExit(main())
