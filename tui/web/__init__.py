"""`specdeck web`: the console in a browser (textual-serve), behind a secret."""
