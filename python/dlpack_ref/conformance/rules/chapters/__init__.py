"""The rules by chapter, one module a chapter: each rule of any side
(``@rule(side=...)``) beside the subject made to break it (``@breaks``).
Every module here is a chapter, found by listing this package."""
